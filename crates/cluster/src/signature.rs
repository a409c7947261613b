//! The coarse signature of a segment's addresses: a Bloom filter (Hyperion's
//! signature index, section 5.1) over every distinct address and over its
//! network prefixes, so that an index node can tell, without the segment, that
//! it cannot hold an address or a network.
//!
//! Keys are an address (`/32` of IPv4, `/128` of IPv6) and its prefixes of
//! [`PREFIXES_V4`] and [`PREFIXES_V6`] bits, each tagged with its length, so a
//! question for a network tests at most [`MAX_PROBES`] prefixes instead of
//! every address in it. [`BITS_PER_KEY`] bits per distinct key (rounded up to
//! whole 64-bit words), [`HASHES`] bits a key: a false positive rate under 1%. A false positive costs one node a question
//! that finds nothing; a false negative cannot happen.

use base64::Engine;
use hindsight_model::Addr16;
use serde::{Deserialize, Serialize};

/// Bits per distinct key.
pub const BITS_PER_KEY: usize = 10;
/// Bits set per key.
pub const HASHES: u32 = 7;
/// The smallest signature, bits.
const MIN_BITS: usize = 256;
/// The largest, bits (16 MiB: 13 M distinct keys at full accuracy).
const MAX_BITS: usize = 1 << 27;
/// Prefix lengths kept for IPv4 addresses (besides the whole address).
pub const PREFIXES_V4: [u8; 2] = [16, 24];
/// Prefix lengths kept for IPv6 addresses (besides the whole address).
pub const PREFIXES_V6: [u8; 2] = [48, 64];
/// Most prefixes one range is tested as; a wider range is not tested (any
/// segment in the window may hold it).
pub const MAX_PROBES: u128 = 256;

/// A Bloom filter over addresses and their prefixes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AddressSignature {
    /// Bits set per key.
    hashes: u32,
    /// The bits, little-endian 64-bit words, base64 in JSON.
    #[serde(with = "words_base64")]
    words: Vec<u64>,
}

impl AddressSignature {
    /// The signature of `addresses` (distinct or not).
    pub fn of(addresses: impl IntoIterator<Item = Addr16>) -> Self {
        let mut keys: Vec<(u8, u128)> = Vec::new();
        for addr in addresses {
            let value = u128::from_be_bytes(addr.0);
            let (bits, prefixes) = family(addr);
            keys.push((128, value));
            for &length in prefixes {
                keys.push((
                    length,
                    mask(value, 128 - u32::from(bits) + u32::from(length)),
                ));
            }
        }
        keys.sort_unstable();
        keys.dedup();
        let bits = (keys.len() * BITS_PER_KEY)
            .next_multiple_of(64)
            .clamp(MIN_BITS, MAX_BITS);
        let mut signature = Self {
            hashes: HASHES,
            words: vec![0; bits / 64],
        };
        for (length, value) in keys {
            signature.insert(length, value);
        }
        signature
    }

    /// Whether the checks of the signature hold: some bits, not too many, at
    /// least one hash (a signature read from the network is not trusted).
    pub fn is_valid(&self) -> bool {
        !self.words.is_empty()
            && self.words.len() * 64 <= MAX_BITS
            && (1..=32).contains(&self.hashes)
    }

    /// Size in bytes.
    pub fn bytes(&self) -> usize {
        self.words.len() * 8
    }

    /// The share of bits set (1/2 is a full filter at its design load).
    pub fn fill(&self) -> f64 {
        let set: u32 = self.words.iter().map(|w| w.count_ones()).sum();
        f64::from(set) / (self.words.len() as f64 * 64.0)
    }

    /// Whether the segment may hold an address in `[low, high]`: false only if
    /// it holds none.
    pub fn may_hold(&self, low: Addr16, high: Addr16) -> bool {
        if !self.is_valid() {
            return true;
        }
        let (low_value, high_value) = (u128::from_be_bytes(low.0), u128::from_be_bytes(high.0));
        if low_value > high_value {
            return false;
        }
        if low.is_v4() != high.is_v4() {
            // A range across the families: not tested.
            return true;
        }
        let (bits, prefixes) = family(low);
        // Every length whose blocks covering the range are few enough to test
        // one by one, the coarsest first: a length at which no block is held
        // rules the range out (each length holds every address's block, so
        // none can rule out what is there).
        for length in prefixes.iter().copied().chain(std::iter::once(bits)) {
            // The low bits a block of this length leaves out.
            let shift = u32::from(bits - length);
            let (first, last) = (low_value >> shift, high_value >> shift);
            if last - first >= MAX_PROBES {
                continue;
            }
            let tag = if length == bits { 128 } else { length };
            if !(first..=last).any(|block| self.contains(tag, block << shift)) {
                return false;
            }
        }
        true
    }

    fn positions(&self, tag: u8, value: u128) -> impl Iterator<Item = usize> {
        let (h1, h2) = hash(tag, value);
        let bits = (self.words.len() * 64) as u128;
        // Each hash mapped onto [0, bits) by a multiply (Lemire's reduction).
        (0..u64::from(self.hashes)).map(move |i| {
            let h = h1.wrapping_add(i.wrapping_mul(h2));
            ((u128::from(h) * bits) >> 64) as usize
        })
    }

