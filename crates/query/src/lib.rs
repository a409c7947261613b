//! The role of the query crate is to answer questions about recorded traffic:
//! it plans and runs packet searches over the archive ([`search`]) with the
//! filter language of `hindsight-filter` (re-exported as [`filter`]), and
//! reports what went wrong by phase ([`error`]).

pub mod error;
pub mod search;

pub use error::{ParseError, QueryError};
pub use hindsight_filter as filter;
pub use hindsight_filter::{Filter, FilterSyntax};
