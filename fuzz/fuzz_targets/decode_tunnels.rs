//! Fuzzes the tunnel decoders: the input follows an outer header chosen by its
//! first byte (Ethernet with each tunnel ethertype, IPv4 and IPv6 with each
//! tunnel protocol, UDP to each tunnel port), so every decapsulation is reached
//! with arbitrary inner bytes. Decoding must never panic, nested tunnels stay
//! bounded, and the stored form still gives the frame back byte for byte.

#![no_main]

use hindsight_model::{LinkType, PacketRecord, snap};
use libfuzzer_sys::fuzz_target;

const ETHERTYPES: [u16; 6] = [0x8847, 0x8848, 0x8864, 0x8903, 0x88a8, 0x894f];
const PROTOCOLS: [u8; 3] = [4, 41, 47];
const PORTS: [u16; 5] = [4789, 4790, 6081, 2152, 6635];

fn ethernet(kind: u16, payload: &[u8]) -> Vec<u8> {
    let mut out = vec![0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11];
    out.extend(kind.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

fn ipv4(proto: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = vec![0x45, 0];
    out.extend(u16::try_from(20 + payload.len()).unwrap_or(0).to_be_bytes());
    out.extend([0, 1, 0, 0, 64, proto, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
    out.extend_from_slice(payload);
    ethernet(0x0800, &out)
}

fn ipv6(next: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = vec![0x60, 0, 0, 0];
    out.extend(u16::try_from(payload.len()).unwrap_or(0).to_be_bytes());
    out.extend([next, 64]);
    out.extend([0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    out.extend([0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    out.extend_from_slice(payload);
    ethernet(0x86dd, &out)
}

fn udp(port: u16, payload: &[u8]) -> Vec<u8> {
    let mut out = 40000u16.to_be_bytes().to_vec();
    out.extend(port.to_be_bytes());
    out.extend(u16::try_from(8 + payload.len()).unwrap_or(0).to_be_bytes());
    out.extend([0, 0]);
    out.extend_from_slice(payload);
    ipv4(17, &out)
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, inner)) = data.split_first() else {
        return;
    };
    let choice = usize::from(selector);
    let frame = match choice % 4 {
        0 => ethernet(ETHERTYPES[choice / 4 % ETHERTYPES.len()], inner),
        1 => ipv4(PROTOCOLS[choice / 4 % PROTOCOLS.len()], inner),
        2 => ipv6(PROTOCOLS[choice / 4 % PROTOCOLS.len()], inner),
        _ => udp(PORTS[choice / 4 % PORTS.len()], inner),
    };
    let headers = hindsight_decode::decode(LinkType::ETHERNET, &frame);
    let wire_len = u32::try_from(frame.len()).unwrap_or(u32::MAX);
    let record = PacketRecord {
        ts_nanos: 0,
        wire_len,
        cap_len: wire_len,
        link_type: LinkType::ETHERNET,
        iface: 0,
        headers,
    };
    let mut stored = Vec::new();
    let form = snap::strip(&record, &frame, &mut stored);
    let mut back = Vec::new();
    assert!(snap::restore(form, &record, &stored, &mut back));
    assert_eq!(back, frame);
});
