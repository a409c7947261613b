//! JA4 against the test values published with the JA4 reference implementation:
//! for each ClientHello of its test captures, the original-order raw form
//! (JA4_ro: ciphers, extensions and signature algorithms as sent, GREASE left
//! out) must give the published JA4 and its sorted raw form (JA4_r).

use hindsight_app::tls::{Ja4Parts, ja4};

fn hex_list(text: &str) -> Vec<u16> {
    if text.is_empty() {
        return Vec::new();
    }
    text.split(',')
        .map(|v| u16::from_str_radix(v, 16).unwrap())
        .collect()
}

#[test]
fn ja4_equals_the_reference_implementations_published_values() {
    let vectors = include_str!("data/ja4-published.tsv");
    let mut checked = 0;
    for line in vectors.lines().filter(|l| !l.starts_with('#')) {
        let [capture, expected, expected_raw, original]: [&str; 4] =
            line.split('\t').collect::<Vec<_>>().try_into().unwrap();
        let mut parts = original.splitn(4, '_');
        let head = parts.next().unwrap();
        let ciphers = hex_list(parts.next().unwrap());
        let extensions = hex_list(parts.next().unwrap_or(""));
        let signatures = hex_list(parts.next().unwrap_or(""));
        let head = head.as_bytes();
        let version = match &head[1..3] {
            b"13" => 0x0304,
            b"12" => 0x0303,
            b"11" => 0x0302,
            b"10" => 0x0301,
            b"s3" => 0x0300,
            other => panic!("{capture}: version {other:?}"),
        };
        // The ALPN part is the first and last characters of the first value (or
        // of its hex): a value made of those two characters gives them back.
        let alpn = match &head[8..10] {
            b"00" => &[][..],
            chars => chars,
        };
        let parts = Ja4Parts {
            transport: head[0],
            version,
            sni: head[3] == b'd',
            alpn,
            ciphers: &ciphers,
            extensions: &extensions,
            signature_algorithms: &signatures,
        };
        assert_eq!(ja4(parts, false), expected, "{capture}: {original}");
        assert_eq!(ja4(parts, true), expected_raw, "{capture}: {original}");
        checked += 1;
    }
    assert_eq!(checked, 89);
}
