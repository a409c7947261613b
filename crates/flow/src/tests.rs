use super::*;

const SEC: i64 = 1_000_000_000;
const SYN: u16 = tcp_flags::SYN;
const ACK: u16 = tcp_flags::ACK;
const FIN: u16 = tcp_flags::FIN;
const RST: u16 = tcp_flags::RST;
const PSH: u16 = tcp_flags::PSH;

fn v4(d: u8) -> Addr16 {
    Addr16::from_v4_bytes([10, 0, 0, d])
}

fn tcp(src: u8, sport: u16, dst: u8, dport: u16, flags: u16, ip_len: u32) -> PacketHeaders {
    PacketHeaders {
        ip_version: Some(4),
        src_addr: Some(v4(src)),
        dst_addr: Some(v4(dst)),
        ip_proto: Some(ip_proto::TCP),
        ip_len: Some(ip_len),
        src_port: Some(sport),
        dst_port: Some(dport),
        tcp_flags: Some(flags),
        ..PacketHeaders::default()
    }
}

fn udp(src: u8, sport: u16, dst: u8, dport: u16) -> PacketHeaders {
    PacketHeaders {
        ip_version: Some(4),
        src_addr: Some(v4(src)),
        dst_addr: Some(v4(dst)),
        ip_proto: Some(ip_proto::UDP),
        ip_len: Some(100),
        src_port: Some(sport),
        dst_port: Some(dport),
        ..PacketHeaders::default()
    }
}

/// Runs packets (time in ms, headers) through a table; returns every record.
fn run(
    config: FlowTableConfig,
    packets: &[(i64, PacketHeaders)],
) -> (Vec<FlowRecord>, FlowTableStats) {
    let mut table = FlowTable::new(config);
    let mut out = Vec::new();
    for (ms, headers) in packets {
        table.push(ms * 1_000_000, headers, 60, &mut out);
    }
    table.flush(&mut out);
    (out, table.stats())
}

#[test]
fn a_closed_tcp_connection_is_one_record_with_both_directions() {
    let packets = [
        (0, tcp(1, 40_000, 2, 80, SYN, 60)),
        (1, tcp(2, 80, 1, 40_000, SYN | ACK, 60)),
        (2, tcp(1, 40_000, 2, 80, ACK, 52)),
        (3, tcp(1, 40_000, 2, 80, PSH | ACK, 552)),
        (4, tcp(2, 80, 1, 40_000, PSH | ACK, 1_452)),
        (5, tcp(1, 40_000, 2, 80, FIN | ACK, 52)),
        (6, tcp(2, 80, 1, 40_000, FIN | ACK, 52)),
        // The last ACK comes after both FINs and still belongs to the connection.
        (7, tcp(1, 40_000, 2, 80, ACK, 52)),
    ];
    let (records, stats) = run(FlowTableConfig::default(), &packets);
    assert_eq!(records.len(), 1, "{records:?}");
    let r = &records[0];
    assert_eq!(
        (r.src, r.src_port, r.dst, r.dst_port),
        (v4(1), 40_000, v4(2), 80)
    );
    assert_eq!((r.packets_out, r.bytes_out), (5, 60 + 52 + 552 + 52 + 52));
    assert_eq!((r.packets_in, r.bytes_in), (3, 60 + 1_452 + 52));
    assert_eq!(r.tcp_flags, SYN | ACK | PSH | FIN);
    assert_eq!(r.state, FlowState::SF);
    assert_eq!((r.first_ns, r.last_ns), (0, 7_000_000));
    assert_eq!(r.source, FlowSource::Packets);
    // Records built from packets keep no uid: it is derived when read.
    assert!(r.uid.is_empty());
    assert!(
        r.uid().starts_with('P') && r.uid().len() == 18,
        "{}",
        r.uid()
    );
    assert_eq!(stats.packets, 8);
    assert_eq!(stats.records, 1);
}

