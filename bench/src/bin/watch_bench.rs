//! Continuous-query benchmark (issue 21): the five analyses of
//! `fastbit-telegraphcq` running at once on 1-second windows (dispersion: a
//! 10-second window sliding by 1 second), joined with an archive of history:
//!
//! - from connection records (the paper's input): records per second end to
//!   end, and the delay from the record that closes a window to the last of
//!   its five answers (p50, p99), side by side in the same run with DuckDB
//!   evaluating the same scripts over the same windows and history
//!   (`bench/watch_duckdb.py`; DuckDB from PyPI, which `bench/index-peers-setup.sh`
//!   installs; without it the DuckDB side says why it did not run);
//! - from packets: packets per second end to end (decoding, the flow table,
//!   panes and the five analyses), and the same delays.
//!
//! The stream is lan-hour's connection records (or packets), copied with the
//! last two bytes of every IPv4 address changed per copy (so a window holds
//! many hosts, the home network 10.64.0.0/16 still inside), and time
//! compressed to `--rate` records (`--packet-rate` packets) per second of
//! event time. The history is the first `--history` records of the stream
//! one and seven days earlier. Run with
//! `cargo run --release -p hindsight-bench --bin watch_bench -- [--flows N] [--packets N]`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use clap::Parser;
use hindsight_flow::{FlowTable, FlowTableConfig};
use hindsight_ingest::{IngestOptions, Ingestor};
use hindsight_model::{Addr16, FlowRecord, Frame, LinkType};
use hindsight_sql::SqlSession;
use hindsight_watch::analyses::ANALYSES;
use hindsight_watch::request::WatchRequest;
use hindsight_watch::{Answer, WatchSpec, Watcher};

const NANOS: i64 = 1_000_000_000;
const DAY: i64 = 86_400 * NANOS;
const HOME: &str = "10.64.0.0/16";

#[derive(Parser)]
struct Args {
    #[arg(long, default_value_t = 5_000_000)]
    flows: usize,
    #[arg(long, default_value_t = 1_000_000)]
    rate: i64,
    #[arg(long, default_value_t = 10_000_000)]
    packets: usize,
    #[arg(long, default_value_t = 2_000_000)]
    packet_rate: i64,
    #[arg(long, default_value_t = 1_000_000)]
    history: usize,
    #[arg(long, default_value_os_t = std::env::temp_dir().join("hindsight-bench-watch"))]
    work: PathBuf,
    #[arg(long, default_value_os_t = hindsight_bench::default_source())]
    source: PathBuf,
    #[arg(long = "no-duckdb", action = clap::ArgAction::SetFalse)]
    duckdb: bool,
    #[arg(long, default_value_t = 3)]
    runs: usize,
}

/// The connection records of the source, by the time they ended.
fn records(frames: &[(i64, u32, Vec<u8>)]) -> Vec<FlowRecord> {
    let mut table = FlowTable::new(FlowTableConfig::default());
    let mut out = Vec::new();
    for (ts, wire_len, data) in frames {
        let frame = Frame {
            ts_nanos: *ts,
            wire_len: *wire_len,
            data,
            link_type: LinkType::ETHERNET,
            iface: 0,
        };
        let record = hindsight_decode::record(&frame);
        table.push(*ts, &record.headers, *wire_len, &mut out);
    }
    table.flush(&mut out);
    out.sort_by_key(|r| r.last_ns);
    out
}

/// An IPv4-mapped address with its last two bytes changed by `copy`.
fn shift_host(addr: Addr16, copy: usize) -> Addr16 {
    let mut bytes = addr.0;
    if addr.is_v4() {
        bytes[14] ^= (copy >> 8) as u8;
        bytes[15] ^= copy as u8;
    }
    Addr16(bytes)
}

/// `n` records: copies of `base`, hosts changed per copy, one every
/// `1/rate` s of event time from `start`.
fn stream(base: &[FlowRecord], n: usize, rate: i64, start: i64) -> Vec<FlowRecord> {
    (0..n)
        .map(|i| {
            let copy = i / base.len();
            let mut record = base[i % base.len()].clone();
            let last = start + i as i64 * NANOS / rate;
            record.first_ns = last - record.duration_ns().min(NANOS);
            record.last_ns = last;
            record.src = shift_host(record.src, copy);
            record.dst = shift_host(record.dst, copy);
            record.uid.clear();
            record
        })
        .collect()
}

