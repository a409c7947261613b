//! Load benchmark (issue 25): one `hindsight serve` on 127.0.0.1 over a large
//! archive, and `--clients` clients at once for `--seconds`, a quarter each
//! asking
//! - histograms of the whole archive (`GET /api/v1/histogram`, 100 buckets, the
//!   filters "", `tcp` and `udp port 53` in turn),
//! - SQL aggregations of the whole archive (`POST /api/v1/sql`, the statements
//!   of `aggregate_bench` in turn),
//! - a rare address in a one-hour window drawn at random over the archive
//!   (`GET /api/v1/query`, the pcap read whole),
//! - the connections of the busiest address in such a window (`GET
//!   /api/v1/flows`).
//!
//! It prints, per kind, the requests answered, refused (503, and whether a
//! `Retry-After` came with it) and failed, and the latency of the answered
//! ones; the peak RSS of `serve` (its `/proc` status sampled every 100 ms)
//! against the archive's size. A client refused with `Retry-After` waits that
//! long before its next request, as a client should. Then, with the server
//! idle, `aggregate_bench --archive` runs the same histograms and statements
//! one at a time beside DuckDB reading the same segment files.
//!
//! The archive is lan-hour copied an hour apart to `--packets` packets,
//! streamed into `hindsight ingest -` (the input never lands on disk), and
//! kept in `--work` for the next run. Run with
//! `cargo build --release -p hindsight -p hindsight-bench && target/release/load_bench [--packets N] [--clients N] [--seconds N] [--work DIR] [--no-aggregates]`.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use hindsight_bench::{HOUR, Rng, Server, epoch_arg, percentile, read_frames};

#[derive(Parser)]
struct Args {
    #[arg(long, default_value_t = 200_000_000)]
    packets: u64,
    #[arg(long, default_value_t = 32, value_parser = hindsight_bench::count_from(4))]
    clients: usize,
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    seconds: u64,
    #[arg(long, default_value_os_t = std::env::temp_dir().join("hindsight-bench"))]
    work: PathBuf,
    #[arg(long = "no-aggregates", action = clap::ArgAction::SetFalse)]
    aggregates: bool,
}

/// The kinds of request, in the order clients take them.
const KINDS: [&str; 4] = [
    "histogram, whole archive",
    "SQL aggregation, whole archive",
    "rare address, one hour",
    "connection lookup, one hour",
];

const FILTERS: [&str; 3] = ["", "tcp", "udp%20port%2053"];

const STATEMENTS: [&str; 4] = [
    "SELECT ip_proto, count(*) AS packets, sum(wire_len) AS n FROM packets GROUP BY ip_proto",
    "SELECT src_addr, sum(wire_len) AS n FROM packets GROUP BY src_addr ORDER BY n DESC LIMIT 10",
    "SELECT dst_port, count(DISTINCT src_addr) AS n FROM packets WHERE ip_proto = 6 \
     GROUP BY dst_port ORDER BY n DESC, dst_port LIMIT 10",
    "SELECT date_trunc('hour', ts) AS h, sum(wire_len) AS n FROM packets GROUP BY h",
];

/// One request's outcome.
struct Outcome {
    kind: usize,
    status: u16,
    retry_after: Option<u64>,
    elapsed: Duration,
    bytes: u64,
}

/// A field of a process's `/proc` status, in KiB (`VmRSS`, `VmHWM`).
fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

