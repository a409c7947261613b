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
    for line in report.lines() {
        println!("{line}");
    }
    let problems = report.problems();
    let verb = if report.repaired { "repaired" } else { "found" };
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