/// The five analyses with their defaults, 1-second windows.
fn specs() -> Vec<WatchSpec> {
    ANALYSES
        .iter()
        .map(|analysis| {
            WatchRequest {
                name: analysis.name.to_owned(),
                analysis: Some(analysis.name.to_owned()),
                window: Duration::from_secs(1),
                max_window_rows: Some(40_000_000),
                ..WatchRequest::default()
            }
            .spec()
            .expect("a built-in analysis")
            .0
        })
        .collect()
}

fn session(archive: &Path) -> SqlSession {
    let session = SqlSession::open(archive).expect("open the history archive");
    session.set_home(vec![hindsight_model::network_range(HOME).unwrap()]);
    session
}

/// What one run measured.
struct Run {
    records: usize,
    seconds: f64,
    /// Answers (windows of every watch).
    answers: usize,
    /// Answers given when the stream ended.
    at_end: usize,
    rows: usize,
    by_watch: std::collections::BTreeMap<String, usize>,
    errors: Vec<String>,
    /// Per window end: from the push that closed it to its last answer.
    delays: Vec<Duration>,
}

impl Run {
    fn rate(&self) -> f64 {
        self.records as f64 / self.seconds
    }
}

fn percentile(delays: &[Duration], p: f64) -> Duration {
    let mut sorted = delays.to_vec();
    sorted.sort();
    sorted
        .get(((sorted.len() as f64 * p) as usize).min(sorted.len().saturating_sub(1)))
        .copied()
        .unwrap_or_default()
}

/// Collects answers: the delay of each window end from `pushed`.
struct Collector {
    by_end: std::collections::BTreeMap<i64, Duration>,
    rows: usize,
    by_watch: std::collections::BTreeMap<String, usize>,
    windows: usize,
    at_end: usize,
    cut: u64,
    /// Seconds until the stream ended (the rest answers what it left).
    stream_seconds: f64,
    errors: Vec<String>,
}

impl Collector {
    fn new() -> Self {
        Self {
            by_end: std::collections::BTreeMap::new(),
            rows: 0,
            by_watch: std::collections::BTreeMap::new(),
            windows: 0,
            at_end: 0,
            cut: 0,
            stream_seconds: 0.0,
            errors: Vec::new(),
        }
    }

    /// An answer given when the stream ended (not closed by the stream's
    /// time passing): counted, its delay not measured.
    fn take_at_end(&mut self, answer: &Answer) {
        self.at_end += 1;
        self.count(answer);
    }

    fn take(&mut self, answer: &Answer, pushed: Instant) {
        self.count(answer);
        let delay = pushed.elapsed();
        let entry = self.by_end.entry(answer.end_ns).or_default();
        *entry = (*entry).max(delay);
    }

    fn count(&mut self, answer: &Answer) {
        self.windows += 1;
        self.cut += answer.cut;
        match &answer.rows {
            Ok(batches) => {
                let rows = batches.iter().map(|b| b.num_rows()).sum::<usize>();
                self.rows += rows;
                *self.by_watch.entry(answer.watch.clone()).or_default() += rows;
            }
            Err(error) => {
                if self.errors.len() < 5 {
                    self.errors
                        .push(format!("error: {}: {error}", answer.watch));
                }
            }
        }
    }

    fn finish(mut self, records: usize, seconds: f64) -> Run {
        if self.cut > 0 {
            self.errors.push(format!(
                "{} rows left out of windows at their bounds",
                self.cut
            ));
        }
        self.errors.push(format!(
            "{:.2} s until the stream ended, {:.2} s answering the windows it left",
            self.stream_seconds,
            seconds - self.stream_seconds
        ));
        Run {
            records,
            seconds,
            answers: self.windows,
            at_end: self.at_end,
            rows: self.rows,
            by_watch: self.by_watch,
            errors: self.errors,
            delays: self.by_end.into_values().collect(),
        }
    }
}

