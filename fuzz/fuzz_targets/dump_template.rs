//! Fuzzes dump templates (`host $src and port $dport`), which come from users and
//! the API: reading a template never panics, a fault names a column within the
//! text, and a template that reads renders for any trigger packet without panic.

#![no_main]

use hindsight_model::{Addr16, PacketHeaders};
use hindsight_trigger::{DumpTemplate, TriggerError};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The first 20 bytes make the trigger packet, the rest is the template.
    let (packet, text) = data.split_at(data.len().min(20));
    let Ok(text) = std::str::from_utf8(text) else {
        return;
    };
    match DumpTemplate::new(text) {
        Ok(template) => {
            let byte = |i: usize| packet.get(i).copied().unwrap_or(0);
            let present = |i: usize| byte(19) & (1 << (i % 8)) != 0;
            let headers = PacketHeaders {
                src_addr: present(0).then(|| Addr16(std::array::from_fn(|i| byte(i)))),
                dst_addr: present(1).then(|| Addr16(std::array::from_fn(|i| byte(15 - i)))),
                src_port: present(2).then(|| u16::from_le_bytes([byte(16), byte(17)])),
                dst_port: present(3).then(|| u16::from_le_bytes([byte(17), byte(18)])),
                ip_proto: present(4).then(|| byte(18)),
                ..PacketHeaders::default()
            };
            let _ = template.render(&headers);
        }
        Err(TriggerError::UnknownPlaceholder { column, .. }) => {
            assert!(
                column >= 1 && column <= text.chars().count(),
                "column of {text:?}"
            );
        }
        Err(error) => {
            let _ = error.to_string();
        }
    }
});
