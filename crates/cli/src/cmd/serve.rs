//! `hindsight serve`: the arguments; the server is the `hindsight-serve` crate.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;

/// Arguments of `hindsight serve`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The configuration file (see docs/serve.md); without it, serve answers
    /// queries over --archive and captures nothing.
    #[arg(long, short = 'c', value_name = "FILE")]
    config: Option<PathBuf>,
    /// The archive directory (overrides the file's `archive`).
    #[arg(long, short = 'a', env = "HINDSIGHT_ARCHIVE", value_name = "DIR")]
    archive: Option<PathBuf>,
    /// Address to listen on (overrides [api] listen); port 0 picks a free port.
    #[arg(long, value_name = "ADDR:PORT")]
    listen: Option<std::net::SocketAddr>,
    /// Listen beyond loopback without a token: anyone who reaches the port can
    /// read the archive. Only behind a proxy that authenticates (docs/serve.md).
    #[arg(long)]
    insecure_no_token: bool,
}

/// Runs `hindsight serve`.
pub fn run(args: Args) -> Result<ExitCode> {
    hindsight_serve::run(hindsight_serve::Options {
        config: args.config,
        archive: args.archive,
        listen: args.listen,
        insecure_no_token: args.insecure_no_token,
    })?;
    Ok(ExitCode::SUCCESS)
}