/// The five analyses over `records`, pushed in batches as a collector would.
fn run_flows(archive: &Path, records: &[FlowRecord]) -> Run {
    let mut watcher = Watcher::new(session(archive), specs(), None).expect("the watches");
    let mut collector = Collector::new();
    let started = Instant::now();
    for chunk in records.chunks(4096) {
        let pushed = Instant::now();
        let now = chunk.last().map_or(0, |r| r.last_ns);
        watcher.push_flows(chunk.to_vec(), now, &mut |answer| {
            collector.take(&answer, pushed);
        });
    }
    let streamed = started.elapsed();
    watcher.finish(&mut |answer| collector.take_at_end(&answer));
    collector.stream_seconds = streamed.as_secs_f64();
    collector.finish(records.len(), started.elapsed().as_secs_f64())
}

/// The five analyses over `n` packets: copies of `frames`, hosts changed per
/// copy, one every `1/rate` s of event time from `start`.
fn run_packets(
    archive: &Path,
    frames: &[(i64, u32, Vec<u8>)],
    n: usize,
    rate: i64,
    start: i64,
) -> Run {
    let mut watcher = Watcher::new(session(archive), specs(), Some(FlowTableConfig::default()))
        .expect("the watches");
    let mut collector = Collector::new();
    // The frames, changed in place from one copy to the next (no copy per packet).
    let mut frames: Vec<(u32, Vec<u8>)> = frames
        .iter()
        .map(|(_, len, data)| (*len, data.clone()))
        .collect();
    let mut copy_in_frames = 0usize;
    let mut second = i64::MIN;
    let mut pushed = Instant::now();
    let started = Instant::now();
    for i in 0..n {
        let copy = i / frames.len();
        if copy != copy_in_frames {
            let change = copy ^ copy_in_frames;
            for (_, data) in &mut frames {
                hindsight_bench::shift_hosts(data, change);
            }
            copy_in_frames = copy;
        }
        let (wire_len, data) = &frames[i % frames.len()];
        let ts = start + i as i64 * NANOS / rate;
        // Windows close only when the stream passes a whole second: the
        // clock is read there, not for every packet.
        if ts.div_euclid(NANOS) != second {
            second = ts.div_euclid(NANOS);
            pushed = Instant::now();
        }
        let frame = Frame {
            ts_nanos: ts,
            wire_len: *wire_len,
            data,
            link_type: LinkType::ETHERNET,
            iface: 0,
        };
        watcher.push_frame(&frame, &mut |answer| collector.take(&answer, pushed));
    }
    let streamed = started.elapsed();
    watcher.finish(&mut |answer| collector.take_at_end(&answer));
    collector.stream_seconds = streamed.as_secs_f64();
    collector.finish(n, started.elapsed().as_secs_f64())
}

/// The history archive: the first `n` records of the stream one and seven
/// days before it.
fn history(dir: &Path, records: &[FlowRecord]) -> Vec<FlowRecord> {
    let _ = std::fs::remove_dir_all(dir);
    let (mut ingestor, _) =
        Ingestor::open(dir, IngestOptions::default()).expect("create the history archive");
    let mut all = Vec::new();
    for back in [DAY, 7 * DAY] {
        let shifted: Vec<FlowRecord> = records
            .iter()
            .map(|r| {
                let mut r = r.clone();
                r.first_ns -= back;
                r.last_ns -= back;
                r
            })
            .collect();
        all.extend(shifted.iter().cloned());
        ingestor
            .push_flow_records(shifted)
            .expect("archive the history");
    }
    ingestor.finish().expect("seal the history");
    all
}

fn parquet(path: &Path, records: &[FlowRecord]) {
    let mut batches = Vec::new();
    for chunk in records.chunks(65_536) {
        let mut builder = hindsight_store::flows::FlowBatchBuilder::new();
        for record in chunk {
            builder.append(record);
        }
        batches.push(builder.finish());
    }
    let mut file = std::io::BufWriter::new(std::fs::File::create(path).expect("create parquet"));
    hindsight_output::rows::write(&batches, hindsight_output::Format::Parquet, &mut file)
        .expect("write parquet");
}

