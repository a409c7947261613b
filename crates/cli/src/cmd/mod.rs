//! One module per subcommand.

pub mod check;
pub mod collect;
pub mod flows;
pub mod ingest;
pub mod query;
pub mod record;
pub mod serve;
pub mod sql;
pub mod stats;
