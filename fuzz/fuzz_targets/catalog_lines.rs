//! Fuzzes the catalog's loading with damaged `catalog.jsonl` files (seed it
//! with a real archive's catalog): its own line reader and `serde_json`'s
//! must never panic, and what loads must be answerable (entries, lookups,
//! the largest id); damage is skipped or an error, never a crash.

#![no_main]

#[path = "catalog_checks.rs"]
mod catalog_checks;
#[path = "scratch.rs"]
mod scratch;

use hindsight_model::SegmentId;
use hindsight_store::Catalog;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = scratch::scratch("catalog", "jsonl");
    if std::fs::write(path, data).is_err() {
        return;
    }
    let _ = Catalog::load(path);
    let Ok((catalog, _damage)) = Catalog::load_lenient(path) else {
        return;
    };
    catalog_checks::check_entries(&catalog);
    let _ = (
        catalog.len(),
        catalog.wants_compaction(),
        catalog.get(SegmentId(0)),
    );
});