    fn insert(&mut self, tag: u8, value: u128) {
        let positions: Vec<usize> = self.positions(tag, value).collect();
        for bit in positions {
            self.words[bit / 64] |= 1 << (bit % 64);
        }
    }

    fn contains(&self, tag: u8, value: u128) -> bool {
        self.positions(tag, value)
            .all(|bit| self.words[bit / 64] & (1 << (bit % 64)) != 0)
    }
}

/// Bits of the address family of `addr` and the prefixes kept for it.
fn family(addr: Addr16) -> (u8, &'static [u8]) {
    if addr.is_v4() {
        (32, &PREFIXES_V4)
    } else {
        (128, &PREFIXES_V6)
    }
}

/// `value` with all but its first `keep` bits cleared.
fn mask(value: u128, keep: u32) -> u128 {
    if keep >= 128 {
        value
    } else if keep == 0 {
        0
    } else {
        value & !(u128::MAX >> keep)
    }
}

/// Two 64-bit hashes of a key (double hashing, Kirsch and Mitzenmacher): a
/// fixed function, since every node and the index node must agree.
fn hash(tag: u8, value: u128) -> (u64, u64) {
    let high = (value >> 64) as u64;
    let low = value as u64;
    let a = mix(high ^ mix(low ^ u64::from(tag).wrapping_mul(0x9E37_79B9_7F4A_7C15)));
    let b = mix(a ^ 0xD6E8_FEB8_6659_FD93);
    (a, b | 1)
}

/// splitmix64's finalizer.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

mod words_base64 {
    use super::Engine;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(words: &[u64], serializer: S) -> Result<S::Ok, S::Error> {
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        serializer.serialize_str(&base64::engine::general_purpose::STANDARD.encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<u64>, D::Error> {
        let text = String::deserialize(deserializer)?;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(text.as_bytes())
            .map_err(serde::de::Error::custom)?;
        if bytes.len() % 8 != 0 {
            return Err(serde::de::Error::custom(
                "a signature's length is not a whole number of 64-bit words",
            ));
        }
        Ok(bytes
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::IpAddr;

    fn addr(text: &str) -> Addr16 {
        Addr16::from(text.parse::<IpAddr>().unwrap())
    }

    #[test]
    fn holds_every_address_and_network_it_was_built_from() {
        let held: Vec<Addr16> = (0..2000u32)
            .map(|i| Addr16::from_v4_bytes((0x0A00_0000 + i * 7919).to_be_bytes()))
            .chain([addr("2001:db8::1"), addr("2001:db8:0:1::5")])
            .collect();
        let signature = AddressSignature::of(held.iter().copied());
        assert!(signature.is_valid());
        for &a in &held {
            assert!(signature.may_hold(a, a), "{a:?}");
        }
        assert!(signature.may_hold(addr("10.0.0.0"), addr("10.0.255.255")));
        assert!(signature.may_hold(addr("2001:db8::"), addr("2001:db8::ffff")));
        // A /8 is wider than 256 /16 blocks: not tested, so may hold.
        assert!(signature.may_hold(addr("11.0.0.0"), addr("11.255.255.255")));
    }

    #[test]
    fn rules_out_what_it_does_not_hold_but_for_few_false_positives() {
        let held: Vec<Addr16> = (0..5000u32)
            .map(|i| Addr16::from_v4_bytes((0x0A00_0000 + i).to_be_bytes()))
            .collect();
        let signature = AddressSignature::of(held);
        let false_positives = (0..10_000u32)
            .filter(|i| {
                let a = Addr16::from_v4_bytes((0xC0A8_0000 + i).to_be_bytes());
                signature.may_hold(a, a)
            })
            .count();
        assert!(false_positives < 200, "{false_positives} of 10,000");
        assert!(!signature.may_hold(addr("172.16.0.0"), addr("172.16.255.255")));
        assert!(!signature.may_hold(addr("2001:db8::"), addr("2001:db8::ffff")));
    }

    #[test]
    fn travels_as_json_and_refuses_damage() {
        let signature = AddressSignature::of([addr("192.0.2.1")]);
        let text = serde_json::to_string(&signature).unwrap();
        let back: AddressSignature = serde_json::from_str(&text).unwrap();
        assert_eq!(back, signature);
        assert!(back.may_hold(addr("192.0.2.1"), addr("192.0.2.1")));
        let bad: AddressSignature =
            serde_json::from_str(r#"{"hashes": 40, "words": "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}"#)
                .unwrap();
        // Three words of zeros with 40 hashes: refused, so it rules nothing out.
        assert!(!bad.is_valid());
        assert!(bad.may_hold(addr("192.0.2.9"), addr("192.0.2.9")));
        assert!(
            serde_json::from_str::<AddressSignature>(r#"{"hashes": 7, "words": "AAA"}"#).is_err()
        );
    }
}
