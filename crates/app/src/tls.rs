//! TLS hellos (RFC 8446 4.1.2, 4.1.3; RFC 5246 7.4.1) and the fingerprints
//! taken from them: JA3 and JA3S (Salesforce's, as Wireshark 4.0 computes them)
//! and JA4 (FoxIO's, `technical_details/JA4.md`).
//!
//! [`handshake`] reassembles the first handshake message of a record stream,
//! across records; the QUIC reader hands a CRYPTO stream's message to
//! [`ClientHello::parse`] directly.

use std::fmt::Write as _;

use md5::{Digest as _, Md5};
use sha2::Sha256;

use crate::{Bytes, text};

/// Handshake message types.
pub const CLIENT_HELLO: u8 = 1;
/// The ServerHello's type.
pub const SERVER_HELLO: u8 = 2;

/// Extension types that carry what the fingerprints and fields read.
mod ext {
    pub const SERVER_NAME: u16 = 0x0000;
    pub const SUPPORTED_GROUPS: u16 = 0x000a;
    pub const EC_POINT_FORMATS: u16 = 0x000b;
    pub const SIGNATURE_ALGORITHMS: u16 = 0x000d;
    pub const ALPN: u16 = 0x0010;
    pub const SUPPORTED_VERSIONS: u16 = 0x002b;
}

/// GREASE values (RFC 8701): `0x?a?a` with both bytes equal.
pub fn is_grease(value: u16) -> bool {
    value & 0x0f0f == 0x0a0a && value >> 8 == value & 0xff
}

/// What [`handshake`] found at the start of a stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Found<'a> {
    /// The first handshake message: its type and body.
    Message(u8, &'a [u8]),
    /// The stream so far is a TLS record stream that has not finished the message.
    NeedMore,
    /// The stream does not start with a TLS handshake record.
    NotTls,
}

/// Record content types.
const CHANGE_CIPHER_SPEC: u8 = 20;
const ALERT: u8 = 21;
const HANDSHAKE: u8 = 22;

/// True when `stream` starts like a TLS record before any application data (a
/// handshake, an alert, a change_cipher_spec; version 3.x), as far as it goes.
pub fn looks_like_tls(stream: &[u8]) -> bool {
    let kind_ok = |kind: &u8| matches!(*kind, CHANGE_CIPHER_SPEC | ALERT | HANDSHAKE);
    match stream {
        [] => false,
        [kind] => kind_ok(kind),
        [kind, 3] => kind_ok(kind),
        [kind, 3, minor, ..] => kind_ok(kind) && *minor <= 4,
        _ => false,
    }
}

/// The first handshake message of a TLS record stream, reassembled across
/// records into `scratch` when it spans several. Alert and change_cipher_spec
/// records before it are passed over (a server may warn before its hello).
pub fn handshake<'a>(stream: &'a [u8], scratch: &'a mut Vec<u8>) -> Found<'a> {
    if !looks_like_tls(stream) {
        return Found::NotTls;
    }
    scratch.clear();
    let mut r = Bytes::new(stream);
    // One record usually holds the whole message: it is then not copied.
    let mut first: Option<&'a [u8]> = None;
    loop {
        let (Some(kind), Some(_version), Some(fragment)) = (r.u8(), r.u16(), r.vec16()) else {
            return Found::NeedMore;
        };
        match kind {
            HANDSHAKE => {}
            CHANGE_CIPHER_SPEC | ALERT if first.is_none() && scratch.is_empty() => continue,
            _ => return Found::NotTls,
        }
        match first.take() {
            None if scratch.is_empty() => first = Some(fragment.rest),
            Some(one) => {
                scratch.extend_from_slice(one);
                scratch.extend_from_slice(fragment.rest);
            }
            None => scratch.extend_from_slice(fragment.rest),
        }
        if message(first.unwrap_or(scratch)).is_some() {
            break;
        }
    }
    let scratch: &'a Vec<u8> = scratch;
    match message(first.unwrap_or(scratch)) {
        Some((kind, body)) => Found::Message(kind, body),
        None => Found::NeedMore,
    }
}

/// The handshake message at the start of `bytes`, if it is all there.
fn message(bytes: &[u8]) -> Option<(u8, &[u8])> {
    let mut m = Bytes::new(bytes);
    let kind = m.u8()?;
    let len = m.u24()?;
    Some((kind, m.take(usize::try_from(len).ok()?)?))
}

