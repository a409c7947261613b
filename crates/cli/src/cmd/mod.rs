//! One module per subcommand.

pub mod check;
pub mod cluster;
pub mod collect;
pub mod flows;
pub mod ingest;
pub mod query;
pub mod record;
pub mod serve;
pub mod sql;
pub mod stats;
pub mod watch;

use std::process::ExitCode;

use hindsight_serve::client::Client;

/// Says on stderr that the serving process answered.
pub fn answered_by(client: &Client) {
    eprintln!(
        "hindsight: answered by the serving process at {} (sealed segments and what is not \
         yet sealed)",
        client.url()
    );
}

/// Says on stderr that the serving process did not answer.
pub fn unanswered(client: &Client, error: &anyhow::Error) {
    eprintln!(
        "hindsight: the serving process at {} did not answer ({error:#}): answering from \
         the sealed segments only",
        client.url()
    );
}

/// Prints what an answer went without, a line each; exit code 3 under
/// `--strict` if it went without anything.
pub fn warn_exit(lines: &[String], strict: bool) -> ExitCode {
    for line in lines {
        eprintln!("{line}");
    }
    match lines.is_empty() || !strict {
        true => ExitCode::SUCCESS,
        false => ExitCode::from(query::INCOMPLETE),
    }
}

/// The exit code of an answer the serving process said was incomplete.
pub fn incomplete_exit(incomplete: Option<String>, strict: bool) -> ExitCode {
    match incomplete {
        Some(what) => {
            eprintln!("warning: the answer is incomplete: {what}");
            if strict {
                ExitCode::from(query::INCOMPLETE)
            } else {
                ExitCode::SUCCESS
            }
        }
        None => ExitCode::SUCCESS,
    }
}
