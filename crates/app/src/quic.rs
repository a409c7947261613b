//! QUIC Initial packets (RFC 9000 17.2.2), decrypted as RFC 9001 section 5
//! specifies (and RFC 9369 for QUIC version 2): the keys come from the
//! client's first Destination Connection ID and a salt public per version, so
//! any observer can read the TLS ClientHello and ServerHello they carry in
//! CRYPTO frames.
//!
//! [`Initials`] keeps one connection's state: the client's first connection ID
//! and each side's CRYPTO stream, reassembled by offset within a bound.

use ring::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey};
use ring::hkdf;

use crate::Bytes;

/// The versions whose Initials hindsight reads, with their salt and labels.
struct Version {
    salt: [u8; 20],
    /// The packet type bits of an Initial (0 in v1, 1 in v2).
    initial_type: u8,
    /// `quic` or `quicv2`: the key, iv and hp labels' prefix.
    label: &'static str,
}

const V1: Version = Version {
    salt: [
        0x38, 0x76, 0x2c, 0xf7, 0xf5, 0x59, 0x34, 0xb3, 0x4d, 0x17, 0x9a, 0xe6, 0xa4, 0xc8, 0x0c,
        0xad, 0xcc, 0xbb, 0x7f, 0x0a,
    ],
    initial_type: 0,
    label: "quic",
};
const DRAFT_29: Version = Version {
    salt: [
        0xaf, 0xbf, 0xec, 0x28, 0x99, 0x93, 0xd2, 0x4c, 0x9e, 0x97, 0x86, 0xf1, 0x9c, 0x61, 0x11,
        0xe0, 0x43, 0x90, 0xa8, 0x99,
    ],
    initial_type: 0,
    label: "quic",
};
const DRAFT_23: Version = Version {
    salt: [
        0xc3, 0xee, 0xf7, 0x12, 0xc7, 0x2e, 0xbb, 0x5a, 0x11, 0xa7, 0xd2, 0x43, 0x2b, 0xb4, 0x63,
        0x65, 0xbe, 0xf9, 0xf5, 0x02,
    ],
    initial_type: 0,
    label: "quic",
};
const DRAFT_22: Version = Version {
    salt: [
        0x7f, 0xbc, 0xdb, 0x0e, 0x7c, 0x66, 0xbb, 0xe9, 0x19, 0x3a, 0x96, 0xcd, 0x21, 0x51, 0x9e,
        0xbd, 0x7a, 0x02, 0x64, 0x4a,
    ],
    initial_type: 0,
    label: "quic",
};
const V2: Version = Version {
    salt: [
        0x0d, 0xed, 0xe3, 0xde, 0xf7, 0x00, 0xa6, 0xdb, 0x81, 0x93, 0x81, 0xbe, 0x6e, 0x26, 0x9d,
        0xcb, 0xf9, 0xbd, 0x2e, 0xd9,
    ],
    initial_type: 1,
    label: "quicv2",
};

/// The salt and labels of QUIC version `number` (the same choice as
/// Wireshark's): RFC 9000's v1 (and drafts 33-34), RFC 9369's v2, the IETF
/// drafts from 22 and Facebook's mvfst. Google's T050 and T051 are not read:
/// their Initials hold gQUIC frames.
fn version(number: u32) -> Option<&'static Version> {
    match number {
        0x0000_0001 | 0xff00_0021 | 0xff00_0022 => Some(&V1),
        0xff00_001d..=0xff00_0020 => Some(&DRAFT_29),
        0xff00_0017..=0xff00_001c | 0xface_b002 | 0xface_b00e => Some(&DRAFT_23),
        0xff00_0016 | 0xface_b001 => Some(&DRAFT_22),
        0x6b33_43cf => Some(&V2),
        // Reserved versions that force a version negotiation (RFC 9000 15):
        // Wireshark reads their Initials as draft 29's, and clients do so.
        _ if number & 0x0f0f_0f0f == 0x0a0a_0a0a => Some(&DRAFT_29),
        _ => None,
    }
}

