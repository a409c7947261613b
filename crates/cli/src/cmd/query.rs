//! `hindsight query FILTER --archive DIR`

use std::io::{self, IsTerminal};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use hindsight_output::time::time_range;
use hindsight_output::{Answer, Format};
use hindsight_query::filter::Filter;
use hindsight_service::{Output, PacketQuestion};

/// Arguments of `hindsight query`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The filter, in Wireshark display-filter syntax (`ip.addr == 10.0.0.0/8 && tcp.port == 443`)
    /// or tcpdump syntax (`host 10.1.2.3 and port 53`); empty matches every packet.
    #[arg(default_value = "", value_name = "FILTER")]
    filter: String,
    #[command(flatten)]
    source: crate::Source,
    #[command(flatten)]
    window: WindowArgs,
    /// Output format; default: pcap or pcapng when -o names a .pcap or .pcapng file, else table.
    #[arg(long, short = 'F', value_parser = crate::format_arg())]
    format: Option<Format>,
    /// Write to FILE instead of standard output.
    #[arg(long, short = 'o', value_name = "FILE")]
    output: Option<PathBuf>,
    /// Stop after N matching packets.
    #[arg(long, short = 'n', value_name = "N")]
    limit: Option<u64>,
    /// Print only the number of matching packets.
    #[arg(long, short = 'c')]
    count: bool,
    /// Print how many segments, row groups and rows each pruning level kept (to stderr).
    #[arg(long, conflicts_with = "cluster")]
    explain: bool,
    /// Fail (exit code 3) when a damaged segment or catalog line made the answer
    /// incomplete, instead of answering from the rest with a warning.
    #[arg(long)]
    strict: bool,
    /// Read the sealed segments here, even when a `serve` captures into the
    /// archive (by default its API answers, with the packets not yet sealed).
    #[arg(long, conflicts_with = "cluster")]
    sealed_only: bool,
}

/// The time window of a query.
#[derive(Debug, clap::Args)]
pub struct WindowArgs {
    /// Start of the window (inclusive): RFC 3339, a date, epoch seconds, or an age like 2h or 7d.
    #[arg(long, value_name = "TIME")]
    since: Option<String>,
    /// End of the window (exclusive), same forms as --since.
    #[arg(long, value_name = "TIME")]
    until: Option<String>,
    /// Both ends of the window at once.
    #[arg(long, num_args = 2, value_names = ["START", "END"], conflicts_with_all = ["since", "until"])]
    between: Option<Vec<String>>,
}

impl WindowArgs {
    /// Returns the window as a time range.
    pub fn range(&self) -> Result<hindsight_store::TimeRange> {
        time_range(
            self.since.as_deref(),
            self.until.as_deref(),
            self.between.as_deref(),
        )
    }
}

/// Runs `hindsight query`.
pub fn run(args: Args) -> Result<ExitCode> {
    // Refused here, before anything is asked.
    Filter::parse(&args.filter).map_err(|e| anyhow::anyhow!("invalid filter:\n{e}"))?;
    let format = output_format(args.format, args.output.as_deref(), Answer::Packets)?;
    if format.is_capture() && args.output.is_none() && io::stdout().is_terminal() {
        anyhow::bail!("refusing to write a capture file to a terminal: use -o FILE or a pipe");
    }
    let question = PacketQuestion {
        filter: args.filter,
        time: args.window.range()?,
        limit: args.limit,
        count: args.count,
        explain: args.explain,
    };
    let mut out = Output::to(args.output.as_deref());
    let answered = args
        .source
        .questions(args.sealed_only)?
        .packets(&question, format, &mut out)?;
    out.finish()?;
    Ok(super::exit(&answered, args.strict))
}

/// The format of an answer: `--format`, else the one `-o FILE`'s extension asks
/// for, else a table.
pub fn output_format(
    format: Option<Format>,
    output: Option<&std::path::Path>,
    answer: Answer,
) -> Result<Format> {
    let format = format
        .or_else(|| output.and_then(|path| Format::of_path(path, answer)))
        .unwrap_or(Format::Table);
    format.check(answer).map_err(anyhow::Error::msg)
}

/// Exit code of an answer that damage made incomplete, under `--strict`.
pub const INCOMPLETE: u8 = 3;