/// The peak VmRSS (KiB) of a process, sampled until `stop`.
fn sample_rss(pid: u32, stop: Arc<AtomicBool>, peak: Arc<AtomicU64>) {
    while !stop.load(Ordering::Relaxed) {
        if let Some(kib) = status_kib(pid, "VmRSS") {
            peak.fetch_max(kib, Ordering::Relaxed);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn main() {
    let args = Args::parse();
    std::fs::create_dir_all(&args.work).expect("create work dir");
    let hindsight = hindsight_bench::hindsight_binary();
    let frames = read_frames(&hindsight_bench::default_source());
    let per_copy = frames.len() as u64;
    let copies = args.packets.div_ceil(per_copy);
    let packets = copies * per_copy;
    let first = frames.first().map_or(0, |f| f.0);
    let archive = args.work.join(format!("load-archive-{packets}"));
    let done = args.work.join(format!("load-archive-{packets}.done"));
    if !done.exists() {
        let _ = std::fs::remove_dir_all(&archive);
        eprintln!(
            "load_bench: ingesting {packets} packets into {}",
            archive.display()
        );
        let (elapsed, rss) =
            hindsight_bench::stream_copies(&hindsight, &archive, &frames, 0, copies);
        eprintln!(
            "load_bench: ingested in {:.0} s ({:.0} packets/s), peak RSS {} MiB",
            elapsed.as_secs_f64(),
            packets as f64 / elapsed.as_secs_f64(),
            rss / 1024
        );
        std::fs::write(&done, "").expect("mark the archive complete");
    }
    let archive_bytes = hindsight_bench::disk_bytes(&archive);
    let server = Server::start(&hindsight, &archive);
    let base = server.base.clone();
    let stop = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicU64::new(0));
    let sampler = {
        let (stop, peak, pid) = (Arc::clone(&stop), Arc::clone(&peak), server.child.id());
        std::thread::spawn(move || sample_rss(pid, stop, peak))
    };

    println!(
        "# load_bench: {packets} packets ({copies} copies of lan-hour an hour apart, {:.1} GiB on disk), {} clients for {} s against one `hindsight serve` (default [api]: 4 cheap slots, 2 scan slots, 64 queued per class)\n",
        archive_bytes as f64 / (1u64 << 30) as f64,
        args.clients,
        args.seconds
    );
    let deadline = Instant::now() + Duration::from_secs(args.seconds);
    let started = Instant::now();
    let clients: Vec<_> = (0..args.clients)
        .map(|client| {
            let base = base.clone();
            std::thread::spawn(move || {
                let agent: ureq::Agent = ureq::Agent::config_builder()
                    .timeout_global(Some(Duration::from_secs(600)))
                    .http_status_as_error(false)
                    .build()
                    .into();
                let kind = client % KINDS.len();
                let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (client as u64 + 1));
                let mut outcomes = Vec::new();
                let mut turn = client / KINDS.len();
                while Instant::now() < deadline {
                    let hour = first + rng.below(copies) as i64 * HOUR;
                    let window = format!(
                        "since={}&until={}",
                        epoch_arg(hour),
                        epoch_arg(hour + HOUR)
                    );
                    let begun = Instant::now();
                    let response = match kind {
                        0 => agent
                            .get(format!(
                                "{base}/api/v1/histogram?buckets=100&filter={}",
                                FILTERS[turn % FILTERS.len()]
                            ))
                            .call(),
                        1 => agent.post(format!("{base}/api/v1/sql")).send_json(
                            serde_json::json!({"sql": STATEMENTS[turn % STATEMENTS.len()], "format": "jsonl"}),
                        ),
                        2 => agent
                            .get(format!(
                                "{base}/api/v1/query?filter=host%20172.30.100.1&{window}"
                            ))
                            .call(),
                        _ => agent
                            .get(format!("{base}/api/v1/flows?ip=10.174.200.10&{window}"))
                            .call(),
                    };
                    turn += 1;
                    let outcome = match response {
                        Ok(mut response) => {
                            let status = response.status().as_u16();
                            let retry_after = response
                                .headers()
                                .get("retry-after")
                                .and_then(|v| v.to_str().ok())
                                .and_then(|v| v.trim().parse().ok());
                            let bytes = std::io::copy(
                                &mut response.body_mut().as_reader(),
                                &mut std::io::sink(),
                            )
                            .unwrap_or(0);
                            Outcome {
                                kind,
                                status,
                                retry_after,
                                elapsed: begun.elapsed(),
                                bytes,
                            }
                        }
                        Err(_) => Outcome {
                            kind,
                            status: 0,
                            retry_after: None,
                            elapsed: begun.elapsed(),
                            bytes: 0,
                        },
                    };
                    if let Some(seconds) = outcome.retry_after {
                        let left = deadline.saturating_duration_since(Instant::now());
                        std::thread::sleep(Duration::from_secs(seconds).min(left));
                    }
                    outcomes.push(outcome);
                }
                outcomes
            })
        })
        .collect();
    let outcomes: Vec<Outcome> = clients
        .into_iter()
        .flat_map(|c| c.join().expect("a client"))
        .collect();
    let wall = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let _ = sampler.join();
    let hwm = status_kib(server.child.id(), "VmHWM").unwrap_or(0);
    drop(server);

    println!(
        "| request | clients | answered (200) | refused (503) | with Retry-After | failed | p50 ms | p99 ms | max ms | MiB answered |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut cheap = Vec::new();
    let mut cheap_refused = 0;
    for (kind, name) in KINDS.iter().enumerate() {
        let mine: Vec<&Outcome> = outcomes.iter().filter(|o| o.kind == kind).collect();
        let ok: Vec<Duration> = mine
            .iter()
            .filter(|o| o.status == 200)
            .map(|o| o.elapsed)
            .collect();
        let refused = mine.iter().filter(|o| o.status == 503).count();
        let with_retry = mine
            .iter()
            .filter(|o| o.status == 503 && o.retry_after.is_some())
            .count();
        let failed = mine
            .iter()
            .filter(|o| o.status != 200 && o.status != 503)
            .count();
        let bytes: u64 = mine.iter().map(|o| o.bytes).sum();
        if kind >= 2 {
            cheap.extend(ok.iter().copied());
            cheap_refused += refused + failed;
        }
        let clients = (0..args.clients)
            .filter(|c| c % KINDS.len() == kind)
            .count();
        let (p50, p99, max) = if ok.is_empty() {
            ("-".to_owned(), "-".to_owned(), "-".to_owned())
        } else {
            (
                format!("{:.1}", ms(percentile(ok.clone(), 0.5))),
                format!("{:.1}", ms(percentile(ok.clone(), 0.99))),
                format!("{:.1}", ms(percentile(ok.clone(), 1.0))),
            )
        };
        println!(
            "| {name} | {clients} | {} | {refused} | {with_retry} | {failed} | {p50} | {p99} | {max} | {:.1} |",
            ok.len(),
            bytes as f64 / (1u64 << 20) as f64
        );
    }
    println!();
    if !cheap.is_empty() {
        println!(
            "cheap requests (rare address and connection lookup): {} answered, {cheap_refused} refused or failed, p99 {:.1} ms (target: none refused, p99 under 100 ms)",
            cheap.len(),
            ms(percentile(cheap, 0.99))
        );
    }
    println!(
        "serve's peak RSS: {:.0} MiB sampled every 100 ms, {:.0} MiB high-water mark (the archive: {:.1} GiB); {:.0} s of load",
        peak.load(Ordering::Relaxed) as f64 / 1024.0,
        hwm as f64 / 1024.0,
        archive_bytes as f64 / (1u64 << 30) as f64,
        wall.as_secs_f64()
    );
    println!();
    if args.aggregates {
        println!(
            "## the same aggregations one at a time, beside DuckDB (aggregate_bench --archive)\n"
        );
        let status = Command::new(
            std::env::current_exe()
                .expect("this binary")
                .with_file_name("aggregate_bench"),
        )
        .arg("--archive")
        .arg(&archive)
        .args(["--runs", "3"])
        .status();
        if !status.is_ok_and(|s| s.success()) {
            println!(
                "aggregate_bench did not run: build it with `cargo build --release -p hindsight-bench`"
            );
        }
    }
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}