/// The bytes of each side's CRYPTO stream kept, at most.
const MAX_CRYPTO: usize = 16 << 10;

/// An HKDF output length for ring.
struct Len(usize);

impl hkdf::KeyType for Len {
    fn len(&self) -> usize {
        self.0
    }
}

/// HKDF-Expand-Label (RFC 8446 7.1) with an empty context.
fn expand_label(prk: &hkdf::Prk, label: &str, len: usize) -> Option<Vec<u8>> {
    let full = format!("tls13 {label}");
    let length = u16::try_from(len).ok()?.to_be_bytes();
    let label_len = [u8::try_from(full.len()).ok()?];
    let info: [&[u8]; 4] = [&length, &label_len, full.as_bytes(), &[0]];
    let mut out = vec![0; len];
    prk.expand(&info, Len(len)).ok()?.fill(&mut out).ok()?;
    Some(out)
}

/// The keys of one side's Initial packets.
struct Keys {
    aead: LessSafeKey,
    iv: [u8; 12],
    hp: aead::quic::HeaderProtectionKey,
}

impl Keys {
    fn new(version: &Version, dcid: &[u8], client: bool) -> Option<Self> {
        let initial = hkdf::Salt::new(hkdf::HKDF_SHA256, &version.salt).extract(dcid);
        let side = if client { "client in" } else { "server in" };
        let secret = expand_label(&initial, side, 32)?;
        let secret = hkdf::Prk::new_less_safe(hkdf::HKDF_SHA256, &secret);
        let key = expand_label(&secret, &format!("{} key", version.label), 16)?;
        let iv = expand_label(&secret, &format!("{} iv", version.label), 12)?;
        let hp = expand_label(&secret, &format!("{} hp", version.label), 16)?;
        Some(Self {
            aead: LessSafeKey::new(UnboundKey::new(&aead::AES_128_GCM, &key).ok()?),
            iv: iv.try_into().ok()?,
            hp: aead::quic::HeaderProtectionKey::new(&aead::quic::AES_128, &hp).ok()?,
        })
    }
}

/// A QUIC variable-length integer (RFC 9000 16).
fn varint(r: &mut Bytes<'_>) -> Option<u64> {
    let first = r.u8()?;
    let len = 1usize << (first >> 6);
    let mut value = u64::from(first & 0x3f);
    for _ in 1..len {
        value = value << 8 | u64::from(r.u8()?);
    }
    Some(value)
}

/// One side's CRYPTO stream: the bytes from offset 0 on, in order, and the
/// frames that came ahead of a gap.
#[derive(Debug, Default)]
struct Crypto {
    bytes: Vec<u8>,
    ahead: Vec<(u64, Vec<u8>)>,
}

impl Crypto {
    fn add(&mut self, offset: u64, data: &[u8]) {
        let end = offset.saturating_add(data.len() as u64);
        if end > MAX_CRYPTO as u64 {
            return;
        }
        self.ahead.push((offset, data.to_vec()));
        while let Some(i) = self
            .ahead
            .iter()
            .position(|(at, _)| *at <= self.bytes.len() as u64)
        {
            let (at, data) = self.ahead.swap_remove(i);
            let seen = (self.bytes.len() as u64).saturating_sub(at) as usize;
            if let Some(rest) = data.get(seen..) {
                self.bytes.extend_from_slice(rest);
            }
        }
    }

    /// The first handshake message, when all of it is there.
    fn message(&self) -> Option<(u8, &[u8])> {
        let mut r = Bytes::new(&self.bytes);
        let kind = r.u8()?;
        let len = r.u24()?;
        Some((kind, r.take(usize::try_from(len).ok()?)?))
    }
}

