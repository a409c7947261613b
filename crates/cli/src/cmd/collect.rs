//! `hindsight collect --listen udp://127.0.0.1:2055 --archive DIR`: a NetFlow v5,
//! v9 and IPFIX collector writing into the `flows` table and the connection index.

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::{Context, Result};
use hindsight_ingest::{IngestOptions, Ingestor};

use crate::ArchiveArg;

/// Arguments of `hindsight collect`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Where to listen: `udp://ADDRESS:PORT` (port 0 picks a free one and prints it).
    #[arg(long, default_value = "udp://127.0.0.1:2055", value_name = "URL")]
    listen: String,
    #[command(flatten)]
    archive: ArchiveArg,
    /// Seal (make durable and queryable) what was received every this many seconds.
    #[arg(long, default_value_t = 60, value_name = "SECONDS")]
    seal_secs: u64,
    /// Keep at least the N newest connections in the connection index and never
    /// more than N + k (Diventi's count-based expiration; 0 keeps everything).
    /// Overrides `[connections] keep` of the archive's config.toml for this run;
    /// see docs/ARCHITECTURE.md for k.
    #[arg(long, value_name = "N")]
    keep_connections: Option<u64>,
    /// Malformed export packets reported one by one before only counting them.
    #[arg(long, default_value_t = 20, value_name = "N")]
    report_errors: u64,
}

/// Runs the collector until SIGINT or SIGTERM, then seals and exits.
pub fn run(args: Args) -> Result<ExitCode> {
    anyhow::ensure!(args.seal_secs > 0, "--seal-secs must be positive");
    let socket = hindsight_live::collector::bind(&args.listen)?;
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, Arc::clone(&stop))
            .context("cannot install the signal handlers")?;
    }
    let settings =
        hindsight_store::settings::archive_settings(&args.archive.archive, args.keep_connections)?;
    let options = IngestOptions {
        expiry: settings.expiry,
        community_seed: settings.community_seed,
        ..IngestOptions::default()
    };
    let root = &args.archive.archive;
    let (mut ingestor, _opened) = Ingestor::open(root, options)
        .with_context(|| format!("cannot open archive {}", root.display()))?;
    eprintln!("listening on udp://{}", socket.local_addr()?);
    let seal_every = Duration::from_secs(args.seal_secs);
    let stats = hindsight_live::collector::collect(
        &socket,
        &mut ingestor,
        &stop,
        seal_every,
        args.report_errors,
        &mut |line| eprintln!("{line}"),
    )?;
    ingestor.finish()?;
    eprintln!("stopped; {}", hindsight_live::collector::stats_line(&stats));
    Ok(ExitCode::SUCCESS)
}
