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

/// What the archive at `root` holds, as JSON (`stats --json`, `GET /api/v1/stats`).
pub fn summary(root: &Path, with_segments: bool) -> Result<serde_json::Value> {
    let archive = Archive::open_reader(root)
        .with_context(|| format!("cannot open archive {}", root.display()))?;
    let entries: Vec<_> = archive.catalog().entries_of(Table::Packets).collect();
    let flow_entries: Vec<_> = archive.catalog().entries_of(Table::Flows).collect();
    let packets: u64 = entries.iter().map(|e| e.rows).sum();
    let bytes: u64 = entries.iter().map(|e| e.size_bytes).sum();
    let first = entries.iter().map(|e| e.min_ts_nanos).min();
    let last = entries.iter().map(|e| e.max_ts_nanos).max();
    let per_packet = if packets == 0 {
        0.0
    } else {
        bytes as f64 / packets as f64
    };
    Ok(json!({
        "archive": root.display().to_string(),
        "segments": entries.len(),
        "packets": packets,
        "bytes_on_disk": bytes,
        "bytes_per_packet": per_packet,
        "first": first.map(format_nanos),
        "last": last.map(format_nanos),
        "first_ns": first,
        "last_ns": last,
        "flows": {
            "segments": flow_entries.len(),
            "records": flow_entries.iter().map(|e| e.rows).sum::<u64>(),
            "bytes_on_disk": flow_entries.iter().map(|e| e.size_bytes).sum::<u64>(),
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
    let archive = Archive::open_reader(root)
        .with_context(|| format!("cannot open archive {}", root.display()))?;
    let entries: Vec<_> = archive.catalog().entries_of(Table::Packets).collect();
    let flow_entries: Vec<_> = archive.catalog().entries_of(Table::Flows).collect();
    let flows: u64 = flow_entries.iter().map(|e| e.rows).sum();
    let flow_bytes: u64 = flow_entries.iter().map(|e| e.size_bytes).sum();
    let packets: u64 = entries.iter().map(|e| e.rows).sum();
    let bytes: u64 = entries.iter().map(|e| e.size_bytes).sum();
    let first = entries.iter().map(|e| e.min_ts_nanos).min();
    let last = entries.iter().map(|e| e.max_ts_nanos).max();
    let per_packet = if packets == 0 {
        0.0
    } else {
        bytes as f64 / packets as f64
    };
    println!("archive:          {}", root.display());
    println!("segments:         {}", entries.len());
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
        "flows:            {flows} records in {} segment(s), {}",
        flow_entries.len(),
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
