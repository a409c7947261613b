//! Fuzzes the NetFlow v5/v9/IPFIX decoder: a sequence of datagrams (2-byte
//! little-endian length, 1 byte choosing one of two exporters, then the payload)
//! through one decoder, so that data sets meet the templates of earlier datagrams.
//! Any input must give records or errors with an offset inside the datagram, never
//! a panic. `HINDSIGHT_FUZZ_VERSION=5|9|10` writes that version into every
//! datagram, so that one run spends its time on one decoder:
//! `HINDSIGHT_FUZZ_VERSION=9 cargo +nightly fuzz run -O netflow corpus/netflow-v9`.

#![no_main]

use std::net::SocketAddr;
use std::sync::LazyLock;

use hindsight_flow::netflow::NetflowDecoder;
use libfuzzer_sys::fuzz_target;

static VERSION: LazyLock<Option<u16>> = LazyLock::new(|| {
    std::env::var("HINDSIGHT_FUZZ_VERSION")
        .ok()
        .and_then(|v| v.parse().ok())
});

fuzz_target!(|data: &[u8]| {
    let exporters: [SocketAddr; 2] = [
        "192.0.2.1:2055".parse().unwrap(),
        "[2001:db8::1]:4739".parse().unwrap(),
    ];
    let mut decoder = NetflowDecoder::new();
    let mut out = Vec::new();
    let mut at = data;
    while at.len() >= 3 {
        let len = usize::from(u16::from_le_bytes([at[0], at[1]])).min(at.len() - 3);
        let exporter = exporters[usize::from(at[2] & 1)];
        let mut payload = at[3..3 + len].to_vec();
        if let (Some(version), Some(head)) = (*VERSION, payload.get_mut(..2)) {
            head.copy_from_slice(&version.to_be_bytes());
        }
        let payload = payload.as_slice();
        let before = out.len();
        if let Err(error) = decoder.decode(exporter, payload, &mut out) {
            assert!(error.offset <= payload.len(), "{error}");
        }
        for record in &out[before..] {
            assert!(!record.uid.is_empty());
        }
        at = &at[3 + len..];
    }
    assert_eq!(decoder.stats().records, out.len() as u64);
});
