//! `hindsight stats --archive DIR`

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

/// Runs `hindsight stats`.
pub fn run(args: Args) -> Result<ExitCode> {
    let root = &args.archive.archive;
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
    if args.json {
        let summary = json!({
            "archive": root.display().to_string(),
            "segments": entries.len(),
            "packets": packets,
            "bytes_on_disk": bytes,
            "bytes_per_packet": per_packet,
            "first": first.map(format_nanos),
            "last": last.map(format_nanos),
            "flows": {
                "segments": flow_entries.len(),
                "records": flows,
                "bytes_on_disk": flow_bytes,
            },
            "segment_list": if args.segments {
                json!(archive.catalog().entries().collect::<Vec<_>>())
            } else {
                json!(null)
            },
        });
        println!("{summary:#}");
        return Ok(ExitCode::SUCCESS);
    }
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
