//! Reads literal text (numbers, addresses, networks, MAC addresses) for both
//! syntaxes. Each function returns the message of the error, which the parser
//! places at the literal's position.

use std::net::{Ipv4Addr, Ipv6Addr};

/// Parses an unsigned integer as Wireshark and libpcap write them: decimal,
/// `0x` hexadecimal, `0b` binary, or octal with a leading `0`.
pub fn parse_uint(text: &str) -> Result<u64, String> {
    if text.starts_with('-') {
        return Err(format!(
            "\"{text}\" is negative; fields hold unsigned values"
        ));
    }
    let (digits, radix, kind) = if let Some(hex) = strip_prefix_ignore_case(text, "0x") {
        (hex, 16, "hexadecimal")
    } else if let Some(binary) = strip_prefix_ignore_case(text, "0b") {
        (binary, 2, "binary")
    } else if text.len() > 1 && text.starts_with('0') {
        (text.get(1..).unwrap_or_default(), 8, "octal")
    } else {
        (text, 10, "decimal")
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return Err(format!("\"{text}\" is not a valid {kind} number"));
    }
    u64::from_str_radix(digits, radix).map_err(|_| format!("\"{text}\" is too large"))
}

fn strip_prefix_ignore_case<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    let head = text.get(..prefix.len())?;
    if head.eq_ignore_ascii_case(prefix) {
        text.get(prefix.len()..)
    } else {
        None
    }
}

/// Returns true if `text` reads as a host name (letters, maybe dots), to explain
/// that names are not resolved rather than calling them malformed addresses.
pub fn looks_like_host_name(text: &str) -> bool {
    text.chars().any(|c| c.is_ascii_alphabetic())
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
        && !text.contains(':')
}

/// Splits `addr/len` into the address text and the prefix length, if any.
fn split_prefix(text: &str) -> Result<(&str, Option<u8>), String> {
    match text.split_once('/') {
        None => Ok((text, None)),
        Some((addr, len)) => {
            let len: u8 = len
                .parse()
                .map_err(|_| format!("\"{len}\" is not a valid prefix length in \"{text}\""))?;
            Ok((addr, Some(len)))
        }
    }
}

/// An address literal of either IP family, with its prefix length (the full
/// length for a single address).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IpLiteral {
    /// An IPv4 address or network.
    V4(Ipv4Addr, u8),
    /// An IPv6 address or network.
    V6(Ipv6Addr, u8),
}

/// Parses an IPv4 or IPv6 address, optionally with a `/len` prefix; host bits
/// are kept as written (the caller decides whether to clear them or refuse them).
pub fn parse_ip(text: &str) -> Result<IpLiteral, String> {
    let (addr, prefix_len) = split_prefix(text)?;
    if let Ok(v4) = addr.parse::<Ipv4Addr>() {
        let prefix_len = prefix_len.unwrap_or(32);
        if prefix_len > 32 {
            return Err(format!(
                "prefix length {prefix_len} is longer than an IPv4 address (32 bits)"
            ));
        }
        return Ok(IpLiteral::V4(v4, prefix_len));
    }
    if let Ok(v6) = addr.parse::<Ipv6Addr>() {
        let prefix_len = prefix_len.unwrap_or(128);
        if prefix_len > 128 {
            return Err(format!(
                "prefix length {prefix_len} is longer than an IPv6 address (128 bits)"
            ));
        }
        return Ok(IpLiteral::V6(v6, prefix_len));
    }
    if looks_like_host_name(addr) {
        Err(format!(
            "\"{addr}\" is not an IP address (host names are not resolved)"
        ))
    } else {
        Err(format!("\"{text}\" is not a valid IP address"))
    }
}

/// Returns `addr` with the bits past `prefix_len` cleared.
pub fn ipv4_network(addr: Ipv4Addr, prefix_len: u8) -> Ipv4Addr {
    let mask = u32::MAX
        .checked_shl(32u32.saturating_sub(u32::from(prefix_len)))
        .unwrap_or(0);
    Ipv4Addr::from(u32::from(addr) & mask)
}

/// Returns `addr` with the bits past `prefix_len` cleared.
pub fn ipv6_network(addr: Ipv6Addr, prefix_len: u8) -> Ipv6Addr {
    let mask = u128::MAX
        .checked_shl(128u32.saturating_sub(u32::from(prefix_len)))
        .unwrap_or(0);
    Ipv6Addr::from(u128::from(addr) & mask)
}

