//! Export packets built byte by byte after RFC 3954 / RFC 7011 and Cisco's v5
//! layout; the end-to-end oracle (softflowd → collector vs nfcapd) is in the CLI
//! tests.

use std::net::SocketAddr;

use hindsight_model::{Addr16, FlowSource};

use super::*;

fn exporter() -> SocketAddr {
    "192.0.2.1:40000".parse().unwrap()
}

fn v5_packet(sequence: u32, sampling: u16, records: &[([u8; 4], [u8; 4], u32, u32)]) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend(5u16.to_be_bytes());
    p.extend((records.len() as u16).to_be_bytes());
    p.extend(10_000u32.to_be_bytes()); // uptime 10 s
    p.extend(1_700_000_000u32.to_be_bytes());
    p.extend(500_000_000u32.to_be_bytes());
    p.extend(sequence.to_be_bytes());
    p.extend([0, 0]);
    p.extend(sampling.to_be_bytes());
    for (src, dst, packets, bytes) in records {
        p.extend(src);
        p.extend(dst);
        p.extend([0; 4 + 2 + 2]); // next hop, input, output
        p.extend(packets.to_be_bytes());
        p.extend(bytes.to_be_bytes());
        p.extend(4_000u32.to_be_bytes()); // first: 6 s before export
        p.extend(9_000u32.to_be_bytes()); // last: 1 s before export
        p.extend(53u16.to_be_bytes());
        p.extend(40_000u16.to_be_bytes());
        p.extend([0, 0x12, 6, 0]); // pad, flags, proto, tos
        p.extend([0; 8]);
    }
    p
}

#[test]
fn v5_records_times_sampling_and_sequence_gaps() {
    let mut decoder = NetflowDecoder::new();
    let mut out = Vec::new();
    let packet = v5_packet(100, 0, &[([10, 0, 0, 1], [10, 0, 0, 2], 3, 180)]);
    decoder.decode(exporter(), &packet, &mut out).unwrap();
    let r = &out[0];
    assert_eq!(r.src, Addr16::from_v4_bytes([10, 0, 0, 1]));
    assert_eq!(r.dst, Addr16::from_v4_bytes([10, 0, 0, 2]));
    assert_eq!((r.src_port, r.dst_port, r.proto), (53, 40_000, 6));
    assert_eq!((r.packets_out, r.bytes_out, r.tcp_flags), (3, 180, 0x12));
    let export = 1_700_000_000_500_000_000i64;
    assert_eq!(r.first_ns, export - 6_000_000_000);
    assert_eq!(r.last_ns, export - 1_000_000_000);
    assert_eq!(r.source, FlowSource::NetflowV5);
    assert_eq!(r.exporter, Addr16::from(exporter().ip()));
    assert!(r.uid.is_empty() && r.uid().starts_with('N'));
    // The next packet should start at 101; 104 means 3 records were lost.
    // Sampling mode 1, interval 100: counts are scaled.
    let packet = v5_packet(104, 0x4000 | 100, &[([10, 0, 0, 3], [10, 0, 0, 4], 2, 100)]);
    decoder.decode(exporter(), &packet, &mut out).unwrap();
    assert_eq!((out[1].packets_out, out[1].bytes_out), (200, 10_000));
    assert_eq!(decoder.stats().lost, 3);
    assert_eq!(decoder.stats().packets, [2, 0, 0]);
    assert_eq!(decoder.stats().records, 2);
}

#[test]
fn damaged_packets_name_the_offset_and_keep_nothing_false() {
    let mut decoder = NetflowDecoder::new();
    let mut out = Vec::new();
    let packet = v5_packet(1, 0, &[([10, 0, 0, 1], [10, 0, 0, 2], 1, 60)]);
    let error = decoder
        .decode(exporter(), &packet[..packet.len() - 1], &mut out)
        .unwrap_err();
    assert_eq!(error.offset, 24);
    assert!(error.to_string().contains("192.0.2.1:40000"), "{error}");
    assert!(out.is_empty());
    let error = decoder
        .decode(exporter(), &[0, 7, 0, 0], &mut out)
        .unwrap_err();
    assert!(error.reason.contains("version 7"), "{error}");
    assert!(decoder.decode(exporter(), &[], &mut out).is_err());
    assert_eq!(decoder.stats().malformed, 3);
}

/// An IPFIX message: one template set (v4 5-tuple, counters, millisecond times,
/// a variable-length field), then a data set with two records.
fn ipfix_message(sequence: u32, with_template: bool, records: u8) -> Vec<u8> {
    let mut sets = Vec::new();
    if with_template {
        let fields: [(u16, u16); 9] = [
            (8, 4),
            (12, 4),
            (7, 2),
            (11, 2),
            (4, 1),
            (2, 8),
            (1, 4), // reduced-size octetDeltaCount
            (152, 8),
            (82, 65535), // interfaceName, variable length
        ];
        let mut body = Vec::new();
        body.extend(300u16.to_be_bytes());
        body.extend((fields.len() as u16).to_be_bytes());
        for (id, len) in fields {
            body.extend(id.to_be_bytes());
            body.extend(len.to_be_bytes());
        }
        sets.extend(2u16.to_be_bytes());
        sets.extend((body.len() as u16 + 4).to_be_bytes());
        sets.extend(body);
    }
    let mut data = Vec::new();
    for i in 0..records {
        data.extend([10, 1, 0, i]);
        data.extend([10, 2, 0, i]);
        data.extend(1234u16.to_be_bytes());
        data.extend(80u16.to_be_bytes());
        data.push(6);
        data.extend(7u64.to_be_bytes());
        data.extend(700u32.to_be_bytes());
        data.extend(1_700_000_000_123u64.to_be_bytes());
        data.extend([3, b'e', b't', b'h']);
    }
    data.extend([0, 0]); // padding
    sets.extend(300u16.to_be_bytes());
    sets.extend((data.len() as u16 + 4).to_be_bytes());
    sets.extend(data);
    let mut message = Vec::new();
    message.extend(10u16.to_be_bytes());
    message.extend((sets.len() as u16 + 16).to_be_bytes());
    message.extend(1_700_000_100u32.to_be_bytes());
    message.extend(sequence.to_be_bytes());
    message.extend(7u32.to_be_bytes());
    message.extend(sets);
    message
}

