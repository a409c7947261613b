//! `hindsight stats --archive DIR`

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result};
use hindsight_store::{Archive, Table};
use serde_json::json;

use super::human_bytes;
use crate::ArchiveArg;
use crate::timearg::format_nanos;

/// Arguments of `hindsight stats`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    archive: ArchiveArg,
    /// Also list every segment.
    #[arg(long)]
    segments: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// The totals of an archive's catalog.
struct Totals {
    segments: usize,
    packets: u64,
    bytes: u64,
    first: Option<i64>,
    last: Option<i64>,
    flow_segments: usize,
    flows: u64,
    flow_bytes: u64,
}

impl Totals {
    fn of(archive: &Archive) -> Self {
        let entries: Vec<_> = archive.catalog().entries_of(Table::Packets).collect();
        let flow_entries: Vec<_> = archive.catalog().entries_of(Table::Flows).collect();
        Self {
            segments: entries.len(),
            packets: entries.iter().map(|e| e.rows).sum(),
            bytes: entries.iter().map(|e| e.size_bytes).sum(),
            first: entries.iter().map(|e| e.min_ts_nanos).min(),
            last: entries.iter().map(|e| e.max_ts_nanos).max(),
            flow_segments: flow_entries.len(),
            flows: flow_entries.iter().map(|e| e.rows).sum(),
            flow_bytes: flow_entries.iter().map(|e| e.size_bytes).sum(),
        }
    }

    fn bytes_per_packet(&self) -> f64 {
        if self.packets == 0 {
            0.0
        } else {
            self.bytes as f64 / self.packets as f64
        }
    }
}

fn open(root: &Path) -> Result<Archive> {
    Archive::open_reader(root).with_context(|| format!("cannot open archive {}", root.display()))
}

/// What the archive at `root` holds, as JSON (`stats --json`, `GET /api/v1/stats`).
pub fn summary(root: &Path, with_segments: bool) -> Result<serde_json::Value> {
    let archive = open(root)?;
    let t = Totals::of(&archive);
    Ok(json!({
        "archive": root.display().to_string(),
        "segments": t.segments,
        "packets": t.packets,
        "bytes_on_disk": t.bytes,
        "bytes_per_packet": t.bytes_per_packet(),
        "first": t.first.map(format_nanos),
        "last": t.last.map(format_nanos),
        "first_ns": t.first,
        "last_ns": t.last,
        "flows": {
            "segments": t.flow_segments,
            "records": t.flows,
            "bytes_on_disk": t.flow_bytes,
        },
        "segment_list": if with_segments {
            json!(archive.catalog().entries().collect::<Vec<_>>())
        } else {
            json!(null)
        },
    }))
}

/// Runs `hindsight stats`.
pub fn run(args: Args) -> Result<ExitCode> {
    let root = &args.archive.archive;
    if args.json {
        println!("{:#}", summary(root, args.segments)?);
        return Ok(ExitCode::SUCCESS);
    }
    let archive = open(root)?;
    let totals = Totals::of(&archive);
    let per_packet = totals.bytes_per_packet();
    let Totals {
        segments,
        packets,
        bytes,
        first,
        last,
        flow_segments,
        flows,
        flow_bytes,
    } = totals;
    println!("archive:          {}", root.display());
    println!("segments:         {segments}");
    match (first, last) {
        (Some(first), Some(last)) => {
            let span_secs = (last - first) as f64 / 1e9;
            println!(
                "time span:        {} .. {} ({span_secs:.0} s)",
                format_nanos(first),
                format_nanos(last)
            );
        }
        _ => println!("time span:        (empty)"),
    }
    println!("packets:          {packets}");
    println!("bytes on disk:    {} ({bytes} B)", human_bytes(bytes));
    println!("bytes per packet: {per_packet:.2}");
    println!(
        "flows:            {flows} records in {flow_segments} segment(s), {}",
        human_bytes(flow_bytes)
    );
    if args.segments {
        println!();
        println!(
            "{:>12} {:<8} {:>10} {:>12}  {:<30}  {:<30}  file",
            "segment", "table", "rows", "bytes", "first", "last"
        );
        for entry in archive.catalog().entries() {
            println!(
                "{:>12} {:<8} {:>10} {:>12}  {:<30}  {:<30}  {}",
                entry.id,
                entry.table,
                entry.rows,
                entry.size_bytes,
                format_nanos(entry.min_ts_nanos),
                format_nanos(entry.max_ts_nanos),
                entry.file
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
