//! `hindsight query FILTER --archive DIR`

use std::fs::File;
use std::io::{self, BufWriter, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result};
use hindsight_output::packets::packet_sink;
use hindsight_output::time::time_range;
use hindsight_output::{Answer, Format};
use hindsight_query::filter::Filter;
use hindsight_query::search::{PacketSearch, SearchRequest, SearchStats};
use hindsight_store::archive::Serving;

use crate::ArchiveArg;

/// Arguments of `hindsight query`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The filter, in Wireshark display-filter syntax (`ip.addr == 10.0.0.0/8 && tcp.port == 443`)
    /// or tcpdump syntax (`host 10.1.2.3 and port 53`); empty matches every packet.
    #[arg(default_value = "", value_name = "FILTER")]
    filter: String,
    #[command(flatten)]
    archive: ArchiveArg,
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
    #[arg(long)]
    explain: bool,
    /// Fail (exit code 3) when a damaged segment or catalog line made the answer
    /// incomplete, instead of answering from the rest with a warning.
    #[arg(long)]
    strict: bool,
    /// Read the sealed segments here, even when a `serve` captures into the
    /// archive (by default its API answers, with the packets not yet sealed).
    #[arg(long)]
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
    let filter =
        Filter::parse(&args.filter).map_err(|e| anyhow::anyhow!("invalid filter:\n{e}"))?;
    let time = args.window.range()?;
    let format = output_format(args.format, args.output.as_deref(), Answer::Packets)?;
    if format.is_capture() && args.output.is_none() && io::stdout().is_terminal() {
        anyhow::bail!("refusing to write a capture file to a terminal: use -o FILE or a pipe");
    }
    let root = &args.archive.archive;
    if !args.sealed_only
        && !args.explain
        && let Some(serving) = Serving::find(root)
    {
        match ask(&serving, &args, format) {
            Ok(response) => return answer_of(&serving, response, &args),
            Err(error) => eprintln!(
                "hindsight: the serving process at {} did not answer ({error:#}): answering \
                 from the sealed segments only",
                serving.url
            ),
        }
    }
    let search = PacketSearch::open(root)
        .with_context(|| format!("cannot open archive {}", root.display()))?;
    let request = SearchRequest {
        filter,
        time,
        limit: args.limit,
        with_data: format.is_capture() && !args.count,
        capture_only: format.is_capture() || args.count,
    };
    let started = Instant::now();
    let plan = search.plan(&request)?;
    let out: Box<dyn Write> = match &args.output {
        Some(path) => Box::new(BufWriter::with_capacity(
            1 << 20,
            File::create(path).with_context(|| format!("cannot create {}", path.display()))?,
        )),
        None => Box::new(BufWriter::with_capacity(1 << 16, io::stdout().lock())),
    };
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
        explain(&stats, started.elapsed().as_secs_f64());
    }
    let complete = warn_incomplete(search.archive(), &stats.skipped);
    // The process ends here: closing the read-only index would only free memory
    // (about a millisecond, a tenth of a query the index answers alone).
    std::mem::forget(search);
    Ok(if complete || !args.strict {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(INCOMPLETE)
    })
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
/// sealed segments and its unsealed tail.
fn ask(serving: &Serving, args: &Args, format: Format) -> Result<ureq::http::Response<ureq::Body>> {
    let window = &args.window;
    let (since, until) = match &window.between {
        Some(both) => (both.first(), both.get(1)),
        None => (window.since.as_ref(), window.until.as_ref()),
    };
    let mut params: Vec<(&str, String)> = vec![("filter", args.filter.clone())];
    params.extend(since.map(|t| ("since", t.clone())));
    params.extend(until.map(|t| ("until", t.clone())));
    let route = if args.count {
        params.push(("buckets", "1".to_owned()));
        "histogram"
    } else {
        params.extend(args.limit.map(|n| ("limit", n.to_string())));
        params.push(("format", format.name().to_owned()));
        "query"
    };
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_connect(Some(std::time::Duration::from_secs(2)))
        .build()
        .into();
    let mut request = agent
        .get(format!("{}/api/v1/{route}", serving.url))
        .query_pairs(params.iter().map(|(k, v)| (*k, v.as_str())));
    if let Ok(token) = std::env::var("HINDSIGHT_API_TOKEN") {
        request = request.header("Authorization", format!("Bearer {token}"));
    }
    let mut response = request.call()?;
    if response.status() != 200 {
        let text = response.body_mut().read_to_string().unwrap_or_default();
        anyhow::bail!("{}: {}", response.status(), text.trim());
    }
    Ok(response)
}

/// Writes the serving process's answer where the user asked.
fn answer_of(
    serving: &Serving,
    mut response: ureq::http::Response<ureq::Body>,
    args: &Args,
) -> Result<ExitCode> {
    let incomplete = response
        .headers()
        .get("hindsight-incomplete")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let mut out: Box<dyn Write> = match &args.output {
        Some(path) => Box::new(BufWriter::with_capacity(
            1 << 20,
            File::create(path).with_context(|| format!("cannot create {}", path.display()))?,
        )),
        None => Box::new(BufWriter::with_capacity(1 << 16, io::stdout().lock())),
    };
    let mut body = response.body_mut().with_config().limit(u64::MAX).reader();
    if args.count {
        let mut text = String::new();
        io::Read::read_to_string(&mut body, &mut text)?;
        let answer: serde_json::Value = serde_json::from_str(&text)?;
        writeln!(out, "{}", answer["total"])?;
    } else {
        io::copy(&mut body, &mut out)
            .with_context(|| format!("the answer of {} broke off", serving.url))?;
    }
    out.flush()?;
    eprintln!(
        "hindsight: answered by the serving process at {} (sealed segments and the packets \
         not yet sealed)",
        serving.url
    );
    if let Some(what) = incomplete {
        eprintln!("warning: the answer is incomplete: {what}");
        if args.strict {
            return Ok(ExitCode::from(INCOMPLETE));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Exit code of an answer that damage made incomplete, under `--strict`.
pub const INCOMPLETE: u8 = 3;

/// Says on stderr which damaged catalog lines and segments an answer went
/// without; returns whether it is complete.
pub fn warn_incomplete(
    archive: &hindsight_store::Archive,
    skipped: &[hindsight_query::search::SkippedSegment],
) -> bool {
    let catalog = archive.catalog_damage();
    for damage in catalog {
        eprintln!(
            "warning: {}: byte {}: {}; the segment it names is not searched",
            archive.catalog().path().display(),
            damage.offset,
            damage.reason
        );
    }
    for segment in skipped {
        eprintln!("warning: {segment}");
    }
    let complete = catalog.is_empty() && skipped.is_empty();
    if !complete {
        eprintln!(
            "warning: the answer is incomplete: {} damaged segment(s), {} damaged catalog \
             line(s) (`hindsight check` lists the damage, `--repair` sets it aside)",
            skipped.len(),
            catalog.len()
        );
    }
    complete
}

fn explain(stats: &SearchStats, seconds: f64) {
    eprintln!(
        "segments: {} in catalog, {} in time window, {} after address index, \
         {} of them answered from covering postings\n\
         row groups: {} in planned segments, {} after statistics and Bloom filters\n\
         rows: {} decoded, {} matched, in {:.3} ms",
        stats.segments_total,
        stats.segments_in_time,
        stats.segments_planned,
        stats.segments_covered,
        stats.row_groups_total,
        stats.row_groups_read,
        stats.rows_read,
        stats.rows_matched,
        seconds * 1e3
    );
}