#[test]
fn after_the_close_linger_the_same_ports_start_a_new_record() {
    let packets = [
        (0, tcp(1, 40_000, 2, 80, SYN, 60)),
        (1, tcp(2, 80, 1, 40_000, RST | ACK, 40)),
        (10_000, tcp(1, 40_000, 2, 80, SYN, 60)),
    ];
    let (records, _) = run(FlowTableConfig::default(), &packets);
    assert_eq!(records.len(), 2);
    assert_eq!(records[0].state, FlowState::REJ);
    assert_eq!(records[1].state, FlowState::S0);
    assert_ne!(records[0].uid(), records[1].uid());
}

#[test]
fn a_syn_ack_seen_first_makes_its_receiver_the_originator() {
    let packets = [
        (0, tcp(2, 443, 1, 50_000, SYN | ACK, 60)),
        (1, tcp(1, 50_000, 2, 443, ACK, 52)),
    ];
    let (records, _) = run(FlowTableConfig::default(), &packets);
    let r = &records[0];
    assert_eq!((r.src, r.src_port, r.dst_port), (v4(1), 50_000, 443));
    assert_eq!((r.packets_out, r.packets_in), (1, 1));
    assert_eq!(r.state, FlowState::OTH);
}

#[test]
fn idle_and_active_timeouts_cut_records_in_packet_time() {
    // Idle: 61 s of silence.
    let (records, _) = run(
        FlowTableConfig::default(),
        &[(0, udp(1, 53, 2, 53)), (61_000, udp(2, 53, 1, 53))],
    );
    assert_eq!(records.len(), 2);
    // Active: a packet every 10 s for 690 s gives records of 0–290, 300–590, 600–690.
    let packets: Vec<(i64, PacketHeaders)> = (0..70)
        .map(|i| (i * 10_000, udp(1, 5000, 2, 6000)))
        .collect();
    let (records, _) = run(FlowTableConfig::default(), &packets);
    let spans: Vec<(i64, i64, u64)> = records
        .iter()
        .map(|r| (r.first_ns / SEC, r.last_ns / SEC, r.packets_out))
        .collect();
    assert_eq!(spans, [(0, 290, 30), (300, 590, 30), (600, 690, 10)]);
    assert!(records.iter().all(|r| r.state == FlowState::S0));
}

#[test]
fn icmp_is_not_paired_and_carries_type_and_code_in_the_port() {
    let icmp = |src: u8, dst: u8, kind: u8| PacketHeaders {
        ip_version: Some(4),
        src_addr: Some(v4(src)),
        dst_addr: Some(v4(dst)),
        ip_proto: Some(ip_proto::ICMP),
        ip_len: Some(84),
        icmp_type: Some(kind),
        icmp_code: Some(0),
        ..PacketHeaders::default()
    };
    let (records, _) = run(
        FlowTableConfig::default(),
        &[
            (0, icmp(1, 2, 8)),
            (1, icmp(2, 1, 0)),
            (1_000, icmp(1, 2, 8)),
        ],
    );
    let seen: Vec<(Addr16, u16, u16, u64)> = records
        .iter()
        .map(|r| (r.src, r.src_port, r.dst_port, r.packets_out))
        .collect();
    assert_eq!(seen, [(v4(1), 0, 0x0800, 2), (v4(2), 0, 0x0000, 1)]);
}

#[test]
fn a_full_table_closes_the_flow_due_first_and_non_ip_is_not_a_flow() {
    let config = FlowTableConfig {
        max_flows: 2,
        ..FlowTableConfig::default()
    };
    let mut table = FlowTable::new(config);
    let mut out = Vec::new();
    table.push(0, &udp(1, 1, 2, 2), 60, &mut out);
    table.push(1, &udp(1, 1, 3, 3), 60, &mut out);
    table.push(2, &udp(1, 1, 4, 4), 60, &mut out);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].dst, v4(2));
    assert_eq!(table.open_flows(), 2);
    table.push(3, &PacketHeaders::default(), 60, &mut out);
    assert_eq!(table.stats().not_flows, 1);
    assert_eq!(table.stats().evicted, 1);
    // Without an IP length (TSO), the wire length counts.
    let mut tso = udp(1, 1, 2, 2);
    tso.ip_len = None;
    table.push(4, &tso, 1_514, &mut out);
    table.flush(&mut out);
    let last = out
        .iter()
        .find(|r| r.first_ns == 4)
        .expect("record of the TSO packet");
    assert_eq!(last.bytes_out, 1_514);
}

