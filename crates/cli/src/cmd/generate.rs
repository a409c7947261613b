//! `hindsight generate`: the man pages and shell completions, made from the
//! command line's own definition (what a package installs; hidden from
//! `--help`).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap_complete::Shell;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// What to write: `man` (a page per command, `hindsight.1`,
    /// `hindsight-query.1`, ...), or the completions of `bash`, `zsh` or `fish`.
    #[arg(value_parser = ["man", "bash", "zsh", "fish"])]
    what: String,
    /// The directory to write them into (made if missing).
    #[arg(long, value_name = "DIR")]
    dir: PathBuf,
}

/// Runs `hindsight generate` for `command`, the whole command line.
pub fn run(args: Args, mut command: clap::Command) -> Result<ExitCode> {
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("cannot make {}", args.dir.display()))?;
    let written = match args.what.as_str() {
        "man" => clap_mangen::generate_to(command, &args.dir).map(|()| args.dir.clone()),
        shell => {
            let shell: Shell = shell.parse().map_err(anyhow::Error::msg)?;
            clap_complete::generate_to(shell, &mut command, "hindsight", &args.dir)
        }
    }
    .with_context(|| format!("cannot write into {}", args.dir.display()))?;
    eprintln!("wrote {}", written.display());
    Ok(ExitCode::SUCCESS)
}
