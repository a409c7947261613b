//! The role of the store crate is to keep packet and flow records durably and compactly:
//! it writes them into immutable, time-partitioned Parquet segments, seals each
//! segment atomically, lists it in the catalog with its summary, and recovers the
//! archive to a consistent state after a crash.
//!
//! The design follows the lightweight-persistence thesis (columnar compression of
//! packet headers) and Hyperion (immutable per-interval segments with summaries
//! that let queries skip what cannot match): see `docs/ARCHITECTURE.md`.

pub use arrow;
pub use parquet;

pub mod app_columns;
pub mod archive;
pub mod catalog;
pub mod disk;
pub mod error;
pub mod flows;
pub mod formats;
pub mod objects;
pub mod schema;
pub mod segment;
pub mod settings;
mod table;
pub mod tail;

pub use archive::{Archive, RecoveryReport};
pub use catalog::{Catalog, CatalogDamage, CatalogEntry};
pub use error::{Result, StoreError};
pub use segment::footers::FooterCache;
pub use segment::reader::{Damage, SegmentReader, TimeRange, TimeSpan};
pub use segment::writer::{SealedSegment, SegmentOptions, SegmentWriter};
pub use table::Table;
pub use tail::{Tail, TailView};
