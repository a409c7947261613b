//! Fuzzes the filter parser with arbitrary UTF-8 in both syntaxes: parsing must
//! never panic, and a filter that parses must print a canonical form that parses
//! back (as Wireshark syntax) to the same tree and prints identically.

#![no_main]

use hindsight_filter::{Filter, FilterSyntax};
use hindsight_model::PacketRecord;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for syntax in [
        FilterSyntax::Auto,
        FilterSyntax::Wireshark,
        FilterSyntax::Bpf,
    ] {
        match Filter::parse_with(text, syntax) {
            Ok(filter) => {
                let printed = filter.to_string();
                let reparsed = match Filter::parse_with(&printed, FilterSyntax::Wireshark) {
                    Ok(reparsed) => reparsed,
                    Err(error) => panic!("{text:?} printed as {printed:?}, which fails:\n{error}"),
                };
                assert_eq!(reparsed.to_string(), printed, "round trip of {text:?}");
                assert_eq!(reparsed.root(), filter.root(), "tree of {text:?}");
                let _ = filter.matches(&PacketRecord::default());
                let _ = filter.address_ranges();
                let _ = filter.port_ranges();
            }
            Err(error) => {
                assert!(error.column >= 1, "column of {text:?}");
                let _ = error.to_string();
            }
        }
    }
});
