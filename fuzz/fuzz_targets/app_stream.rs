//! Fuzzes one connection's extractor: the input is a sequence of segments
//! (1 byte of flags: direction, SYN, cut; 4 bytes of sequence number; 1 byte of
//! length; the payload), pushed into a TCP and a UDP (DNS port) conversation
//! with small limits, so that reassembly (retransmissions, gaps, held
//! segments, the buffer bound) and every parser meet arbitrary streams. Never a
//! panic, and the buffers stay within the limits.

#![no_main]

use hindsight_app::{Conversation, Limits};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let limits = Limits {
        stream_bytes: 512,
        datagrams: 8,
    };
    let mut tcp = Conversation::new(6, 40000, 443, limits).unwrap();
    let mut udp = Conversation::new(17, 40000, 53, limits).unwrap();
    let mut at = data;
    while let [flags, s0, s1, s2, s3, len, rest @ ..] = at {
        let len = usize::from(*len).min(rest.len());
        let (payload, tail) = rest.split_at(len);
        at = tail;
        let from_originator = flags & 1 != 0;
        let seq = u32::from_be_bytes([*s0, *s1, *s2, *s3]);
        if flags & 2 != 0 {
            tcp.syn(from_originator, seq);
        }
        tcp.push(from_originator, Some(seq), payload, flags & 4 != 0);
        udp.push(from_originator, None, payload, false);
        // Two buffers of the limit, and what is held ahead of gaps.
        assert!(tcp.buffered() <= 4 * 1024, "{}", tcp.buffered());
    }
    let _ = tcp.finish();
    let _ = udp.finish();
});