/// Pushes packets with payloads (time in ms, headers, sequence number, bytes).
fn run_payloads(
    config: FlowTableConfig,
    packets: &[(i64, PacketHeaders, Option<u32>, &[u8])],
) -> (Vec<FlowRecord>, FlowTableStats) {
    let mut table = FlowTable::new(config);
    let mut out = Vec::new();
    for (ms, headers, seq, bytes) in packets {
        let payload = Payload {
            bytes,
            seq: *seq,
            cut: false,
        };
        table.push_payload(ms * 1_000_000, headers, 60, payload, &mut out);
    }
    table.flush(&mut out);
    (out, table.stats())
}

#[test]
fn application_fields_come_from_the_first_packets_of_each_direction() {
    let request: &[u8] = b"GET /a HTTP/1.1\r\nHost: example.com\r\n\r\n";
    let response: &[u8] = b"HTTP/1.1 404 Not Found\r\n\r\n";
    let packets = [
        (0, tcp(1, 40_000, 2, 80, SYN, 60), Some(100), &b""[..]),
        (1, tcp(2, 80, 1, 40_000, SYN | ACK, 60), Some(500), &b""[..]),
        // The response's segment comes before the request's: each direction
        // is read on its own.
        (
            2,
            tcp(2, 80, 1, 40_000, ACK | PSH, 100),
            Some(501),
            response,
        ),
        (3, tcp(1, 40_000, 2, 80, ACK | PSH, 100), Some(101), request),
        (4, udp(1, 5353, 3, 5353), None, &b"not dns"[..]),
    ];
    let (records, stats) = run_payloads(FlowTableConfig::default(), &packets);
    let http = records[0].app.as_ref().unwrap().http.as_ref().unwrap();
    assert_eq!(http.host.as_deref(), Some("example.com"));
    assert_eq!(http.uri.as_deref(), Some("/a"));
    assert_eq!(http.status, Some(404));
    assert_eq!(records[1].app, None);
    assert_eq!(stats.app_records, 1);

    let off = FlowTableConfig {
        app: None,
        ..FlowTableConfig::default()
    };
    let (records, stats) = run_payloads(off, &packets);
    assert_eq!(records[0].app, None);
    assert_eq!(stats.app_records, 0);
}

#[test]
fn the_buffers_of_all_flows_are_bounded() {
    // A request head that never ends, on 50 connections, against a bound of
    // two connections' worth: the others give what they had when it was hit.
    let config = FlowTableConfig {
        app_buffer_bytes: 2 * 1024,
        ..FlowTableConfig::default()
    };
    let head: &[u8] = b"GET /x HTTP/1.1\r\nHost: h\r\nX-Pad: ";
    let pad = [b'a'; 1000];
    let mut packets = Vec::new();
    for i in 0..50u16 {
        let port = 40_000 + i;
        packets.push((
            i64::from(i),
            tcp(1, port, 2, 80, ACK | PSH, 100),
            Some(1),
            head,
        ));
        packets.push((
            i64::from(i),
            tcp(1, port, 2, 80, ACK | PSH, 100),
            Some(35),
            &pad[..],
        ));
    }
    let (records, stats) = run_payloads(config, &packets);
    assert!(stats.app_cut >= 45, "{stats:?}");
    assert_eq!(records.len(), 50);
    for record in &records {
        let http = record.app.as_ref().unwrap().http.as_ref().unwrap();
        assert_eq!(http.host.as_deref(), Some("h"));
    }
}