/// Parses a MAC address as Wireshark accepts byte strings: hex groups separated
/// by `:`, `-` or `.` (`aa:bb:cc:dd:ee:ff`, `aabb.ccdd.eeff`, `aa-bb-...`), or
/// twelve hex digits; a one-digit group is one byte.
pub fn parse_mac(text: &str) -> Option<[u8; 6]> {
    let mut bytes = [0u8; 6];
    let mut count = 0usize;
    for group in text.split([':', '-', '.']) {
        if group.is_empty() || !group.chars().all(|c| c.is_ascii_hexdigit()) {
            return None;
        }
        let group_bytes: Vec<u8> = if group.len() == 1 {
            vec![u8::from_str_radix(group, 16).ok()?]
        } else if group.len() % 2 == 0 {
            (0..group.len() / 2)
                .map(|index| {
                    group
                        .get(index * 2..index * 2 + 2)
                        .and_then(|pair| u8::from_str_radix(pair, 16).ok())
                })
                .collect::<Option<Vec<u8>>>()?
        } else {
            return None;
        };
        for byte in group_bytes {
            *bytes.get_mut(count)? = byte;
            count += 1;
        }
    }
    (count == 6).then_some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_in_every_wireshark_base() {
        assert_eq!(parse_uint("80"), Ok(80));
        assert_eq!(parse_uint("0x1F90"), Ok(8080));
        assert_eq!(parse_uint("0b1010"), Ok(10));
        assert_eq!(parse_uint("010"), Ok(8));
        assert_eq!(parse_uint("0"), Ok(0));
        assert!(parse_uint("080").is_err());
        assert!(parse_uint("0x").is_err());
        assert!(parse_uint("-1").is_err());
        assert!(parse_uint("99999999999999999999").is_err());
        assert!(parse_uint("1.5").is_err());
    }

    #[test]
    fn ip_literals_with_and_without_prefix() {
        assert_eq!(
            parse_ip("10.1.2.3"),
            Ok(IpLiteral::V4(Ipv4Addr::new(10, 1, 2, 3), 32))
        );
        assert_eq!(
            parse_ip("10.0.0.0/8"),
            Ok(IpLiteral::V4(Ipv4Addr::new(10, 0, 0, 0), 8))
        );
        assert!(matches!(
            parse_ip("2001:db8::/32"),
            Ok(IpLiteral::V6(_, 32))
        ));
        assert!(parse_ip("10.0.0.0/33").is_err());
        assert!(parse_ip("010.0.0.1").is_err());
        assert!(parse_ip("10.64.88").is_err());
        let error = parse_ip("www.example.com").unwrap_err();
        assert!(error.contains("host names are not resolved"));
    }

    #[test]
    fn networks_clear_host_bits() {
        assert_eq!(
            ipv4_network(Ipv4Addr::new(10, 64, 88, 105), 24),
            Ipv4Addr::new(10, 64, 88, 0)
        );
        assert_eq!(
            ipv4_network(Ipv4Addr::new(10, 64, 88, 105), 0),
            Ipv4Addr::UNSPECIFIED
        );
        assert_eq!(
            ipv4_network(Ipv4Addr::new(10, 64, 88, 105), 32),
            Ipv4Addr::new(10, 64, 88, 105)
        );
        let v6: Ipv6Addr = "2001:db8::1".parse().unwrap_or(Ipv6Addr::UNSPECIFIED);
        assert_eq!(ipv6_network(v6, 32).to_string(), "2001:db8::");
    }

    #[test]
    fn mac_addresses_in_wireshark_spellings() {
        let expected = Some([0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff]);
        assert_eq!(parse_mac("aa:bb:cc:dd:ee:ff"), expected);
        assert_eq!(parse_mac("AA-BB-CC-DD-EE-FF"), expected);
        assert_eq!(parse_mac("aa.bb.cc.dd.ee.ff"), expected);
        assert_eq!(parse_mac("aabb.ccdd.eeff"), expected);
        assert_eq!(parse_mac("aabbccddeeff"), expected);
        assert_eq!(parse_mac("0:1:2:3:4:5"), Some([0, 1, 2, 3, 4, 5]));
        assert_eq!(parse_mac("aa:bb:cc:dd:ee"), None);
        assert_eq!(parse_mac("aa:bb:cc:dd:ee:ff:00"), None);
        assert_eq!(parse_mac("aab:bcc:dde:eff"), None);
        assert_eq!(parse_mac("10.0.0.1"), None);
    }
}