/// The parts of a ClientHello the fields and fingerprints need.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ClientHello {
    /// The legacy version field.
    pub version: u16,
    /// Cipher suites in order, GREASE included.
    pub ciphers: Vec<u16>,
    /// Extension types in order, GREASE included.
    pub extensions: Vec<u16>,
    /// The first host name of the server_name extension.
    pub sni: Option<String>,
    /// ALPN protocol names in order.
    pub alpn: Vec<Vec<u8>>,
    /// The supported_groups extension's values in order.
    pub groups: Vec<u16>,
    /// The ec_point_formats extension's values.
    pub point_formats: Vec<u8>,
    /// The signature_algorithms extension's values in order.
    pub signature_algorithms: Vec<u16>,
    /// The supported_versions extension's values.
    pub supported_versions: Vec<u16>,
    /// The extensions' length runs past the message (or is cut): JA3 then
    /// ends after the ciphers, as Wireshark writes it for such a hello.
    pub malformed_extensions: bool,
}

/// The parts of a ServerHello the fields and JA3S need.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ServerHello {
    /// The legacy version field.
    pub version: u16,
    /// The chosen cipher suite.
    pub cipher: u16,
    /// Extension types in order.
    pub extensions: Vec<u16>,
    /// The supported_versions extension's version (TLS 1.3).
    pub selected_version: Option<u16>,
}

fn u16s(mut list: Bytes<'_>) -> Vec<u16> {
    let mut out = Vec::with_capacity(list.rest.len() / 2);
    while let Some(value) = list.u16() {
        out.push(value);
    }
    out
}

impl ClientHello {
    /// Parses a ClientHello's body (after the handshake type and length).
    pub fn parse(body: &[u8]) -> Option<Self> {
        let mut r = Bytes::new(body);
        let mut hello = ClientHello {
            version: r.u16()?,
            ..Self::default()
        };
        r.take(32)?;
        r.vec8()?;
        hello.ciphers = u16s(r.vec16()?);
        // A compression list cut short is an empty one (some hellos in the
        // wild end here).
        let _ = r.vec8();
        if r.is_empty() {
            return Some(hello);
        }
        let Some(mut extensions) = r.vec16() else {
            hello.malformed_extensions = true;
            return Some(hello);
        };
        while !extensions.is_empty() {
            let (Some(kind), Some(mut data)) = (extensions.u16(), extensions.vec16()) else {
                break;
            };
            hello.extensions.push(kind);
            // A malformed extension's content is left out; its type still counts.
            let _ = hello.read_extension(kind, &mut data);
        }
        Some(hello)
    }

    fn read_extension(&mut self, kind: u16, data: &mut Bytes<'_>) -> Option<()> {
        match kind {
            ext::SERVER_NAME => {
                let mut list = data.vec16()?;
                while !list.is_empty() {
                    let name_type = list.u8()?;
                    let name = list.vec16()?;
                    if name_type == 0 && self.sni.is_none() {
                        self.sni = Some(text(name.rest));
                    }
                }
            }
            ext::ALPN => {
                let mut list = data.vec16()?;
                while !list.is_empty() {
                    self.alpn.push(list.vec8()?.rest.to_vec());
                }
            }
            ext::SUPPORTED_GROUPS => self.groups = u16s(data.vec16()?),
            ext::EC_POINT_FORMATS => self.point_formats = data.vec8()?.rest.to_vec(),
            ext::SIGNATURE_ALGORITHMS => self.signature_algorithms = u16s(data.vec16()?),
            ext::SUPPORTED_VERSIONS => self.supported_versions = u16s(data.vec8()?),
            _ => {}
        }
        Some(())
    }

    /// The JA3 string: version, ciphers, extensions, groups and point formats in
    /// decimal, GREASE left out (Wireshark's `tls.handshake.ja3_full`).
    pub fn ja3_string(&self) -> String {
        let mut out = format!("{},", self.version);
        join_decimal(
            &mut out,
            self.ciphers.iter().copied().filter(|&v| !is_grease(v)),
        );
        out.push(',');
        if self.malformed_extensions {
            return out;
        }
        join_decimal(
            &mut out,
            self.extensions.iter().copied().filter(|&v| !is_grease(v)),
        );
        out.push(',');
        join_decimal(
            &mut out,
            self.groups.iter().copied().filter(|&v| !is_grease(v)),
        );
        out.push(',');
        join_decimal(&mut out, self.point_formats.iter().map(|&v| u16::from(v)));
        out
    }

    /// JA3: the MD5 of [`ja3_string`](Self::ja3_string), in hex.
    pub fn ja3(&self) -> String {
        hex(&Md5::digest(self.ja3_string().as_bytes()))
    }

