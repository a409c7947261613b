//! The memory RocksDB takes in one process, under two bounds shared by every
//! index the process opens.
//!
//! Left to its defaults, RocksDB sizes memory per column family: each may hold
//! two memtables of `write_buffer_size` (64 MiB), and each table factory
//! without a block cache of its own makes a 32 MiB one. The indexes have eight
//! families between them and `serve` opens readers again and again, so what
//! RocksDB could take grew with the families and the readers, not with a
//! setting (at 502 M packets ingested, memtables held 100 MB of a 424 MB heap
//! peak: docs/ARCHITECTURE.md). Here every memtable of the process is counted
//! by one write-buffer manager, which flushes the largest when the total nears
//! [`MEMTABLE_BYTES`] and stalls writers above it, and every table factory
//! reads through one block cache of [`BLOCK_CACHE_BYTES`] (index and filter
//! blocks included, so a writer's open table files do not each hold theirs).

use std::sync::OnceLock;

use rocksdb::{BlockBasedOptions, Cache, Options, WriteBufferManager};

/// Bytes all memtables of the process may hold together.
pub const MEMTABLE_BYTES: usize = 64 << 20;

/// Bytes of the one block cache of the process: data, index and filter blocks
/// read by lookups and writers alike (pinned blocks may go over it by what
/// open table files pin: a top-level index of a few KiB each).
pub const BLOCK_CACHE_BYTES: usize = 32 << 20;

/// The process's cache and memtable manager, made at first use.
struct Shared {
    cache: Cache,
    memtables: WriteBufferManager,
}

fn shared() -> &'static Shared {
    static SHARED: OnceLock<Shared> = OnceLock::new();
    SHARED.get_or_init(|| Shared {
        cache: Cache::new_lru_cache(BLOCK_CACHE_BYTES),
        memtables: WriteBufferManager::new_write_buffer_manager(MEMTABLE_BYTES, true),
    })
}

/// Puts a database's memtables under the process's [`MEMTABLE_BYTES`].
pub(crate) fn bound_memtables(options: &mut Options) {
    options.set_write_buffer_manager(&shared().memtables);
}

/// Table options that read through the process's block cache, index and
/// filter blocks included.
pub(crate) fn block_options() -> BlockBasedOptions {
    let mut block = BlockBasedOptions::default();
    block.set_block_cache(&shared().cache);
    block.set_cache_index_and_filter_blocks(true);
    block
}

/// Bytes the process's block cache holds now.
#[cfg(test)]
fn block_cache_bytes() -> usize {
    shared().cache.get_usage()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::AddressIndex;
    use crate::connections::{ConnectionIndex, Expiry};
    use hindsight_model::{Addr16, GranuleSet, SegmentId};

    /// Both indexes of an archive, written and read, stay under the two
    /// bounds: 150 MB written into two families of the address index, where
    /// RocksDB's own sizing would let each family hold 64 MiB at once.
    #[test]
    fn every_index_of_a_process_shares_the_two_bounds() {
        let dir = tempfile::tempdir().unwrap();
        let addresses = AddressIndex::open(&dir.path().join("index")).unwrap();
        let _connections =
            ConnectionIndex::open(&dir.path().join("connections"), Expiry::default()).unwrap();
        let address = |segment: u64, n: u32| {
            Addr16::from_v4_bytes((n + u32::try_from(segment).unwrap() * 500).to_be_bytes())
        };
        // About 2 KB of postings and 1 KB of covering rows per address.
        let granules: GranuleSet = (0..2000u32).collect();
        let rows = vec![7u8; 1000];
        let mut peak = (0, 0);
        for segment in 0..100u64 {
            let postings: Vec<(Addr16, GranuleSet)> = (0..500)
                .map(|n| (address(segment, n), granules.clone()))
                .collect();
            let covered: Vec<(Addr16, Vec<u8>)> = (0..500)
                .map(|n| (address(segment, n), rows.clone()))
                .collect();
            addresses
                .add_segment(SegmentId(segment), &postings, &covered)
                .unwrap();
            let cache = block_cache_bytes();
            let memtables = usize::try_from(addresses.memtable_bytes()).unwrap();
            peak = (peak.0.max(cache), peak.1.max(memtables));
        }
        drop(addresses);
        let reader = AddressIndex::open_read_only(&dir.path().join("index"))
            .unwrap()
            .unwrap();
        for segment in (0..100u64).step_by(7) {
            let one = address(segment, 3);
            let found = reader.segments_with(&[(one, one)]).unwrap();
            assert_eq!(found.get(&SegmentId(segment)), Some(&granules), "{segment}");
        }
        peak.0 = peak.0.max(block_cache_bytes());
        eprintln!("peak block cache and memtable bytes: {peak:?}");
        assert!(peak.1 > 0, "no memtable was counted");
        assert!(peak.1 <= MEMTABLE_BYTES + (8 << 20), "memtables {peak:?}");
        assert!(peak.0 > 0, "no block was read through the cache");
        assert!(peak.0 <= BLOCK_CACHE_BYTES + (1 << 20), "cache {peak:?}");
    }
}
