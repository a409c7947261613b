//! `hindsight watch --sql 'SELECT ...' --window 10s --replay CAPTURE...`: the command line
//! (the binary only dispatches to it).

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use crate::replay::{AnswerWriter, replay};
use crate::{Bounds, WatchSpec, Watcher, WindowSpec};
use anyhow::{Context, Result};
use hindsight_output::Format;

/// Arguments of `hindsight watch`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The continuous query: SQL over `live_packets` and `live_flows` (the
    /// window's rows), `:window_start`/`:window_end`, and with --archive the
    /// archive's `packets` and `flows` (see docs/watch.md).
    #[arg(long, value_name = "SQL")]
    sql: String,
    /// Length of a window (10s, 1m, 1h).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = hindsight_output::time::parse_duration)]
    window: std::time::Duration,
    /// Time between two windows' ends [default: the window: tumbling].
    #[arg(long, value_name = "DURATION", value_parser = hindsight_output::time::parse_duration)]
    slide: Option<std::time::Duration>,
    /// Captures to replay as the stream, in order (pcap, pcapng, gzip).
    #[arg(long, value_name = "CAPTURE", num_args = 1.., required = true)]
    replay: Vec<PathBuf>,
    /// An archive whose `packets` and `flows` the query may read (history).
    #[arg(long, short = 'a', env = "HINDSIGHT_ARCHIVE", value_name = "DIR")]
    archive: Option<PathBuf>,
    /// Output format: table or jsonl.
    #[arg(long, short = 'F', value_enum, default_value = "table")]
    format: Format,
    /// Most packets and connection records one window holds (more are left out, and said).
    #[arg(long, value_name = "N", default_value_t = Bounds::default().max_rows)]
    max_window_rows: usize,
}

/// Runs `hindsight watch`.
pub fn run(args: Args) -> Result<ExitCode> {
    let session = match &args.archive {
        Some(root) => hindsight_sql::SqlSession::open(root)
            .with_context(|| format!("cannot open archive {}", root.display()))?,
        None => hindsight_sql::SqlSession::live_only()?,
    };
    let spec = WatchSpec {
        name: "watch".to_owned(),
        sql: args.sql,
        window: WindowSpec {
            range: args.window,
            slide: args.slide.unwrap_or(args.window),
        },
        bounds: Bounds {
            max_rows: args.max_window_rows,
            ..Bounds::default()
        },
    };
    let mut watcher = Watcher::new(session, vec![spec], Some(Default::default()))?;
    let mut stdout = io::stdout().lock();
    let mut warn = |line: String| eprintln!("warning: {line}");
    let mut writer = AnswerWriter::new(args.format, &mut stdout, &mut warn)?;
    let result = replay(&args.replay, &mut watcher, &mut |answer| {
        writer.write(answer)
    });
    if let Some(error) = writer.error.take() {
        return Err(error.into());
    }
    stdout.flush()?;
    result?;
    let counts = watcher.counts();
    if counts.late > 0 {
        eprintln!(
            "warning: {} packets or records came after their windows were answered",
            counts.late
        );
    }
    Ok(ExitCode::SUCCESS)
}
