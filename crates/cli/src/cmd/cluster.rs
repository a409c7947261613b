//! `hindsight cluster status` and `hindsight cluster token`, and what the
//! commands that ask a cluster share.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Result;
use hindsight_cluster::{ClusterClient, ClusterConfig};

/// Arguments of `hindsight cluster status|token`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// `status`: the nodes as an index node sees them (time spans, summary
    /// lag, health). `token`: a new node token, and the SHA-256 of it that
    /// the node's `[[cluster.node]]` carries.
    #[arg(value_parser = ["status", "token"])]
    what: String,
    /// The cluster file (`[cluster]`), for `status`.
    #[arg(long, value_name = "CLUSTER.toml", required_if_eq("what", "status"))]
    cluster: Option<PathBuf>,
    /// JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// A client of the cluster of `file`.
pub fn client(file: &Path) -> Result<ClusterClient> {
    Ok(ClusterClient::new(ClusterConfig::load(file)?))
}

/// Runs `hindsight cluster status|token`.
pub fn run(args: Args) -> Result<ExitCode> {
    let Some(file) = args.cluster.filter(|_| args.what == "status") else {
        return token();
    };
    let status = hindsight_cluster::client::status(&client(&file)?)?;
    match args.json {
        true => println!("{}", serde_json::to_string_pretty(&status)?),
        false => print!("{}", hindsight_cluster::client::status_table(&status)),
    }
    Ok(ExitCode::SUCCESS)
}

/// Prints a new node token (32 random bytes from the kernel, in hex) and the
/// line of its `[[cluster.node]]`.
fn token() -> Result<ExitCode> {
    use std::io::Read;
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut random| random.read_exact(&mut bytes))
        .map_err(|e| anyhow::anyhow!("cannot read /dev/urandom: {e}"))?;
    let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    println!(
        "# this node's own secret: its [cluster] node_token (or a node_token_file of mode 0600)"
    );
    println!("node_token = \"{token}\"");
    println!("# in its [[cluster.node]], in every index node's file");
    println!(
        "token_sha256 = \"{}\"",
        hindsight_cluster::config::token_sha256(&token)
    );
    Ok(ExitCode::SUCCESS)
}