/// One connection's Initial packets (see the module documentation).
#[derive(Default)]
pub struct Initials {
    /// The QUIC version and the client's first Destination Connection ID.
    first: Option<(u32, Vec<u8>)>,
    client: Crypto,
    server: Crypto,
    client_keys: Option<Keys>,
    server_keys: Option<Keys>,
}

impl std::fmt::Debug for Initials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Initials")
            .field("first", &self.first)
            .field("client", &self.client.bytes.len())
            .field("server", &self.server.bytes.len())
            .finish()
    }
}

/// True when `datagram` starts like a QUIC long-header packet of a version
/// hindsight reads.
pub fn looks_like_initial(datagram: &[u8]) -> bool {
    let mut r = Bytes::new(datagram);
    match (r.u8(), r.u32()) {
        (Some(first), Some(number)) => first & 0x80 != 0 && version(number).is_some(),
        _ => false,
    }
}

impl Initials {
    /// The QUIC version of the first Initial, once one was read.
    pub fn version(&self) -> Option<u32> {
        self.first.as_ref().map(|(v, _)| *v)
    }

    /// Reads the Initial packets of one datagram (coalesced packets too), sent
    /// by the client or not.
    pub fn datagram(&mut self, from_client: bool, datagram: &[u8]) {
        let mut rest = datagram;
        while !rest.is_empty() {
            match self.packet(from_client, rest) {
                Some(len) => rest = rest.get(len..).unwrap_or_default(),
                None => return,
            }
        }
    }

    /// Reads one long-header packet at the start of `bytes`; returns its length.
    fn packet(&mut self, from_client: bool, bytes: &[u8]) -> Option<usize> {
        let mut r = Bytes::new(bytes);
        let first = r.u8()?;
        // A long header; its fixed bit may be cleared (RFC 9287, greasing).
        if first & 0x80 == 0 {
            return None;
        }
        let number = r.u32()?;
        let version = version(number)?;
        let dcid = r.vec8()?.rest;
        let scid = r.vec8()?.rest;
        let kind = (first >> 4) & 0x03;
        // A Retry (type 3 in v1, 0 in v2) names the connection ID the client's
        // next Initials derive their keys from (RFC 9001 5.2); the client sends
        // its ClientHello again from the start. It fills the datagram.
        if kind == version.initial_type.wrapping_add(3) & 0x03 {
            if !from_client
                && let Some((_, original)) = &mut self.first
                && scid.len() <= 20
            {
                *original = scid.to_vec();
                self.client_keys = None;
                self.server_keys = None;
                self.client = Crypto::default();
            }
            return None;
        }
        let initial = kind == version.initial_type;
        let token_len = if initial { varint(&mut r)? } else { 0 };
        r.take(usize::try_from(token_len).ok()?)?;
        let length = usize::try_from(varint(&mut r)?).ok()?;
        let pn_offset = bytes.len().checked_sub(r.rest.len())?;
        let end = pn_offset.checked_add(length)?;
        if !initial || end > bytes.len() {
            return Some(end.min(bytes.len()).max(pn_offset));
        }
        if self.first.is_none() {
            if !from_client || dcid.len() > 20 {
                return None;
            }
            self.first = Some((number, dcid.to_vec()));
        }
        let (_, original) = self.first.as_ref()?;
        let keys = if from_client {
            &mut self.client_keys
        } else {
            &mut self.server_keys
        };
        if keys.is_none() {
            *keys = Keys::new(version, original, from_client);
        }
        let keys = keys.as_ref()?;
        let payload = decrypt(keys, bytes.get(..end)?, pn_offset)?;
        let crypto = if from_client {
            &mut self.client
        } else {
            &mut self.server
        };
        read_frames(crypto, &payload);
        Some(end)
    }

    /// The client's first handshake message (the ClientHello), when whole.
    pub fn client_message(&self) -> Option<(u8, &[u8])> {
        self.client.message()
    }

    /// The server's first handshake message (the ServerHello), when whole.
    pub fn server_message(&self) -> Option<(u8, &[u8])> {
        self.server.message()
    }
}

