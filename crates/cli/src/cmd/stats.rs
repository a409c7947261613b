//! `hindsight stats --archive DIR`

use std::process::ExitCode;

use anyhow::Result;
use hindsight_output::human_bytes;
use hindsight_output::time::format_nanos;
use hindsight_reader::Reader;

use crate::ArchiveArg;

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
    let snapshot = Reader::open(root)?.snapshot()?;
    if args.json {
        println!("{:#}", snapshot.summary_json(root, args.segments));
        return Ok(ExitCode::SUCCESS);
    }
    let summary = snapshot.summary();
    let per_packet = summary.bytes_per_packet();
    let (segments, packets, bytes) = (
        summary.packets.segments,
        summary.packets.rows,
        summary.packets.bytes,
    );
    let (first, last) = (summary.packets.first_ns, summary.packets.last_ns);
    let (flow_segments, flows, flow_bytes) = (
        summary.flows.segments,
        summary.flows.rows,
        summary.flows.bytes,
    );
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
    for class in snapshot.retention_classes() {
        let span = match (class.first_ns, class.last_ns) {
            (Some(first), Some(last)) => {
                format!("{} .. {}", format_nanos(first), format_nanos(last))
            }
            _ => "(empty)".to_owned(),
        };
        let age = class
            .max_age_secs
            .map_or(String::new(), |secs| format!(", max age {secs} s"));
        println!(
            "class {:<10}  {} packets, {} in {} segment(s) (guaranteed {}{age}); {span}",
            class.name,
            class.packets,
            human_bytes(class.bytes),
            class.segments,
            human_bytes(class.min_bytes),
        );
    }
    if args.segments {
        println!();
        println!(
            "{:>12} {:<8} {:>10} {:>12}  {:<30}  {:<30}  file",
            "segment", "table", "rows", "bytes", "first", "last"
        );
        for entry in snapshot.archive().catalog().entries() {
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
