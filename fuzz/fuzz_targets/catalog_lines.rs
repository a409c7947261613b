//! Fuzzes the catalog's loading with damaged `catalog.jsonl` files (seed it
//! with a real archive's catalog): its own line reader and `serde_json`'s
//! must never panic, and what loads must be answerable (entries, lookups,
//! the largest id); damage is skipped or an error, never a crash.

#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use hindsight_model::SegmentId;
use hindsight_store::Catalog;
use libfuzzer_sys::fuzz_target;

/// One scratch file per fuzzing process, in memory where the system has it.
fn scratch() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let dir = if std::path::Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        dir.join(format!("hindsight-fuzz-catalog-{}.jsonl", std::process::id()))
    })
}

fuzz_target!(|data: &[u8]| {
    let path = scratch();
    if std::fs::write(path, data).is_err() {
        return;
    }
    let _ = Catalog::load(path);
    let Ok((catalog, _damage)) = Catalog::load_lenient(path) else {
        return;
    };
    let mut previous = None;
    for entry in catalog.entries() {
        // Live entries are in increasing id order, and each is found.
        assert!(previous < Some(entry.id));
        previous = Some(entry.id);
        assert!(catalog.get(entry.segment_id()).is_some());
        assert!(catalog.max_id() >= Some(entry.segment_id()));
    }
    let _ = (catalog.len(), catalog.wants_compaction(), catalog.get(SegmentId(0)));
});
