//! Fuzzes the packet decoder with arbitrary frames of every link type it knows (and
//! some it does not): decoding must never panic. The stored form of the frame
//! (`hindsight_model::snap`) must give the frame back byte for byte, and putting
//! back damaged stored bytes must not panic either.

#![no_main]

use hindsight_model::{LinkType, snap};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&selector, frame)) = data.split_first() else {
        return;
    };
    // The first byte picks a link type: the supported ones, then raw values.
    let link_type = match selector % 11 {
        0 => LinkType::ETHERNET,
        1 => LinkType::NULL,
        2 => LinkType::LOOP,
        3 => LinkType::RAW,
        4 => LinkType::IPV4,
        5 => LinkType::IPV6,
        6 => LinkType::LINUX_SLL,
        7 => LinkType::LINUX_SLL2,
        8 => LinkType::IPNET,
        _ => LinkType(u16::from(selector)),
    };
    let headers = hindsight_decode::decode(link_type, frame);
    let _ = headers.status.name();
    let mut stored = Vec::new();
    let form = snap::strip(link_type, &headers, frame, &mut stored);
    let mut back = Vec::new();
    assert!(snap::restore(form, &headers, &stored, &mut back));
    assert_eq!(back, frame);
    // Damaged stored bytes: every cut of them, with the decoded headers.
    for cut in 0..stored.len().min(64) {
        back.clear();
        let _ = snap::restore(form, &headers, &stored[..cut], &mut back);
    }
});
