//! `hindsight ingest CAPTURE... --archive DIR`

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use hindsight_ingest::{IngestOptions, Ingestor};
use hindsight_store::{SegmentOptions, Table};
use indicatif::{ProgressBar, ProgressStyle};

use crate::ArchiveArg;

/// Arguments of `hindsight ingest`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Input files: pcap or pcapng captures (or, with --format zeek, Zeek logs
    /// in TSV or JSON: conn.log, and dns, ssl, http and ssh logs whose fields join
    /// the connections by uid), optionally gzip-compressed; `-` reads a capture from
    /// standard input (`tcpdump -w - | hindsight ingest -`).
    #[arg(required = true, value_name = "CAPTURE")]
    captures: Vec<PathBuf>,
    #[command(flatten)]
    archive: ArchiveArg,
    /// Bytes of each packet kept for pcap export; 0 keeps whole packets (as tcpdump -s 0).
    #[arg(long, short = 's', default_value_t = 128, value_name = "BYTES")]
    snaplen: u32,
    /// Seal a segment after this many packets.
    #[arg(long, default_value_t = 4 * 1024 * 1024, value_name = "PACKETS")]
    segment_packets: u64,
    /// Length of a time partition, in seconds: no segment spans two partitions.
    #[arg(long, default_value_t = 3600, value_name = "SECONDS")]
    partition_secs: i64,
    /// Keep at least the N newest connections in the connection index and never
    /// more than N + k (Diventi's count-based expiration; 0 keeps everything).
    /// Overrides `[connections] keep` of the archive's config.toml for this run;
    /// see docs/ARCHITECTURE.md for k.
    #[arg(long, value_name = "N")]
    keep_connections: Option<u64>,
    /// Addresses with at most this many packets in a segment keep their whole
    /// packets in the address index too (covering postings), so a query for them
    /// opens no segment; 0 turns this off. Bounded to 2 bytes per packet.
    #[arg(long, default_value_t = SegmentOptions::default().covering_rows, value_name = "PACKETS")]
    covering_rows: u32,
    /// Archive packets only: build no connection records from them (no flows
    /// segments, no connection index entries). Saves about a third of ingest's
    /// CPU time (docs/PERFORMANCE.md).
    #[arg(long)]
    no_flows: bool,
    /// What the input files are.
    #[arg(long, value_enum, default_value = "pcap")]
    format: InputFormat,
    /// No progress bar.
    #[arg(long, short = 'q')]
    quiet: bool,
}

/// Input formats of `hindsight ingest`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum InputFormat {
    /// Packet captures: pcap or pcapng (the format is read from the file).
    Pcap,
    /// Zeek logs, TSV or JSON lines: conn.log's connection records, with the
    /// fields of dns.log, ssl.log, http.log and ssh.log joined by uid.
    Zeek,
}

