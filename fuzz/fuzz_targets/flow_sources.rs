//! Fuzzes the flow sources: arbitrary text as a Zeek log (TSV or JSON lines;
//! conn.log records, or dns/ssl/http/ssh fields joined by uid) must give
//! records or line errors, never a panic; arbitrary frames through the
//! decoder into the flow table must give records that account for every packet.

#![no_main]

use hindsight_flow::zeek::{ConnLogReader, LogReader, UidJoin, app_record};
use hindsight_flow::{FlowTable, FlowTableConfig};
use hindsight_model::LinkType;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    if selector & 1 == 0 {
        let text = String::from_utf8_lossy(rest);
        let mut reader = ConnLogReader::new();
        for line in text.split('\n') {
            if let Ok(Some(record)) = reader.push_line(line) {
                assert!(record.last_ns >= record.first_ns);
            }
        }
        let mut log = LogReader::new();
        let mut join = UidJoin::new(4);
        for line in text.split('\n') {
            if let Ok(Some(row)) = log.push_line(line) {
                if let Ok(Some(record)) = app_record(&row) {
                    let uid = record.uid.clone();
                    if join.add(record) {
                        assert!(join.take(&uid).is_some());
                    }
                }
            }
        }
        return;
    }
    // Frames: 2-byte length, 4-byte time offset (ms), then the frame bytes.
    let config = FlowTableConfig {
        max_flows: 4,
        ..FlowTableConfig::default()
    };
    let mut table = FlowTable::new(config);
    let mut out = Vec::new();
    let mut at = rest;
    let mut now: i64 = 0;
    while at.len() >= 6 {
        let len = usize::from(u16::from_le_bytes([at[0], at[1]])).min(at.len() - 6);
        let step = i64::from(u32::from_le_bytes([at[2], at[3], at[4], at[5]]));
        now = now.saturating_add(step * 1_000_000);
        let frame = &at[6..6 + len];
        let headers = hindsight_decode::decode(LinkType::ETHERNET, frame);
        table.push(now, &headers, len as u32, &mut out);
        at = &at[6 + len..];
    }
    table.flush(&mut out);
    let packets: u64 = out.iter().map(|r| r.packets_out + r.packets_in).sum();
    assert_eq!(packets, table.stats().packets);
});
