//! Fuzzes the segment reader with damaged segment files (seed it with real
//! segments, see docs/ARCHITECTURE.md): opening, pruning, decoding every row
//! group into packet records, locating damage, rebuilding postings and reading
//! the summary must never panic; damage is an error, never a crash. (A
//! summary's own pages are not fuzzed past its CRC-32: the `parquet` crate
//! panics on crafted pages, which `summary::decode` contains.)

#![no_main]

#[path = "scratch.rs"]
mod scratch;

use hindsight_model::Addr16;
use hindsight_store::schema::PacketBatchView;
use hindsight_store::segment::summary;
use hindsight_store::{SegmentReader, TimeRange};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = scratch::scratch("segment", "parquet");
    if std::fs::write(path, data).is_err() {
        return;
    }
    let Ok(reader) = SegmentReader::open(path) else {
        return;
    };
    let _ = (reader.rows(), reader.time_bounds(), reader.table_name());
    let everything = [(Addr16([0; 16]), Addr16([0xff; 16]))];
    let groups = match reader.matching_row_groups(TimeRange::ALL, Some(&everything)) {
        Ok(groups) => groups,
        Err(_) => (0..reader.row_groups()).collect(),
    };
    if let Ok(batches) = reader.read(groups, None) {
        // Bound the work per input: a footer may claim many rows.
        for batch in batches.take(16) {
            let Ok(batch) = batch else { break };
            let view = PacketBatchView::new(&batch);
            for row in 0..view.len() {
                let record = view.record(row);
                let _ = (record.ts_nanos, view.data_form(row), view.data(row));
            }
        }
    }
    let _ = reader.find_damage().map(|damage| damage.to_string());
    let _ = reader.address_postings();
    for kind in summary::SummaryKind::ALL {
        let _ = reader.summary(kind);
    }
});
