//! `hindsight cluster status`, and what the commands that ask a cluster share.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Result;
use hindsight_cluster::{ClusterClient, ClusterConfig, Outcome};

/// Arguments of `hindsight cluster status`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// `status`: the nodes as an index node sees them (time spans, summary lag, health).
    #[arg(value_parser = ["status"])]
    what: String,
    /// The cluster file (`[cluster]`).
    #[arg(long, value_name = "CLUSTER.toml")]
    cluster: PathBuf,
    /// JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// A client of the cluster of `file`.
pub fn client(file: &Path) -> Result<ClusterClient> {
    Ok(ClusterClient::new(ClusterConfig::load(file)?))
}

/// Says on stderr which nodes were asked and which did not answer; exit code
/// 3 if the answer is partial.
pub fn report(outcome: &Outcome) -> ExitCode {
    for line in hindsight_cluster::client::report_lines(outcome) {
        eprintln!("{line}");
    }
    ExitCode::from(if outcome.is_partial() {
        super::query::INCOMPLETE
    } else {
        0
    })
}

/// Runs `hindsight cluster status`.
pub fn run(args: Args) -> Result<ExitCode> {
    let status = hindsight_cluster::client::status(&client(&args.cluster)?)?;
    match args.json {
        true => println!("{}", serde_json::to_string_pretty(&status)?),
        false => print!("{}", hindsight_cluster::client::status_table(&status)),
    }
    Ok(ExitCode::SUCCESS)
}
