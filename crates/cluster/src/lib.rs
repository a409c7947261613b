//! The role of the cluster crate is to let one question reach many recorders
//! without flooding them (Hyperion's distributed index, section 5.3): each node
//! keeps its packets on its own disks and sends a coarse summary of every
//! sealed segment (time range, counts, a signature of its addresses) to the
//! cluster's index nodes; a question asks an index node which nodes may hold
//! matches, is sent to those alone, and their answers are merged, with every
//! node that could hold matches and did not answer named.
//!
//! - [`config`]: the cluster file (`[cluster]`): nodes, index nodes, token.
//! - [`signature`]: the Bloom filter over a segment's addresses and prefixes.
//! - [`summary`]: a segment's summary, built from its file.
//! - [`index`]: the index node's store of summaries and its routing.
//! - [`sync`]: the node's side, keeping its index nodes current.
//! - [`client`]: asking the cluster and merging the answers.
//! - [`pipeline`]: the nodes' packet and connection answers, asked of all at
//!   once from the asking thread.
//! - [`sql`]: SQL over the nodes, partial aggregation on each.

pub mod client;
pub mod config;
pub mod index;
pub mod pipeline;
pub mod signature;
pub mod sql;
pub mod summary;
pub mod sync;

pub use client::{ClusterClient, LocalNode, Missing, Outcome, PARTIAL_HEADER};
pub use config::ClusterConfig;
pub use index::ClusterIndex;