/// A client Initial packet of QUIC v1 to the connection ID `dcid` (at most 20
/// bytes) with packet number 0, carrying `frames` (padded to 1,200 bytes, as
/// a client's first datagram must be): what tests and the fuzz target feed
/// [`Initials`] with.
#[allow(clippy::arithmetic_side_effects)] // sums of in-memory lengths, and constant offsets
pub fn client_initial(dcid: &[u8], frames: &[u8]) -> Option<Vec<u8>> {
    let keys = Keys::new(&V1, dcid, true)?;
    let mut plain = frames.to_vec();
    // Long header, fixed bit, Initial, 4-byte packet number.
    let mut header = vec![0xc3, 0, 0, 0, 1, u8::try_from(dcid.len()).ok()?];
    header.extend_from_slice(dcid);
    header.extend_from_slice(&[0, 0]); // no source connection ID, no token
    let pad = 1200usize.saturating_sub(header.len() + 2 + 4 + plain.len() + 16);
    plain.resize(plain.len() + pad, 0);
    let length = u16::try_from(4 + plain.len() + 16).ok()?;
    header.extend_from_slice(&(0x4000 | length).to_be_bytes());
    let pn_offset = header.len();
    header.extend_from_slice(&[0, 0, 0, 0]);
    let nonce = Nonce::assume_unique_for_key(keys.iv);
    keys.aead
        .seal_in_place_append_tag(nonce, Aad::from(&header), &mut plain)
        .ok()?;
    let mut packet = header;
    packet.extend_from_slice(&plain);
    let sample = packet.get(pn_offset + 4..pn_offset + 20)?;
    let mask = keys.hp.new_mask(sample).ok()?;
    *packet.first_mut()? ^= mask.first()? & 0x0f;
    for i in 0..4 {
        *packet.get_mut(pn_offset + i)? ^= mask.get(i + 1)?;
    }
    Some(packet)
}

/// Removes header protection and decrypts the packet `packet` (one whole
/// packet, its packet number at `pn_offset`); returns its plaintext payload.
fn decrypt(keys: &Keys, packet: &[u8], pn_offset: usize) -> Option<Vec<u8>> {
    let sample = packet.get(pn_offset.checked_add(4)?..pn_offset.checked_add(20)?)?;
    let mask = keys.hp.new_mask(sample).ok()?;
    let mut header = packet.get(..pn_offset)?.to_vec();
    let first = header.first_mut()?;
    *first ^= mask.first()? & 0x0f;
    let pn_len = usize::from(*first & 0x03) + 1;
    let mut pn = [0u8; 4];
    for (i, byte) in packet
        .get(pn_offset..pn_offset.checked_add(pn_len)?)?
        .iter()
        .enumerate()
    {
        let unmasked = byte ^ mask.get(i.checked_add(1)?)?;
        header.push(unmasked);
        *pn.get_mut(4usize.checked_sub(pn_len)?.checked_add(i)?)? = unmasked;
    }
    let mut nonce = keys.iv;
    for (n, p) in nonce.iter_mut().skip(8).zip(pn) {
        *n ^= p;
    }
    let mut payload = packet.get(pn_offset.checked_add(pn_len)?..)?.to_vec();
    let nonce = Nonce::assume_unique_for_key(nonce);
    let plain = keys
        .aead
        .open_in_place(nonce, Aad::from(&header), &mut payload)
        .ok()?;
    Some(plain.to_vec())
}

