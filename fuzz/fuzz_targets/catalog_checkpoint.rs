//! Fuzzes loading the catalog through its checkpoint (`catalog.checkpoint`,
//! docs/formats/segment.md): the input is a checkpoint's fields after its
//! covered-prefix length and CRC-32s, which the target fills in for a fixed
//! catalog. The target then lays the blocks end to end as the directory's
//! lengths say and makes every CRC-32 match (following the documented
//! layout, not the decoder), so that the fuzzer reaches the decoder and the
//! lines applied after it. Loading must never panic, and what loads must be
//! answerable, whether the whole prefix is checked (the writer), its tail
//! (a reader), or only the blocks of one window are read.

#![no_main]

#[path = "catalog_checks.rs"]
mod catalog_checks;
#[path = "scratch.rs"]
mod scratch;

use hindsight_model::SegmentId;
use hindsight_store::catalog::PrefixCheck;
use hindsight_store::{Catalog, TimeRange};
use libfuzzer_sys::fuzz_target;

/// Two checkpointed lines, then two after the prefix: a removal of a
/// checkpointed id and a new segment.
const COVERED: &str = concat!(
    r#"{"op":"add","id":1,"table":"packets","file":"packets/seg-000000000001.parquet","rows":10,"min_ts_nanos":100,"max_ts_nanos":150,"size_bytes":1000,"crc32":7,"sealed_at_nanos":1}"#,
    "\n",
    r#"{"op":"remove","id":3}"#,
    "\n",
);
const AFTER: &str = concat!(
    r#"{"op":"remove","id":2}"#,
    "\n",
    r#"{"op":"add","id":9,"table":"flows","file":"flows/seg-000000000009.parquet","rows":1,"min_ts_nanos":5,"max_ts_nanos":6,"size_bytes":10,"crc32":1,"sealed_at_nanos":2,"class":"dns"}"#,
    "\n",
);

fuzz_target!(|data: &[u8]| {
    let dir = scratch::scratch("catalog-checkpoint", "d");
    if std::fs::create_dir_all(dir).is_err() {
        return;
    }
    let catalog = dir.join("catalog.jsonl");
    if std::fs::write(&catalog, format!("{COVERED}{AFTER}")).is_err() {
        return;
    }
    let mut checkpoint = b"HSCKPT03".to_vec();
    checkpoint.extend_from_slice(&(COVERED.len() as u64).to_le_bytes());
    // The prefix is shorter than the tail a reader checks: both CRC-32s are its own.
    let covered_crc = crc32fast::hash(COVERED.as_bytes());
    checkpoint.extend_from_slice(&covered_crc.to_le_bytes());
    checkpoint.extend_from_slice(&covered_crc.to_le_bytes());
    checkpoint.extend_from_slice(data);
    seal(&mut checkpoint);
    if std::fs::write(dir.join("catalog.checkpoint"), &checkpoint).is_err() {
        return;
    }
    let window = TimeRange {
        start_nanos: 120,
        end_nanos: 130,
    };
    for check in [Some(PrefixCheck::Whole), Some(PrefixCheck::Tail), None] {
        let loaded = match check {
            Some(check) => Catalog::load_lenient(&catalog, check),
            None => Catalog::load_within(&catalog, window),
        };
        let Ok((loaded, _)) = loaded else {
            continue;
        };
        catalog_checks::check_entries(&loaded);
        // The lines after the prefix apply whatever the checkpoint held.
        assert!(loaded.get(SegmentId(2)).is_none());
        assert!(loaded.get(SegmentId(9)).is_some());
        assert!(loaded.max_id() >= Some(SegmentId(9)));
        let _ = (loaded.len(), loaded.wants_compaction());
    }
});

/// The head's fields before the directory, and one row of it.
const HEAD_FIXED: usize = 8 + 8 + 4 + 4 + 8 + 1 + 8 + 8 + 8;
const ROW_BYTES: usize = 60;

/// Lays the blocks the directory rows name end to end after the removed
/// ids (the last one to the end of the bytes) and makes the CRC-32s of the
/// removed ids, of each block and of the head match.
fn seal(bytes: &mut Vec<u8>) {
    if bytes.len() < HEAD_FIXED {
        bytes.resize(HEAD_FIXED, 0);
    }
    let field = |bytes: &[u8], at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
    // At most as many rows as the bytes hold: the count names the rest.
    let rows = (field(bytes, HEAD_FIXED - 8) as usize)
        .min(bytes.len().saturating_sub(HEAD_FIXED + 4) / ROW_BYTES);
    bytes[HEAD_FIXED - 8..HEAD_FIXED].copy_from_slice(&(rows as u64).to_le_bytes());
    let head_len = HEAD_FIXED + rows * ROW_BYTES + 4;
    let removed =
        (field(bytes, HEAD_FIXED - 16) as usize).min(bytes.len().saturating_sub(head_len) / 8);
    bytes[HEAD_FIXED - 16..HEAD_FIXED - 8].copy_from_slice(&(removed as u64).to_le_bytes());
    let blocks_at = head_len + removed * 8 + 4;
    if bytes.len() < blocks_at {
        bytes.resize(blocks_at, 0);
    }
    let crc = crc32fast::hash(&bytes[head_len..blocks_at - 4]);
    bytes[blocks_at - 4..blocks_at].copy_from_slice(&crc.to_le_bytes());
    let mut next = blocks_at;
    for row in 0..rows {
        let at = HEAD_FIXED + row * ROW_BYTES;
        let left = bytes.len() - next;
        let len = if row + 1 == rows {
            left
        } else {
            (field(bytes, at + 48) as usize).min(left)
        };
        let crc = crc32fast::hash(&bytes[next..next + len]);
        bytes[at + 40..at + 48].copy_from_slice(&(next as u64).to_le_bytes());
        bytes[at + 48..at + 56].copy_from_slice(&(len as u64).to_le_bytes());
        bytes[at + 56..at + 60].copy_from_slice(&crc.to_le_bytes());
        next += len;
    }
    let crc = crc32fast::hash(&bytes[..head_len - 4]);
    bytes[head_len - 4..head_len].copy_from_slice(&crc.to_le_bytes());
}
