//! Fuzzes the application parsers one at a time on the same bytes: a DNS
//! message, a TLS record stream (its first handshake message, then a
//! ClientHello and a ServerHello body with their fingerprints), an HTTP request
//! and response head (whole and cut), an SSH banner. Any input must give a
//! value or `None`, never a panic. The first byte picks the parser, so a run
//! spends its time on one: `cargo +nightly fuzz run -O app_parsers`.

#![no_main]

use hindsight_app::{dns, http, ssh, tls};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&which, bytes)) = data.split_first() else {
        return;
    };
    match which % 4 {
        0 => {
            let _ = dns::parse(bytes);
        }
        1 => {
            let mut scratch = Vec::new();
            let _ = tls::handshake(bytes, &mut scratch);
            if let Some(hello) = tls::ClientHello::parse(bytes) {
                let _ = hello.ja3();
                let _ = hello.ja4(b't');
                let _ = hello.ja4(b'q');
            }
            if let Some(hello) = tls::ServerHello::parse(bytes) {
                let _ = hello.ja3s();
            }
        }
        2 => {
            for complete in [true, false] {
                let _ = http::request(bytes, complete);
                let _ = http::response(bytes, complete);
            }
        }
        _ => {
            let _ = ssh::banner(bytes);
        }
    }
});
