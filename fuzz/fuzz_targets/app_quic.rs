//! Fuzzes QUIC Initial reading: the input is a connection ID (1 byte of
//! length, at most 20, then its bytes) and a sequence of chunks (2 bytes of
//! length, 1 byte of flags, the chunk). A chunk with flag bit 0 is a frame
//! sequence that the target encrypts into a valid client Initial, so the frame
//! reader and the CRYPTO reassembly meet arbitrary plaintext after a real
//! decryption; otherwise it is a raw datagram from the client (bit 1) or the
//! server, so the header parser, Retry handling and the decryption of garbage
//! meet it. Never a panic; the hellos found are parsed as the extractor does.

#![no_main]

use hindsight_app::quic::{Initials, client_initial};
use hindsight_app::tls;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&len, rest)) = data.split_first() else {
        return;
    };
    let len = usize::from(len % 21).min(rest.len());
    let (dcid, mut at) = rest.split_at(len);
    let mut initials = Initials::default();
    while let [hi, lo, flags, tail @ ..] = at {
        let n = usize::from(u16::from_be_bytes([*hi, *lo])).min(tail.len());
        let (chunk, next) = tail.split_at(n);
        at = next;
        if flags & 1 != 0 {
            if let Some(packet) = client_initial(dcid, chunk) {
                initials.datagram(true, &packet);
            }
        } else {
            initials.datagram(flags & 2 != 0, chunk);
        }
    }
    if let Some((_, body)) = initials.client_message()
        && let Some(hello) = tls::ClientHello::parse(body)
    {
        let _ = hello.ja4(b'q');
    }
    if let Some((_, body)) = initials.server_message() {
        let _ = tls::ServerHello::parse(body);
    }
});
