//! Fuzzes the packet decoder with arbitrary frames of every link type it knows (and
//! some it does not): decoding must never panic, and the decoded offsets stay inside
//! the frame.

#![no_main]

use hindsight_model::LinkType;
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
});
