//! Fuzzes loading the catalog through its checkpoint (`catalog.checkpoint`,
//! docs/formats/segment.md): the input is a checkpoint's fields after its
//! covered-prefix length and CRC-32s, which the target fills in for a fixed
//! catalog, and the checkpoint's own CRC-32 is made to match, so that the
//! fuzzer reaches the decoder and the lines applied after it. Loading must
//! never panic, and what loads must be answerable, whether the whole prefix
//! is checked (the writer) or its tail (a reader).

#![no_main]

#[path = "catalog_checks.rs"]
mod catalog_checks;
#[path = "scratch.rs"]
mod scratch;

use hindsight_model::SegmentId;
use hindsight_store::Catalog;
use hindsight_store::catalog::PrefixCheck;
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
    let mut checkpoint = b"HSCKPT02".to_vec();
    checkpoint.extend_from_slice(&(COVERED.len() as u64).to_le_bytes());
    // The prefix is shorter than the tail a reader checks: both CRC-32s are its own.
    let covered_crc = crc32fast::hash(COVERED.as_bytes());
    checkpoint.extend_from_slice(&covered_crc.to_le_bytes());
    checkpoint.extend_from_slice(&covered_crc.to_le_bytes());
    checkpoint.extend_from_slice(data);
    let crc = crc32fast::hash(&checkpoint);
    checkpoint.extend_from_slice(&crc.to_le_bytes());
    if std::fs::write(dir.join("catalog.checkpoint"), &checkpoint).is_err() {
        return;
    }
    for check in [PrefixCheck::Whole, PrefixCheck::Tail] {
        let Ok((loaded, _)) = Catalog::load_lenient(&catalog, check) else {
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