#[test]
fn ipfix_templates_reduced_sizes_variable_fields_and_data_before_template() {
    let mut decoder = NetflowDecoder::new();
    let mut out = Vec::new();
    // Data before its template: counted, skipped, not an error.
    decoder
        .decode(exporter(), &ipfix_message(0, false, 1), &mut out)
        .unwrap();
    assert!(out.is_empty());
    assert_eq!(decoder.stats().unknown_template_sets, 1);
    decoder
        .decode(exporter(), &ipfix_message(1, true, 2), &mut out)
        .unwrap();
    assert_eq!(out.len(), 2);
    let r = &out[1];
    assert_eq!(r.src, Addr16::from_v4_bytes([10, 1, 0, 1]));
    assert_eq!(r.dst, Addr16::from_v4_bytes([10, 2, 0, 1]));
    assert_eq!((r.src_port, r.dst_port, r.proto), (1234, 80, 6));
    assert_eq!((r.packets_out, r.bytes_out), (7, 700));
    assert_eq!(r.first_ns, 1_700_000_000_123_000_000);
    assert_eq!(r.source, FlowSource::Ipfix);
    // Another exporter (port) has its own templates.
    let other: SocketAddr = "192.0.2.1:40001".parse().unwrap();
    decoder
        .decode(other, &ipfix_message(0, false, 1), &mut out)
        .unwrap();
    assert_eq!(out.len(), 2);
    assert_eq!(decoder.stats().unknown_template_sets, 2);
    // Sequence numbers count data records: the record that came before its
    // template could not be counted, so message 1 already looked 1 record late
    // (a collector cannot tell); then 1 + 2 records → 3 expected, 10 is 7 more.
    decoder
        .decode(exporter(), &ipfix_message(10, false, 1), &mut out)
        .unwrap();
    assert_eq!(decoder.stats().lost, 1 + 7);
    // Every truncation is an error, never a panic, and keeps earlier records.
    let message = ipfix_message(11, true, 3);
    for cut in 0..message.len() {
        let mut fresh = NetflowDecoder::new();
        let mut records = Vec::new();
        let _ = fresh.decode(exporter(), &message[..cut], &mut records);
        assert!(records.len() <= 3);
    }
}

#[test]
fn v9_options_announce_the_sampling_rate() {
    let mut p = Vec::new();
    p.extend(9u16.to_be_bytes());
    p.extend(3u16.to_be_bytes());
    p.extend(60_000u32.to_be_bytes()); // uptime 60 s
    p.extend(1_700_000_000u32.to_be_bytes());
    p.extend(1u32.to_be_bytes());
    p.extend(42u32.to_be_bytes());
    // Options template 257: scope System (1, 4 bytes), option SAMPLING_INTERVAL (34, 4).
    let options: Vec<u8> = [257u16, 4, 4, 1, 4, 34, 4]
        .iter()
        .flat_map(|v| v.to_be_bytes())
        .collect();
    p.extend(1u16.to_be_bytes());
    p.extend((options.len() as u16 + 4 + 2).to_be_bytes());
    p.extend(&options);
    p.extend([0, 0]); // padding
    // Template 256: src, dst, packets, bytes, first, last switched.
    let template: Vec<u8> = [256u16, 6, 8, 4, 12, 4, 2, 4, 1, 4, 22, 4, 21, 4]
        .iter()
        .flat_map(|v| v.to_be_bytes())
        .collect();
    p.extend(0u16.to_be_bytes());
    p.extend((template.len() as u16 + 4).to_be_bytes());
    p.extend(&template);
    // Options data: system 0, interval 10.
    p.extend(257u16.to_be_bytes());
    p.extend(12u16.to_be_bytes());
    p.extend(0u32.to_be_bytes());
    p.extend(10u32.to_be_bytes());
    // Flow data.
    p.extend(256u16.to_be_bytes());
    p.extend(28u16.to_be_bytes());
    p.extend([10, 9, 9, 9, 10, 8, 8, 8]);
    p.extend(5u32.to_be_bytes());
    p.extend(300u32.to_be_bytes());
    p.extend(50_000u32.to_be_bytes());
    p.extend(59_000u32.to_be_bytes());
    let mut decoder = NetflowDecoder::new();
    let mut out = Vec::new();
    decoder.decode(exporter(), &p, &mut out).unwrap();
    assert_eq!(out.len(), 1);
    let r = &out[0];
    assert_eq!((r.packets_out, r.bytes_out), (50, 3000));
    assert_eq!(r.first_ns, (1_700_000_000 - 10) * 1_000_000_000);
    assert_eq!(r.last_ns, (1_700_000_000 - 1) * 1_000_000_000);
    assert_eq!(r.source, FlowSource::NetflowV9);
    assert_eq!(decoder.stats().templates, 2);
}