    /// The TLS version JA4 names: the highest of supported_versions, else the
    /// legacy version field.
    pub fn ja4_version(&self) -> u16 {
        self.supported_versions
            .iter()
            .copied()
            .filter(|&v| !is_grease(v))
            .max()
            .unwrap_or(self.version)
    }

    /// JA4 of this hello sent over `transport`: `b't'` (TLS over TCP), `b'q'`
    /// (QUIC) or `b'd'` (DTLS).
    pub fn ja4(&self, transport: u8) -> String {
        let ciphers: Vec<u16> = self
            .ciphers
            .iter()
            .copied()
            .filter(|&v| !is_grease(v))
            .collect();
        let extensions: Vec<u16> = self
            .extensions
            .iter()
            .copied()
            .filter(|&v| !is_grease(v))
            .collect();
        let first_alpn = self.alpn.first().map(Vec::as_slice).unwrap_or_default();
        ja4(
            Ja4Parts {
                transport,
                version: self.ja4_version(),
                sni: self.extensions.contains(&ext::SERVER_NAME),
                alpn: first_alpn,
                ciphers: &ciphers,
                extensions: &extensions,
                signature_algorithms: &self.signature_algorithms,
            },
            false,
        )
    }
}

impl ServerHello {
    /// Parses a ServerHello's body.
    pub fn parse(body: &[u8]) -> Option<Self> {
        let mut r = Bytes::new(body);
        let mut hello = ServerHello {
            version: r.u16()?,
            ..Self::default()
        };
        r.take(32)?;
        // TLS 1.3 drafts before 22 had no session id and no compression here.
        let draft = hello.version >> 8 == 0x7f && hello.version & 0xff < 22;
        if !draft {
            r.vec8()?;
        }
        hello.cipher = r.u16()?;
        if !draft {
            r.u8()?;
        }
        if r.is_empty() {
            return Some(hello);
        }
        let mut extensions = r.vec16()?;
        while !extensions.is_empty() {
            let kind = extensions.u16()?;
            let mut data = extensions.vec16()?;
            hello.extensions.push(kind);
            if kind == ext::SUPPORTED_VERSIONS {
                hello.selected_version = data.u16();
            }
        }
        Some(hello)
    }

    /// The JA3S string: version, cipher and extensions in decimal.
    pub fn ja3s_string(&self) -> String {
        let mut out = format!("{},{},", self.version, self.cipher);
        join_decimal(&mut out, self.extensions.iter().copied());
        out
    }

    /// JA3S: the MD5 of [`ja3s_string`](Self::ja3s_string), in hex.
    pub fn ja3s(&self) -> String {
        hex(&Md5::digest(self.ja3s_string().as_bytes()))
    }

    /// The version the server chose.
    pub fn chosen_version(&self) -> u16 {
        self.selected_version.unwrap_or(self.version)
    }
}

/// What JA4 is made of: GREASE already left out of the lists, which are in the
/// order sent.
#[derive(Clone, Copy, Debug)]
pub struct Ja4Parts<'a> {
    /// `b't'`, `b'q'` or `b'd'`.
    pub transport: u8,
    /// The TLS version (see [`ClientHello::ja4_version`]).
    pub version: u16,
    /// Whether the server_name extension is there.
    pub sni: bool,
    /// The first ALPN value (empty for none).
    pub alpn: &'a [u8],
    /// Cipher suites.
    pub ciphers: &'a [u16],
    /// Extension types, server_name and ALPN included.
    pub extensions: &'a [u16],
    /// Signature algorithms.
    pub signature_algorithms: &'a [u16],
}

/// JA4 of `parts`; with `raw`, the unhashed form (JA4_r).
pub fn ja4(parts: Ja4Parts<'_>, raw: bool) -> String {
    let version = match parts.version {
        0x0304 => "13",
        0x0303 => "12",
        0x0302 => "11",
        0x0301 => "10",
        0x0300 => "s3",
        0x0002 => "s2",
        0xfeff => "d1",
        0xfefd => "d2",
        0xfefc => "d3",
        _ => "00",
    };
    let mut out = String::with_capacity(40);
    out.push(char::from(parts.transport));
    out.push_str(version);
    out.push(if parts.sni { 'd' } else { 'i' });
    let _ = write!(
        out,
        "{:02}{:02}",
        parts.ciphers.len().min(99),
        parts.extensions.len().min(99)
    );
    out.push_str(&alpn_chars(parts.alpn));
    let mut ciphers = parts.ciphers.to_vec();
    ciphers.sort_unstable();
    let ciphers = join_hex(&ciphers);
    let mut extensions: Vec<u16> = parts
        .extensions
        .iter()
        .copied()
        .filter(|&e| e != ext::SERVER_NAME && e != ext::ALPN)
        .collect();
    extensions.sort_unstable();
    let mut extensions = join_hex(&extensions);
    if !parts.signature_algorithms.is_empty() {
        extensions.push('_');
        extensions.push_str(&join_hex(parts.signature_algorithms));
    }
    out.push('_');
    if raw {
        out.push_str(&ciphers);
        out.push('_');
        out.push_str(&extensions);
        return out;
    }
    out.push_str(&hash12(&ciphers));
    out.push('_');
    out.push_str(&hash12(&extensions));
    out
}

