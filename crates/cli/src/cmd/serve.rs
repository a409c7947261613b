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
    /// How it logs on stderr: plain lines, or json (one object a line, for log shippers).
    #[arg(long, value_name = "plain|json", default_value = "plain")]
    log_format: hindsight_output::log::LogFormat,
    /// Run as a statement worker of a server, limited to this many MiB
    /// (the server starts its workers so; see `hindsight_serve::worker`).
    #[arg(long, hide = true, value_name = "MIB", requires = "archive")]
    statement_worker: Option<usize>,
    /// A statement worker's parsed footers kept between statements, MiB.
    #[arg(long, hide = true, value_name = "MIB", default_value_t = 64)]
    footer_cache_mib: usize,
}

/// Runs `hindsight serve`.
pub fn run(args: Args) -> Result<ExitCode> {
    hindsight_output::log::init(args.log_format);
    hindsight_serve::run(hindsight_serve::Options {
        config: args.config,
        archive: args.archive,
        listen: args.listen,
        insecure_no_token: args.insecure_no_token,
        statement_worker: args.statement_worker,
        footer_cache_mib: args.footer_cache_mib,
    })?;
    Ok(ExitCode::SUCCESS)
}
