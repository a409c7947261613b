//! `hindsight watch (--sql 'SELECT ...' | --analysis NAME) --window 10s
//! (--replay CAPTURE... | -i IFACE | --collect URL | --over-archive)`

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use anyhow::{Context, Result, bail};
use hindsight_output::Format;
use hindsight_watch::Bounds;
use hindsight_watch::analyses::{ANALYSES, Analysis};
use hindsight_watch::replay::AnswerWriter;
use hindsight_watch::request::WatchRequest;
use hindsight_watch::sources::{self, Stream};

/// Arguments of `hindsight watch`.
#[derive(Debug, clap::Args)]
#[command(group = clap::ArgGroup::new("query").required(true).args(["sql", "file", "analysis"]))]
pub struct Args {
    /// The continuous query: SQL over `live_packets` and `live_flows` (the
    /// window's rows), `:window_start`/`:window_end`, and with --archive the
    /// archive's `packets` and `flows`; or a script of stages (see docs/watch.md).
    #[arg(long, value_name = "SQL", allow_hyphen_values = true)]
    sql: Option<String>,
    /// The continuous query from a file (a copy of an analysis's, say).
    #[arg(long, short = 'f', value_name = "FILE")]
    file: Option<PathBuf>,
    /// A built-in analysis instead of --sql: elephants, mice, portscan, matrix,
    /// dispersion (`--analysis NAME --show` prints its SQL; `--analysis list` lists them).
    #[arg(long, value_name = "NAME")]
    analysis: Option<String>,
    /// Print the analysis's SQL and parameters, and exit.
    #[arg(long, requires = "analysis")]
    show: bool,
    /// A value of a named parameter of the statement (`:k`): NAME=VALUE, a
    /// number, a duration (7d: an interval) or text; repeatable.
    #[arg(long = "param", value_name = "NAME=VALUE", value_parser = name_value)]
    params: Vec<(String, String)>,
    /// The home network for `ip_home()` (repeatable, or comma-separated):
    /// 10.0.0.0/8, 2001:db8::/32 [default: the archive's [network] home].
    #[arg(long, value_name = "NET", value_delimiter = ',')]
    home: Vec<String>,
    /// Length of a window (10s, 1m, 1h); of a slide, for an analysis whose
    /// window is several slides (dispersion).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = hindsight_output::time::parse_duration)]
    window: std::time::Duration,
    /// Time between two windows' ends [default: the window: tumbling].
    #[arg(long, value_name = "DURATION", value_parser = hindsight_output::time::parse_duration, conflicts_with = "analysis")]
    slide: Option<std::time::Duration>,
    /// Captures to replay as the stream, in order (pcap, pcapng, gzip).
    #[arg(long, value_name = "CAPTURE", num_args = 1.., conflicts_with_all = ["over_archive", "interface", "collect"])]
    replay: Vec<PathBuf>,
    /// Watch the packets of this interface until Ctrl-C.
    #[arg(long, short = 'i', value_name = "IFACE", conflicts_with_all = ["over_archive", "collect"])]
    interface: Option<String>,
    /// Bytes kept of each packet with -i (0: whole packets).
    #[arg(
        long,
        short = 's',
        default_value_t = 0,
        value_name = "BYTES",
        requires = "interface"
    )]
    snaplen: u32,
    /// Watch the NetFlow v5/v9 and IPFIX records exported to this address
    /// (udp://ADDRESS:PORT) until Ctrl-C.
    #[arg(long, value_name = "URL", conflicts_with = "over_archive")]
    collect: Option<String>,
    /// With --collect: how long past a window's end records for it are still
    /// taken (exporters report a connection after it ended).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = hindsight_output::time::parse_duration, requires = "collect")]
    lateness: std::time::Duration,
    /// Run over the archive's own past instead of a stream: every window
    /// between --since and --until that holds rows (needs --archive).
    #[arg(long, requires = "archive")]
    over_archive: bool,
    /// With --over-archive: the first instant (RFC 3339, a date, epoch seconds, or an age like 2h).
    #[arg(long, value_name = "TIME", requires = "over_archive")]
    since: Option<String>,
    /// With --over-archive: the instant after the last, same forms.
    #[arg(long, value_name = "TIME", requires = "over_archive")]
    until: Option<String>,
    /// An archive whose `packets` and `flows` the query may read (history).
    #[arg(long, short = 'a', env = "HINDSIGHT_ARCHIVE", value_name = "DIR")]
    archive: Option<PathBuf>,
    /// Output format: table or jsonl.
    #[arg(long, short = 'F', value_parser = crate::format_arg(), default_value = "table")]
    format: Format,
    /// Most packets and connection records one window holds (more are left out, and said).
    #[arg(long, value_name = "N", default_value_t = Bounds::default().max_rows)]
    max_window_rows: usize,
    /// Memory of a window's sorts, joins and aggregations, MiB (past it the
    /// window's answer is an error).
    #[arg(long, value_name = "MIB", default_value_t = 1024)]
    max_memory_mib: usize,
    /// Longest a window's statement runs, seconds (then that window's answer
    /// is an error).
    #[arg(long, value_name = "SECS", default_value_t = hindsight_watch::WINDOW_TIMEOUT.as_secs())]
    window_timeout_secs: u64,
}

