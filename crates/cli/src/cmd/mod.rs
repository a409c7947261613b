//! One module per subcommand.

pub mod check;
pub mod cluster;
pub mod collect;
pub mod flows;
pub mod generate;
pub mod ingest;
pub mod query;
pub mod record;
pub mod serve;
pub mod sql;
pub mod stats;
pub mod watch;

use std::process::ExitCode;

use hindsight_service::Answered;

/// Prints what the answer's asker is told (who answered, what it went
/// without); exit code 3 if a cluster's node did not answer, or, under
/// `--strict`, if damage left something out.
pub fn exit(answered: &Answered, strict: bool) -> ExitCode {
    for note in &answered.notes {
        eprintln!("{note}");
    }
    if answered.partial.is_some() || (strict && answered.incomplete) {
        ExitCode::from(query::INCOMPLETE)
    } else {
        ExitCode::SUCCESS
    }
}