/// JA4's ALPN part: the first and last characters of the first value when
/// both are ASCII alphanumerics, else the first and last hex digits of it;
/// `00` for none.
fn alpn_chars(alpn: &[u8]) -> String {
    let (Some(&first), Some(&last)) = (alpn.first(), alpn.last()) else {
        return "00".into();
    };
    if first.is_ascii_alphanumeric() && last.is_ascii_alphanumeric() {
        [char::from(first), char::from(last)].iter().collect()
    } else {
        let hex = hex(&[first, last]);
        let mut chars = hex.chars();
        let a = chars.next().unwrap_or('0');
        let b = chars.last().unwrap_or('0');
        [a, b].iter().collect()
    }
}

/// The first 12 hex digits of the SHA-256 of `list`, or twelve zeros for an
/// empty list.
fn hash12(list: &str) -> String {
    if list.is_empty() {
        return "000000000000".into();
    }
    let mut digest = hex(&Sha256::digest(list.as_bytes()));
    digest.truncate(12);
    digest
}

fn join_decimal(out: &mut String, values: impl Iterator<Item = u16>) {
    for (i, value) in values.enumerate() {
        if i > 0 {
            out.push('-');
        }
        let _ = write!(out, "{value}");
    }
}

fn join_hex(values: &[u16]) -> String {
    let mut out = String::with_capacity(values.len().saturating_mul(5));
    for (i, value) in values.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{value:04x}");
    }
    out
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().saturating_mul(2));
    for byte in bytes {
        let _ = write!(out, "{byte:02x}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grease_values_are_recognised() {
        for v in [0x0a0a, 0x1a1a, 0xfafa, 0x4a4a] {
            assert!(is_grease(v), "{v:04x}");
        }
        for v in [0x0a1a, 0x1301, 0x0000, 0xaaaa + 1] {
            assert!(!is_grease(v), "{v:04x}");
        }
    }

    #[test]
    fn alpn_characters_follow_the_spec_examples() {
        for (value, chars) in [
            (&b"h2"[..], "h2"),
            (b"http/1.1", "h1"),
            (b"x", "xx"),
            (b"", "00"),
            (&[0xab], "ab"),
            (&[0x20], "20"),
            (&[0xab, 0xcd], "ad"),
            (&[0x20, 0x61], "21"),
            (&[0x30, 0xab], "3b"),
            (&[0x61, 0x20], "60"),
            (&[0x30, 0x31, 0xab, 0xcd], "3d"),
            (&[0x30, 0xab, 0xcd, 0x31], "01"),
        ] {
            assert_eq!(alpn_chars(value), chars, "{value:?}");
        }
    }

    #[test]
    fn a_hello_split_across_records_is_reassembled() {
        let body = [3u8, 3, 9, 9];
        let mut message = vec![CLIENT_HELLO, 0, 0, 4];
        message.extend_from_slice(&body);
        let mut stream = vec![22, 3, 1, 0, 3];
        stream.extend_from_slice(&message[..3]);
        stream.extend_from_slice(&[22, 3, 1, 0, 5]);
        stream.extend_from_slice(&message[3..]);
        let mut scratch = Vec::new();
        assert_eq!(
            handshake(&stream, &mut scratch),
            Found::Message(CLIENT_HELLO, &body[..])
        );
        assert_eq!(handshake(&stream[..9], &mut scratch), Found::NeedMore);
        assert_eq!(handshake(b"GET / HTTP/1.1", &mut scratch), Found::NotTls);
        assert_eq!(handshake(&[23, 3, 3, 0, 1, 0], &mut scratch), Found::NotTls);
        let mut warned = vec![21, 3, 3, 0, 2, 1, 112];
        warned.extend_from_slice(&stream);
        assert_eq!(
            handshake(&warned, &mut scratch),
            Found::Message(CLIENT_HELLO, &body[..])
        );
    }
}
