//! Fuzzes the filters that read a packet's bytes: the input is a filter's text,
//! a NUL byte, then a frame (its first byte picking the link type). A filter that
//! parses is evaluated over the decoded frame, whole and cut short at every
//! length (as kept bytes of a longer capture): evaluation must never panic, a
//! frame cut short either decides as the whole frame does or says it cannot,
//! and the printed filter must say the same of the frame.

#![no_main]

use hindsight_filter::{Filter, FilterSyntax, Verdict};
use hindsight_model::{LinkType, PacketRecord};
use libfuzzer_sys::fuzz_target;

const LINK_TYPES: [LinkType; 5] = [
    LinkType::ETHERNET,
    LinkType::LINUX_SLL,
    LinkType::LINUX_SLL2,
    LinkType::RAW,
    LinkType::PPP,
];

fuzz_target!(|data: &[u8]| {
    let Some(split) = data.iter().position(|&b| b == 0) else {
        return;
    };
    let Ok(text) = std::str::from_utf8(&data[..split]) else {
        return;
    };
    let Some((&selector, frame)) = data[split + 1..].split_first() else {
        return;
    };
    let Ok(filter) = Filter::parse_with(text, FilterSyntax::Auto) else {
        return;
    };
    let link_type = LINK_TYPES[usize::from(selector) % LINK_TYPES.len()];
    let length = u32::try_from(frame.len()).unwrap_or(u32::MAX);
    let record = PacketRecord {
        ts_nanos: 0,
        wire_len: length,
        cap_len: length,
        link_type,
        iface: 0,
        headers: hindsight_decode::decode(link_type, frame),
    };
    let whole = filter.test(&record, frame);
    assert_ne!(whole, Verdict::Unknown, "{text:?}: every byte was captured");
    let printed = Filter::parse_with(&filter.to_string(), FilterSyntax::Wireshark)
        .unwrap_or_else(|error| panic!("{text:?} prints as {filter}, which fails: {error}"));
    assert_eq!(
        printed.test(&record, frame),
        whole,
        "{text:?} printed as {filter}"
    );
    let _ = filter.passes(&record, frame);
    for kept in 0..frame.len().min(96) {
        // Kept bytes either decide as the whole frame does, or say they cannot.
        let verdict = filter.test(&record, &frame[..kept]);
        assert!(
            verdict == Verdict::Unknown || verdict == whole,
            "{text:?} on {kept} of {} bytes: {verdict:?}, whole {whole:?}",
            frame.len()
        );
    }
});