/// DuckDB's run over the same stream and history, or why there is none.
fn duckdb(
    work: &Path,
    stream: &[FlowRecord],
    history: &[FlowRecord],
) -> Result<serde_json::Value, String> {
    let (stream_file, history_file) = (work.join("stream.parquet"), work.join("history.parquet"));
    parquet(&stream_file, stream);
    parquet(&history_file, history);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("watch_duckdb.py");
    let analyses = Path::new(env!("CARGO_MANIFEST_DIR")).join("../crates/watch/analyses");
    let output = Command::new("python3")
        .arg(script)
        .arg("--stream")
        .arg(&stream_file)
        .arg("--history")
        .arg(&history_file)
        .arg("--analyses")
        .arg(analyses)
        .args(["--home", HOME])
        .output()
        .map_err(|e| format!("cannot run python3: {e}"))?;
    if !output.status.success() {
        return Err(String::from_utf8_lossy(&output.stderr).into_owned());
    }
    serde_json::from_slice(&output.stdout).map_err(|e| e.to_string())
}

/// The run of median rate among `runs`, with the delays of all of them.
fn median_run(mut runs: Vec<Run>) -> Run {
    runs.sort_by(|a, b| a.rate().total_cmp(&b.rate()));
    let rates: Vec<String> = runs.iter().map(|r| format!("{:.0}", r.rate())).collect();
    let delays: Vec<Duration> = runs.iter().flat_map(|r| r.delays.iter().copied()).collect();
    let middle = runs.len() / 2;
    let mut run = runs.swap_remove(middle);
    run.delays = delays;
    run.errors
        .push(format!("rates of the runs: {}", rates.join(", ")));
    run
}

fn print_run(name: &str, unit: &str, run: &Run) {
    println!(
        "{name:<34} {:>12.0} {unit}/s  {:>6} windows timed ({} answers, {} at the end)  p50 {:>8.1} ms  p99 {:>8.1} ms  {:>8} rows  ({:.2} s)",
        run.rate(),
        run.delays.len(),
        run.answers,
        run.at_end,
        percentile(&run.delays, 0.5).as_secs_f64() * 1e3,
        percentile(&run.delays, 0.99).as_secs_f64() * 1e3,
        run.rows,
        run.seconds,
    );
    println!("  rows by analysis: {:?}", run.by_watch);
    for note in &run.errors {
        println!("  {note}");
    }
}

fn main() {
    let args = Args::parse();
    std::fs::create_dir_all(&args.work).expect("create the work directory");
    println!("# hindsight continuous-query benchmark: five analyses, 1-second windows");
    let frames = hindsight_bench::read_frames(&args.source);
    let base = records(&frames);
    let start = frames.first().map_or(0, |f| f.0);
    let flows = stream(&base, args.flows, args.rate, start);
    let archive = args.work.join("history");
    let kept = history(&archive, &flows[..args.history.min(flows.len())]);
    println!(
        "stream: {} connection records at {} per second of event time ({} copies of {}'s {}); \
         {} packets at {} per second; history: {} records, 1 and 7 days back; home {HOME}",
        flows.len(),
        args.rate,
        flows.len().div_ceil(base.len()),
        args.source.display(),
        base.len(),
        args.packets,
        args.packet_rate,
        kept.len(),
    );
    println!(
        "runs per figure: {} (the median rate; delays of all runs)",
        args.runs
    );
    let from_flows = median_run(
        (0..args.runs.max(1))
            .map(|_| run_flows(&archive, &flows))
            .collect(),
    );
    print_run("hindsight, connection records", "records", &from_flows);
    if args.duckdb {
        match duckdb(&args.work, &flows, &kept) {
            Ok(peer) => {
                let seconds = peer["seconds"].as_f64().unwrap_or(f64::NAN);
                println!(
                    "{:<34} {:>12.0} records/s  {:>6} windows  p50 {:>8.1} ms  p99 {:>8.1} ms  rows {}  ({seconds:.2} s)",
                    "DuckDB, same scripts and windows",
                    flows.len() as f64 / seconds,
                    peer["windows"],
                    peer["p50"].as_f64().unwrap_or(f64::NAN) * 1e3,
                    peer["p99"].as_f64().unwrap_or(f64::NAN) * 1e3,
                    peer["rows"],
                );
                println!(
                    "ratio (hindsight / DuckDB, records per second): {:.2}x",
                    seconds / from_flows.seconds
                );
            }
            Err(why) => println!("DuckDB: not run: {why}"),
        }
    }
    let from_packets = median_run(
        (0..args.runs.max(1))
            .map(|_| run_packets(&archive, &frames, args.packets, args.packet_rate, start))
            .collect(),
    );
    print_run("hindsight, packets", "packets", &from_packets);
}
