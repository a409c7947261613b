//! The real Cisco IPFIX export capture shipped with the netflow_parser crate
//! (fetched by `scripts/fetch-fixtures`) decodes without an error: every datagram,
//! templates, options and data of many observation domains.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};

use hindsight_capture::CaptureReader;
use hindsight_flow::netflow::NetflowDecoder;
use hindsight_model::FlowSource;

fn fixture() -> PathBuf {
    std::env::var_os("HINDSIGHT_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(
                &std::env::var_os("CARGO_MANIFEST_DIR")
                    .expect("cargo test sets CARGO_MANIFEST_DIR"),
            )
            .join("../../.fixtures")
        })
        .join("netflow/cisco-ipfix.pcap")
}

/// The exporter and UDP payload of an Ethernet/IPv4/UDP frame.
fn udp_payload(frame: &[u8]) -> Option<(SocketAddr, &[u8])> {
    if frame.get(12..14)? != [0x08, 0x00] {
        return None;
    }
    let ip = frame.get(14..)?;
    let header_len = usize::from(ip.first()? & 0x0f) * 4;
    if *ip.get(9)? != 17 {
        return None;
    }
    let source = Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
    let udp = ip.get(header_len..)?;
    let port = u16::from_be_bytes([*udp.first()?, *udp.get(1)?]);
    let udp_len = usize::from(u16::from_be_bytes([*udp.get(4)?, *udp.get(5)?]));
    Some((
        SocketAddr::new(IpAddr::V4(source), port),
        udp.get(8..udp_len)?,
    ))
}

#[test]
fn the_cisco_ipfix_capture_decodes_without_errors() {
    let path = fixture();
    assert!(
        path.exists(),
        "run scripts/fetch-fixtures first ({} missing)",
        path.display()
    );
    let mut reader = CaptureReader::open(&path).expect("open the capture");
    let mut decoder = NetflowDecoder::new();
    let mut records = Vec::new();
    let mut datagrams = 0;
    while let Some(frame) = reader.next_frame() {
        let frame = frame.expect("read the capture");
        let Some((exporter, payload)) = udp_payload(frame.data) else {
            continue;
        };
        datagrams += 1;
        if let Err(error) = decoder.decode(exporter, payload, &mut records) {
            panic!("datagram {datagrams}: {error}");
        }
    }
    let stats = decoder.stats().clone();
    assert_eq!(datagrams, 6666);
    assert_eq!(stats.packets, [0, 0, 6666]);
    assert_eq!(stats.malformed, 0);
    assert!(stats.templates > 0, "{stats:?}");
    assert!(!records.is_empty(), "{stats:?}");
    assert!(records.iter().all(|r| r.source == FlowSource::Ipfix));
    // Most of Cisco's data records are application statistics without addresses,
    // so not flows. Wireshark finds the same flow records (its cflow dissector,
    // like hindsight, decodes only data sets whose template came before).
    let tshark = std::process::Command::new("tshark")
        .arg("-r")
        .arg(&path)
        .args([
            "-T",
            "fields",
            "-e",
            "cflow.srcaddr",
            "-e",
            "cflow.srcaddrv6",
        ])
        .args(["-E", "occurrence=a", "-E", "aggregator=,"])
        .output();
    if let Some(output) = tshark.ok().filter(|o| o.status.success()) {
        let addresses = String::from_utf8_lossy(&output.stdout)
            .split(['\n', '\t', ','])
            .filter(|field| !field.trim().is_empty())
            .count();
        assert_eq!(records.len(), addresses, "{stats:?}");
    }
    eprintln!("{stats:?}, {} records", records.len());
}
