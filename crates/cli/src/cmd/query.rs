//! `hindsight query FILTER --archive DIR`

use std::io::{self, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result};
use hindsight_output::packets::packet_sink;
use hindsight_output::time::time_range;
use hindsight_output::{Answer, Format};
use hindsight_query::filter::Filter;
use hindsight_query::search::{PacketSearch, SearchRequest};
use hindsight_serve::client::Client;

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
    #[arg(long, short = 'F', value_enum)]
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
    /// The window's ends as given, by the names the API takes them.
    pub fn since_until(&self) -> impl Iterator<Item = (&'static str, &str)> {
        let (since, until) = match &self.between {
            Some(both) => (both.first(), both.get(1)),
            None => (self.since.as_ref(), self.until.as_ref()),
        };
        [("since", since), ("until", until)]
            .into_iter()
            .filter_map(|(name, time)| Some((name, time?.as_str())))
    }

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
    let filter =
        Filter::parse(&args.filter).map_err(|e| anyhow::anyhow!("invalid filter:\n{e}"))?;
    let time = args.window.range()?;
    let format = output_format(args.format, args.output.as_deref(), Answer::Packets)?;
    if format.is_capture() && args.output.is_none() && io::stdout().is_terminal() {
        anyhow::bail!("refusing to write a capture file to a terminal: use -o FILE or a pipe");
    }
    if let Some(cluster) = &args.source.cluster {
        let client = super::cluster::client(cluster)?;
        let mut out = hindsight_output::create(args.output.as_deref())?;
        let question = hindsight_cluster::client::PacketQuestion {
            filter: args.filter.clone(),
            time,
            limit: args.limit,
            max_rows: None,
            count: args.count,
        };
        let outcome =
            hindsight_cluster::client::write_packets(&client, &question, format, &mut out)?;
        out.flush()?;
        return Ok(super::cluster::report(&outcome));
    }
    let root = args.source.archive.as_ref().context("no archive")?;
    if !args.sealed_only
        && !args.explain
        && let Some(client) = Client::find(root)
    {
        match ask(&client, &args, format) {
            Ok(answered) => return answered,
            Err(error) => super::unanswered(&client, &error),
        }
    }
    let search = PacketSearch::open_within(root, time)
        .with_context(|| format!("cannot open archive {}", root.display()))?
        .with_remote(hindsight_reader::remote_segments(root)?);
    let request = SearchRequest {
        filter,
        time,
        limit: args.limit,
        with_data: format.is_capture() && !args.count,
        capture_only: format.is_capture() || args.count,
    };
    let started = Instant::now();
    let plan = search.plan(&request)?;
    let out = hindsight_output::create(args.output.as_deref())?;
    let stats = if args.count {
        let stats = search.execute(&request, &plan, &mut |_, _| Ok(true))?;
        let mut out = out;
        writeln!(out, "{}", stats.rows_matched)?;
        out.flush()?;
        stats
    } else {
        let mut sink = packet_sink(format, out).map_err(anyhow::Error::msg)?;
        let stats = search.execute(&request, &plan, &mut |record, data| {
            sink.write(record, data).map(|()| true)
        })?;
        sink.finish()?;
        stats
    };
    if args.explain {
        eprintln!("{}", stats.explain(started.elapsed().as_secs_f64()));
    }
    let mut lines = hindsight_query::search::incomplete_lines(search.archive(), &stats.skipped);
    lines.extend(
        hindsight_query::search::unknown_line(&stats).map(|line| format!("warning: {line}")),
    );
    // The process ends here: closing the read-only index would only free memory
    // (about a millisecond, a tenth of a query the index answers alone).
    std::mem::forget(search);
    Ok(super::warn_exit(&lines, args.strict))
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

/// Asks the `serve` that captures into the archive, which answers from its
/// sealed segments and its unsealed tail, and writes the answer.
fn ask(client: &Client, args: &Args, format: Format) -> Result<Result<ExitCode>> {
    let mut params: Vec<(&str, String)> = vec![("filter", args.filter.clone())];
    params.extend(
        args.window
            .since_until()
            .map(|(name, time)| (name, time.to_owned())),
    );
    let answer = if args.count {
        params.push(("buckets", "1".to_owned()));
        client.get("histogram", &params)?
    } else {
        params.extend(args.limit.map(|n| ("limit", n.to_string())));
        params.push(("format", format.name().to_owned()));
        client.get("query", &params)?
    };
    Ok((|| {
        let incomplete = answer.incomplete();
        let mut out = hindsight_output::create(args.output.as_deref())?;
        if args.count {
            writeln!(out, "{}", answer.json()?["total"])?;
        } else {
            answer
                .copy_to(&mut out)
                .with_context(|| format!("the answer of {} broke off", client.url()))?;
        }
        out.flush()?;
        super::answered_by(client);
        Ok(super::incomplete_exit(incomplete, args.strict))
    })())
}

/// Exit code of an answer that damage made incomplete, under `--strict`.
pub const INCOMPLETE: u8 = 3;
