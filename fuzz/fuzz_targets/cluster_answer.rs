//! Fuzzes how the cluster reads a node's answer to a federated question (the
//! response head, its length or chunks, its error message). The reader's
//! source, `crates/cluster/src/pipeline.rs`, is compiled in here by path: the
//! cluster crate itself brings DataFusion, which a sanitizer build would spend
//! most of an hour compiling. Any bytes give a body or an error in words, never
//! a panic, and a body is never longer than the bytes it came in.

#![no_main]

#[path = "../../crates/cluster/src/pipeline.rs"]
#[allow(dead_code)]
mod pipeline;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match pipeline::read_answer(data) {
        Ok((_, body)) => assert!(body.len() <= data.len()),
        Err(why) => assert!(!why.is_empty()),
    }
});
