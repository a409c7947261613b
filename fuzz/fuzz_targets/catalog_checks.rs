//! What every loaded catalog must answer, for the catalog fuzz targets.

use hindsight_store::Catalog;

/// Live entries are in increasing id order, each is found by its id, and the
/// largest id is at least each of theirs.
pub fn check_entries(catalog: &Catalog) {
    let mut previous = None;
    for entry in catalog.entries() {
        assert!(previous < Some(entry.id));
        previous = Some(entry.id);
        assert!(catalog.get(entry.segment_id()).is_some());
        assert!(catalog.max_id() >= Some(entry.segment_id()));
    }
}
