//! `hindsight cluster status` and what the commands that ask a cluster share.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Result;
use hindsight_cluster::{ClusterClient, ClusterConfig, Outcome};

/// Arguments of `hindsight cluster`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(Debug, clap::Subcommand)]
enum What {
    /// The nodes as an index node sees them: time spans, summary lag, health.
    Status {
        /// The cluster file (`[cluster]`).
        #[arg(long, value_name = "CLUSTER.toml")]
        cluster: PathBuf,
        /// JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

/// A client of the cluster of `file`.
pub fn client(file: &Path) -> Result<ClusterClient> {
    Ok(ClusterClient::new(ClusterConfig::load(file)?))
}

/// Says on stderr which nodes answered and which did not; exit code 3 if the
/// answer is partial.
pub fn report(outcome: &Outcome) -> ExitCode {
    eprintln!("{}", hindsight_cluster::client::route_line(outcome));
    for note in &outcome.notes {
        eprintln!("warning: {note}");
    }
    for missing in &outcome.missing {
        eprintln!("warning: {missing}");
    }
    if outcome.is_partial() {
        eprintln!("warning: the answer is partial: nodes that may hold matches did not answer");
        ExitCode::from(super::query::INCOMPLETE)
    } else {
        ExitCode::SUCCESS
    }
}

/// Runs `hindsight cluster`.
pub fn run(args: Args) -> Result<ExitCode> {
    match args.what {
        What::Status { cluster, json } => {
            let client = client(&cluster)?;
            let status = hindsight_cluster::client::status(&client)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&status)?);
            } else {
                print!("{}", hindsight_cluster::client::status_table(&status));
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