/// Takes the CRYPTO frames of a decrypted Initial payload.
fn read_frames(crypto: &mut Crypto, payload: &[u8]) {
    let mut r = Bytes::new(payload);
    while let Some(kind) = varint(&mut r) {
        match kind {
            // PADDING, PING
            0x00 | 0x01 => {}
            // ACK, ACK with ECN counts
            0x02 | 0x03 => {
                let (Some(_largest), Some(_delay), Some(ranges), Some(_first)) = (
                    varint(&mut r),
                    varint(&mut r),
                    varint(&mut r),
                    varint(&mut r),
                ) else {
                    return;
                };
                for _ in 0..ranges.min(1 << 10) {
                    if varint(&mut r).and(varint(&mut r)).is_none() {
                        return;
                    }
                }
                if kind == 0x03 && (0..3).any(|_| varint(&mut r).is_none()) {
                    return;
                }
            }
            // CRYPTO
            0x06 => {
                let (Some(offset), Some(len)) = (varint(&mut r), varint(&mut r)) else {
                    return;
                };
                let Some(data) = usize::try_from(len).ok().and_then(|len| r.take(len)) else {
                    return;
                };
                crypto.add(offset, data);
            }
            // CONNECTION_CLOSE ends what an Initial can say; anything else
            // does not belong in one.
            _ => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unhex(text: &str) -> Vec<u8> {
        let text: String = text.split_whitespace().collect();
        (0..text.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
            .collect()
    }

    /// RFC 9001 appendix A.1: the keys of the example connection ID.
    #[test]
    fn initial_keys_are_those_of_rfc_9001() {
        let dcid = unhex("8394c8f03e515708");
        let initial = hkdf::Salt::new(hkdf::HKDF_SHA256, &V1.salt).extract(&dcid);
        let client = expand_label(&initial, "client in", 32).unwrap();
        assert_eq!(
            client,
            unhex("c00cf151ca5be075ed0ebfb5c80323c4 2d6b7db67881289af4008f1f6c357aea")
        );
        let secret = hkdf::Prk::new_less_safe(hkdf::HKDF_SHA256, &client);
        assert_eq!(
            expand_label(&secret, "quic key", 16).unwrap(),
            unhex("1f369613dd76d5467730efcbe3b1a22d")
        );
        assert_eq!(
            expand_label(&secret, "quic iv", 12).unwrap(),
            unhex("fa044b2f42a3fd3b46fb255c")
        );
        assert_eq!(
            expand_label(&secret, "quic hp", 16).unwrap(),
            unhex("9f50449e04a0e810283a1e9933adedd2")
        );
    }

    #[test]
    fn a_client_hello_in_two_initials_is_read() {
        let mut hello = vec![1, 0, 0, 0x29, 3, 3];
        hello.extend_from_slice(&[7; 32]);
        hello.extend_from_slice(&[0, 0, 2, 0x13, 0x01, 1, 0]);
        let crypto = |offset: u8, data: &[u8]| {
            let mut frame = vec![0x06, offset, u8::try_from(data.len()).unwrap()];
            frame.extend_from_slice(data);
            frame
        };
        let dcid = unhex("8394c8f03e515708");
        let second = client_initial(&dcid, &crypto(20, &hello[20..])).unwrap();
        let first = client_initial(&dcid, &crypto(0, &hello[..20])).unwrap();
        assert!(looks_like_initial(&first));
        let mut initials = Initials::default();
        initials.datagram(true, &first);
        assert_eq!(initials.version(), Some(1));
        assert_eq!(initials.client_message(), None);
        initials.datagram(true, &second);
        assert_eq!(initials.client_message(), Some((1, &hello[4..])));
        // A flipped bit fails the tag: nothing more is read.
        let mut bad = second.clone();
        bad[100] ^= 1;
        let mut fresh = Initials::default();
        fresh.datagram(true, &first);
        fresh.datagram(true, &bad);
        assert_eq!(fresh.client_message(), None);
    }

    #[test]
    fn crypto_frames_out_of_order_are_put_in_order() {
        let mut crypto = Crypto::default();
        crypto.add(4, b"efgh");
        assert_eq!(crypto.message(), None);
        crypto.add(0, &[1, 0, 0, 4]);
        assert_eq!(crypto.message(), Some((1, &b"efgh"[..])));
        crypto.add(u64::MAX - 1, b"xx");
        assert_eq!(crypto.bytes.len(), 8);
    }
}