/// Runs `hindsight ingest`.
pub fn run(args: Args) -> Result<ExitCode> {
    anyhow::ensure!(args.partition_secs > 0, "--partition-secs must be positive");
    anyhow::ensure!(
        args.segment_packets > 0,
        "--segment-packets must be positive"
    );
    let settings =
        hindsight_store::settings::archive_settings(&args.archive.archive, args.keep_connections)?;
    let options = IngestOptions {
        snaplen: args.snaplen,
        partition_nanos: args.partition_secs.saturating_mul(1_000_000_000),
        segment_max_rows: args.segment_packets,
        expiry: settings.expiry,
        community_seed: settings.community_seed,
        retention: settings.retention.clone(),
        flows_from_packets: !args.no_flows,
        segment: SegmentOptions {
            covering_rows: args.covering_rows,
            summaries: settings.summaries,
            ..SegmentOptions::default()
        },
        ..IngestOptions::default()
    };
    let root = &args.archive.archive;
    let (mut ingestor, opened) = Ingestor::open(root, options)
        .with_context(|| format!("cannot open archive {}", root.display()))?;
    let recovery = &opened.recovery;
    if !recovery.is_clean() || !opened.reindexed.is_empty() {
        eprintln!(
            "recovered archive after an interrupted run: {} unsealed temporary file(s) removed, \
             {} segment(s) re-catalogued, {} re-indexed, {} quarantined",
            recovery.temp_files_removed.len(),
            recovery.segments_recovered.len(),
            opened.reindexed.len(),
            recovery.segments_quarantined.len()
        );
    }
    if args.format == InputFormat::Zeek {
        return ingest_conn_logs(&args, ingestor, &settings);
    }
    let show_progress = !args.quiet && std::io::stderr().is_terminal();
    let mut damaged = 0usize;
    if args.captures.iter().filter(|p| is_stdin(p)).count() > 1 {
        bail!("standard input (-) can be read once");
    }
    for path in &args.captures {
        let stdin = is_stdin(path);
        let name = if stdin {
            "<stdin>".to_owned()
        } else {
            path.display().to_string()
        };
        let bar = if !show_progress {
            ProgressBar::hidden()
        } else if stdin {
            // A pipe has no length: bytes and rate, no bar.
            let bar = ProgressBar::new_spinner();
            bar.set_style(
                ProgressStyle::with_template("{msg:30!} {spinner} {bytes} {bytes_per_sec}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            bar.set_message(name.clone());
            bar
        } else {
            let total = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
            let bar = ProgressBar::new(total);
            bar.set_style(
                ProgressStyle::with_template(
                    "{msg:30!} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
            );
            bar.set_message(name.clone());
            bar
        };
        let mut progress =
            |progress: hindsight_ingest::Progress| bar.set_position(progress.source_bytes);
        let outcome = if stdin {
            ingestor.ingest_stdin(&mut progress)
        } else {
            ingestor.ingest_file(path, &mut progress)
        }
        .with_context(|| format!("archive failed while ingesting {name}"))?;
        bar.finish_and_clear();
        if let Some(error) = outcome.error {
            damaged += 1;
            eprintln!(
                "error: {error}\n  {} packet(s) read from {name} before the damage are archived",
                outcome.counts.packets,
            );
        }
    }
    let summary = ingestor.finish().context("cannot seal the last segment")?;
    copy_to_objects(&args.archive.archive, &settings)?;
    for line in summary.lines(args.captures.len(), !args.no_flows) {
        println!("{line}");
    }
    if damaged > 0 {
        eprintln!(
            "{damaged} of {} capture file(s) were damaged",
            args.captures.len()
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// Whether a capture argument means standard input.
fn is_stdin(path: &std::path::Path) -> bool {
    path.as_os_str() == "-"
}

/// Reads Zeek logs into the flows table and the connection index (see
/// `Ingestor::ingest_zeek_logs`).
fn ingest_conn_logs(
    args: &Args,
    mut ingestor: Ingestor,
    settings: &hindsight_store::settings::ArchiveSettings,
) -> Result<ExitCode> {
    if args.captures.iter().any(|p| is_stdin(p)) {
        bail!("--format zeek reads files; standard input (-) takes packet captures");
    }
    let report = ingestor
        .ingest_zeek_logs(
            &args.captures,
            &mut |line| println!("{line}"),
            &mut |line| {
                eprintln!("{line}");
            },
        )
        .context("archive failed while ingesting Zeek logs")?;
    let summary = ingestor.finish().context("cannot seal the last segment")?;
    copy_to_objects(&args.archive.archive, settings)?;
    let flow_segments = summary
        .sealed
        .iter()
        .filter(|s| s.table == Table::Flows.name())
        .count();
    println!(
        "ingested {} connection record(s) and {} application record(s) from {} file(s) into {flow_segments} flows segment(s)",
        report.records,
        report.fields,
        args.captures.len()
    );
    if report.damaged > 0 {
        eprintln!(
            "{} of {} file(s) had unreadable lines or could not be read",
            report.damaged,
            args.captures.len()
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// Copies the sealed segments not yet copied to the archive's object store
/// (`[archive] object_store`), if it has one.
fn copy_to_objects(
    root: &std::path::Path,
    settings: &hindsight_store::settings::ArchiveSettings,
) -> Result<()> {
    let Some(objects) = &settings.objects else {
        return Ok(());
    };
    let (copied, line) = hindsight_sql::objects::copy_archive(root, objects)
        .with_context(|| format!("cannot copy the segments to {}", objects.url))?;
    eprintln!("{line}");
    for problem in &copied.problems {
        eprintln!("warning: {problem}");
    }
    Ok(())
}
