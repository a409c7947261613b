//! The role of the query crate is to answer questions about recorded traffic:
//! it parses filters ([`filter`]), plans and runs packet searches over the archive
//! ([`search`]), and reports what went wrong by phase ([`error`]).

pub mod error;
pub mod filter;
#[cfg(feature = "search")]
pub mod search;

pub use error::{ParseError, QueryError};
pub use filter::{Filter, FilterSyntax};