fn name_value(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((name, value)) if !name.trim().is_empty() => Ok((
            name.trim().trim_start_matches(':').to_owned(),
            value.to_owned(),
        )),
        _ => Err(format!("{text:?}: write a parameter as NAME=VALUE (k=10)")),
    }
}

/// Runs `hindsight watch`.
pub fn run(args: Args) -> Result<ExitCode> {
    let mut stdout = io::stdout().lock();
    let analysis = match args.analysis.as_deref() {
        Some("list") => {
            for analysis in ANALYSES {
                writeln!(stdout, "{:<12} {}", analysis.name, analysis.summary())?;
            }
            return Ok(ExitCode::SUCCESS);
        }
        Some(name) => Some(Analysis::named(name).map_err(anyhow::Error::msg)?),
        None => None,
    };
    if args.show {
        let analysis = analysis.context("--show needs --analysis")?;
        stdout.write_all(analysis.sql.as_bytes())?;
        return Ok(ExitCode::SUCCESS);
    }
    let sql = match &args.file {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?,
        ),
        None => args.sql.clone(),
    };
    let request = WatchRequest {
        name: analysis.map_or("watch", |a| a.name).to_owned(),
        sql: if analysis.is_some() { None } else { sql },
        analysis: analysis.map(|a| a.name.to_owned()),
        window: args.window,
        slide: args.slide,
        params: args.params.clone(),
        max_window_rows: Some(args.max_window_rows),
        window_timeout: Some(std::time::Duration::from_secs(
            args.window_timeout_secs.max(1),
        )),
    };
    let (spec, _) = request.spec().map_err(anyhow::Error::msg)?;
    if args.replay.is_empty()
        && !args.over_archive
        && args.interface.is_none()
        && args.collect.is_none()
    {
        bail!(
            "give the stream: --replay CAPTURE..., -i IFACE, --collect udp://ADDR:PORT, \
             or --over-archive with --archive"
        );
    }
    let memory = Some(args.max_memory_mib.max(1).saturating_mul(1 << 20));
    let session = match &args.archive {
        Some(root) => hindsight_sql::SqlSession::open_within(root, memory)
            .with_context(|| format!("cannot open archive {}", root.display()))?,
        None => hindsight_sql::SqlSession::live_only_within(memory)?,
    };
    match sources::home(&args.home, args.archive.as_deref())? {
        Some(home) => session.set_home(home),
        None => {
            if let Some(analysis) = &analysis {
                bail!(
                    "the analysis {} needs the home network: --home NET or [network] home \
                     in the archive's config.toml (no home network is set)",
                    analysis.name
                );
            }
        }
    }
    let stream = if args.over_archive {
        let range =
            hindsight_output::time::time_range(args.since.as_deref(), args.until.as_deref(), None)?;
        Stream::OverArchive(range.start_nanos.max(0), range.end_nanos.saturating_add(1))
    } else if let Some(interface) = args.interface {
        Stream::Interface(interface, args.snaplen)
    } else if let Some(url) = args.collect {
        Stream::Collect(url, args.lateness)
    } else {
        Stream::Replay(args.replay)
    };
    let stop = Arc::new(AtomicBool::new(false));
    if matches!(stream, Stream::Interface(..) | Stream::Collect(..)) {
        for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            signal_hook::flag::register(signal, Arc::clone(&stop))
                .context("cannot install the signal handlers")?;
        }
    }
    let mut warn = |line: String| eprintln!("warning: {line}");
    let mut writer = AnswerWriter::new(args.format, &mut stdout, &mut warn)?;
    // An answer that cannot be written (the reader went away) stops the stream.
    let mut answer = |answer| {
        writer.write(answer);
        if writer.error.is_some() {
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    };
    let result = sources::watch(session, spec, &stream, &stop, &mut answer, &mut |line| {
        eprintln!("{line}");
    });
    if let Some(error) = writer.error.take() {
        return Err(error.into());
    }
    let late = result?;
    stdout.flush()?;
    if late > 0 {
        eprintln!("warning: {late} packets or records came after their windows were answered");
    }
    Ok(ExitCode::SUCCESS)
}
