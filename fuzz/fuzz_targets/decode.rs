//! Fuzzes the packet decoder with arbitrary frames of every link type it knows (and
//! some it does not): decoding must never panic. The stored form of the frame
//! (`hindsight_model::snap`) must give the frame back byte for byte, and putting
//! back damaged stored bytes (or a wrong wire length) must not panic either.

#![no_main]

use hindsight_model::{LinkType, PacketRecord, snap};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&selector, frame)) = data.split_first() else {
        return;
    };
    // The first byte picks a link type: the supported ones, then raw values.
    let link_type = match selector % 17 {
        0 => LinkType::ETHERNET,
        1 => LinkType::NULL,
        2 => LinkType::LOOP,
        3 => LinkType::RAW,
        4 => LinkType::IPV4,
        5 => LinkType::IPV6,
        6 => LinkType::LINUX_SLL,
        7 => LinkType::LINUX_SLL2,
        8 => LinkType::IPNET,
        9 => LinkType::PPP,
        10 => LinkType::PPP_HDLC,
        11 => LinkType::PPP_ETHER,
        12 => LinkType::C_HDLC,
        13 => LinkType::PPP_WITH_DIR,
        14 => LinkType::C_HDLC_WITH_DIR,
        _ => LinkType(u16::from(selector)),
    };
    let headers = hindsight_decode::decode(link_type, frame);
    let _ = headers.status.name();
    // The frame as cut by a snap length: the selector also says how many bytes
    // the wire had beyond it (none for most).
    let wire_len = u32::try_from(frame.len())
        .unwrap_or(u32::MAX)
        .saturating_add(u32::from(selector / 17));
    let record = PacketRecord {
        ts_nanos: 0,
        wire_len,
        cap_len: wire_len,
        link_type,
        iface: 0,
        headers,
    };
    let mut stored = Vec::new();
    let form = snap::strip(&record, frame, &mut stored);
    let mut back = Vec::new();
    assert!(snap::restore(form, &record, &stored, &mut back));
    assert_eq!(back, frame);
    // Damaged stored bytes: every cut of them, with the decoded headers, and the
    // whole of them with another wire length.
    for cut in 0..stored.len().min(64) {
        back.clear();
        let _ = snap::restore(form, &record, &stored[..cut], &mut back);
    }
    for wire_len in [0, 1, 20, 54, u32::MAX] {
        back.clear();
        let _ = snap::restore(
            form,
            &PacketRecord { wire_len, ..record },
            &stored,
            &mut back,
        );
    }
});
