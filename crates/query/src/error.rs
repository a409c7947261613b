//! Errors of the query crate, one variant per phase of a query: parse, plan,
//! execution, resources exhausted, internal.

/// An error of a query, by the phase that failed.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    /// The filter text is not a valid filter.
    #[error(transparent)]
    Parse(#[from] ParseError),
    /// The filter is valid but no plan can run it (an unknown time window, a missing index...).
    #[error("cannot plan the query: {message}")]
    Plan {
        /// What stops the planner.
        message: String,
    },
    /// The query failed while running.
    #[error("query failed: {message}")]
    Execution {
        /// What went wrong.
        message: String,
    },
    /// The query would exceed a limit set to protect the server.
    #[error("query exceeds the {resource} limit of {limit}")]
    ResourcesExhausted {
        /// The limited resource ("result rows", "scanned segments"...).
        resource: &'static str,
        /// The limit that was reached.
        limit: u64,
    },
    /// The archive could not be read (missing, damaged, unreadable segment).
    #[error(transparent)]
    Archive(#[from] hindsight_store::StoreError),
    /// The address index could not be read.
    #[error(transparent)]
    Index(#[from] hindsight_index::IndexError),
    /// Results could not be written (a closed pipe, a full disk).
    #[error("cannot write results")]
    Output(#[source] std::io::Error),
    /// A bug in hindsight: a state the code should never reach.
    #[error("internal error: {message}")]
    Internal {
        /// What was found broken.
        message: String,
    },
}

pub use hindsight_filter::ParseError;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_error_wraps_parse_error_transparently() {
        let error = QueryError::from(ParseError::new("(", 2, "", "unexpected end of filter"));
        assert!(matches!(error, QueryError::Parse(_)));
        assert_eq!(error.to_string(), "(\n ^ unexpected end of filter");
    }
}
