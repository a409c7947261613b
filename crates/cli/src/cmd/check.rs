//! `hindsight check [--repair] --archive DIR`

use std::process::ExitCode;

use anyhow::{Context, Result};
use hindsight_ingest::check::{CheckReport, check, repair};

use crate::ArchiveArg;
use hindsight_output::human_bytes;

/// Arguments of `hindsight check`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    archive: ArchiveArg,
    /// Set the damage aside: drop unreadable catalog lines (their segments are
    /// catalogued again from their files), move damaged segments to quarantine/
    /// and purge their postings, rebuild wrong postings. Takes the writer lock.
    #[arg(long)]
    repair: bool,
}

/// Runs `hindsight check`: exit 0 when the archive is sound (or was repaired),
/// 1 when damage was found and left.
pub fn run(args: Args) -> Result<ExitCode> {
    let root = &args.archive.archive;
    let report = if args.repair {
        repair(root).with_context(|| format!("cannot repair archive {}", root.display()))?
    } else {
        check(root).with_context(|| format!("cannot check archive {}", root.display()))?
    };
    print_report(&report);
    Ok(if report.repaired || report.is_clean() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn print_report(report: &CheckReport) {
    let verb = if report.repaired { "repaired" } else { "found" };
    for damage in &report.catalog_damage {
        println!(
            "catalog.jsonl: byte {}: {}{}",
            damage.offset,
            damage.reason,
            if report.repaired {
                " (line dropped)"
            } else {
                ""
            }
        );
    }
    for id in &report.recatalogued {
        println!("segment {}: catalogued again from its file", id.0);
    }
    for problem in &report.damaged {
        println!(
            "segment {} ({}): {}{}",
            problem.id.0,
            problem.file,
            problem.problem,
            if report.repaired { " (set aside)" } else { "" }
        );
    }
    for path in &report.quarantined {
        println!("  moved to {}", path.display());
    }
    for (id, postings, addresses) in &report.wrong_postings {
        println!(
            "segment {}: {postings} postings in the address index for {addresses} distinct \
             addresses{}",
            id.0,
            if report.repaired { " (rebuilt)" } else { "" }
        );
    }
    for id in &report.unindexed {
        println!(
            "segment {}: not in the address index (queries read it whole){}",
            id.0,
            if report.repaired { " (indexed)" } else { "" }
        );
    }
    for id in &report.stale_postings {
        println!(
            "address index: postings of segment {}, which the catalog does not list{}",
            id.0,
            if report.repaired { " (purged)" } else { "" }
        );
    }
    if let Some(indexed) = report.connections_indexed {
        let note = if indexed > report.flow_records {
            " (the index keeps connections of segments removed or set aside)"
        } else if report.connections_expire {
            " (the index keeps the newest only)"
        } else {
            ""
        };
        println!(
            "connection index: {indexed} connection(s); flows segments: {} record(s){note}",
            report.flow_records
        );
    }
    let problems = report.catalog_damage.len()
        + report.damaged.len()
        + report.wrong_postings.len()
        + report.unindexed.len()
        + report.stale_postings.len();
    println!(
        "{} segment(s) checked ({}): {}",
        report.segments_checked,
        human_bytes(report.bytes_checked),
        if problems == 0 {
            "the archive is sound".to_owned()
        } else if report.repaired {
            format!("{problems} problem(s) {verb}")
        } else {
            format!("{problems} problem(s) {verb}; `hindsight check --repair` sets them aside")
        }
    );
}
