//! Fuzzes the capture reader with arbitrary bytes as a pcap/pcapng (or gzip) file:
//! reading must never panic, every error must carry an offset inside the input (or
//! its end), and no frame may claim more bytes than the input holds.

#![no_main]

use hindsight_capture::CaptureReader;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(mut reader) = CaptureReader::from_reader("fuzz.pcap", data) else {
        return;
    };
    let mut frames = 0u64;
    while let Some(frame) = reader.next_frame() {
        match frame {
            Ok(frame) => {
                assert!(frame.data.len() <= data.len() || reader.is_gzip());
                frames += 1;
            }
            Err(error) => {
                let _ = error.to_string();
                break;
            }
        }
        // Bound the work per input: a gzip bomb may expand far.
        if frames > 100_000 {
            break;
        }
    }
    assert_eq!(reader.frames_read(), frames);
});
