//! What an archive holds, counted from its catalog when a snapshot is loaded:
//! `hindsight stats`, `GET /api/v1/stats` and the metrics read it from there.

use std::path::Path;

use hindsight_store::{Archive, CatalogEntry, Table};

/// The totals of one table's sealed segments.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TableTotals {
    /// Segments.
    pub segments: usize,
    /// Rows (packets, flow records).
    pub rows: u64,
    /// Bytes on disk.
    pub bytes: u64,
    /// The earliest row's time, ns.
    pub first_ns: Option<i64>,
    /// The latest row's time, ns.
    pub last_ns: Option<i64>,
}

impl TableTotals {
    fn of<'a>(entries: impl Iterator<Item = &'a CatalogEntry>) -> Self {
        entries.fold(Self::default(), |t, e| Self {
            segments: t.segments + 1,
            rows: t.rows + e.rows,
            bytes: t.bytes + e.size_bytes,
            first_ns: Some(t.first_ns.map_or(e.min_ts_nanos, |f| f.min(e.min_ts_nanos))),
            last_ns: Some(t.last_ns.map_or(e.max_ts_nanos, |l| l.max(e.max_ts_nanos))),
        })
    }
}

/// What an archive holds.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Summary {
    /// The `packets` table.
    pub packets: TableTotals,
    /// The `flows` table.
    pub flows: TableTotals,
}

impl Summary {
    /// Counts the catalog of `archive`.
    pub fn of(archive: &Archive) -> Self {
        let catalog = archive.catalog();
        Self {
            packets: TableTotals::of(catalog.entries_of(Table::Packets)),
            flows: TableTotals::of(catalog.entries_of(Table::Flows)),
        }
    }

    /// The totals of `table`.
    pub fn table(&self, table: Table) -> &TableTotals {
        match table {
            Table::Packets => &self.packets,
            Table::Flows => &self.flows,
        }
    }

    /// Bytes on disk per stored packet.
    pub fn bytes_per_packet(&self) -> f64 {
        if self.packets.rows == 0 {
            0.0
        } else {
            self.packets.bytes as f64 / self.packets.rows as f64
        }
    }
}

/// Bytes of the regular files under `dir`, recursively; what cannot be read counts 0.
pub(crate) fn disk_usage(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .map(|entry| match entry.file_type() {
            Ok(kind) if kind.is_dir() => disk_usage(&entry.path()),
            Ok(kind) if kind.is_file() => entry.metadata().map_or(0, |m| m.len()),
            _ => 0,
        })
        .sum()
}
