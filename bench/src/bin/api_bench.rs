//! HTTP API benchmark (issue 4): the latency of packet queries through
//! `hindsight serve`, side by side in one run with the same query as a
//! `hindsight query` process and with `tcpdump -r` scanning the raw capture.
//!
//! The input is lan-hour replicated to `--packets` packets (timestamps shifted by
//! one hour per copy), ingested with the release `hindsight` binary next to this
//! one. Each query returns a pcap; the client reads the whole body over a
//! kept-alive connection. Medians of `--runs` (tcpdump: of 3).
//!
//! With `--before BINARY` (an earlier build of `hindsight`), a second server of
//! that binary answers the same queries over the same archive, in the same run,
//! taking turns of `--turn` requests (10 by default: a client asks one server
//! several times in a row, as the web UI or a script does; `--turn 1` alternates
//! every request, which leaves each server's threads and caches cold for its
//! next request): the side-by-side of two readers. Last, each
//! server is scraped (`GET /metrics`) under `strace`, which counts the files of
//! the archive a scrape opens.
//! `cargo build --release -p hindsight -p hindsight-bench && target/release/api_bench [--packets N] [--runs N] [--work DIR] [--before BINARY] [--turn N]`

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;
use hindsight_bench::{Server, median, time_command};

const NANOS: i64 = 1_000_000_000;

#[derive(Parser)]
struct Args {
    #[arg(long, default_value_t = 5_000_000)]
    packets: u64,
    #[arg(long, default_value_t = 21)]
    runs: usize,
    #[arg(long, default_value_os_t = std::env::temp_dir().join("hindsight-bench"))]
    work: PathBuf,
    #[arg(long)]
    before: Option<PathBuf>,
    #[arg(long, default_value_t = 10, value_parser = hindsight_bench::count_from(1))]
    turn: usize,
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

fn main() {
    let args = Args::parse();
    std::fs::create_dir_all(&args.work).expect("create work dir");
    let hindsight = hindsight_bench::hindsight_binary();
    let (archive, capture, packets, first_ts) =
        hindsight_bench::replicated_archive(&hindsight, args.packets, &args.work);
    let server = Server::start(&hindsight, &archive);
    let before = args
        .before
        .as_ref()
        .map(|binary| Server::start(binary, &archive));
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(300)))
        .build()
        .into();

    let window_start = first_ts + 30 * 60 * NANOS;
    let epoch = hindsight_bench::epoch_arg;
    let (since, until) = (epoch(window_start), epoch(window_start + 60 * NANOS));
    // (name, filter, window (since, until), tcpdump's filter)
    type Case<'a> = (&'a str, &'a str, Option<(&'a str, &'a str)>, &'a str);
    let queries: [Case; 3] = [
        (
            "rare address",
            "host 172.30.100.1",
            None,
            "host 172.30.100.1",
        ),
        (
            "busy address",
            "host 10.174.200.10",
            None,
            "host 10.174.200.10",
        ),
        ("1-minute window", "", Some((&since, &until)), ""),
    ];
    println!(
        "# hindsight API benchmark: {packets} packets ({}), {} runs per figure (medians; tcpdump: 3){}\n",
        capture.display(),
        args.runs,
        if before.is_some() {
            format!("; the two servers take turns of {} requests", args.turn)
        } else {
            String::new()
        }
    );
    println!(
        "| query | packets | HTTP API, ms | before: HTTP API, ms | before / now | reader in this process, ms | `hindsight query` process, ms | `tcpdump -r` scan, ms | API vs tcpdump |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    // The same search without HTTP: what the API adds is the difference.
    let reader = hindsight_reader::Reader::open(&archive).expect("open the archive");
    for (name, filter, window, bpf) in queries {
        // ureq percent-encodes the parameters.
        let mut params = vec![("format", "pcap"), ("filter", filter)];
        let mut cli_window: Vec<String> = Vec::new();
        if let Some((since, until)) = window {
            params.extend([("since", since), ("until", until)]);
            cli_window = vec![
                "--since".to_owned(),
                since.to_owned(),
                "--until".to_owned(),
                until.to_owned(),
            ];
        }
        let ask = |base: &str| {
            let started = Instant::now();
            let body = agent
                .get(format!("{base}/api/v1/query"))
                .query_pairs(params.iter().copied())
                .call()
                .expect("query the API")
                .body_mut()
                .with_config()
                .limit(u64::MAX)
                .read_to_vec()
                .expect("read the answer");
            assert!(body.len() >= 24, "not a pcap");
            (started.elapsed(), body)
        };
        let mut samples = Vec::with_capacity(args.runs);
        let mut samples_before = Vec::with_capacity(args.runs);
        let mut body = Vec::new();
        // Turns of `--turn` requests to each server, until each has `--runs`.
        while samples.len() < args.runs {
            let turn = args.turn.min(args.runs - samples.len());
            for _ in 0..turn {
                let (elapsed, answer) = ask(&server.base);
                samples.push(elapsed);
                body = answer;
            }
            if let Some(before) = &before {
                for _ in 0..turn {
                    let (elapsed, answer_before) = ask(&before.base);
                    samples_before.push(elapsed);
                    assert_eq!(
                        count_records(&body),
                        count_records(&answer_before),
                        "{name}: the two servers' answers differ"
                    );
                }
            }
        }
        let api = median(samples);
        let in_process = {
            let time = match window {
                Some((since, until)) => {
                    hindsight_output::time::time_range(Some(since), Some(until), None)
                        .expect("the window")
                }
                None => hindsight_store::TimeRange::ALL,
            };
            let request = hindsight_query::search::SearchRequest {
                filter: hindsight_query::filter::Filter::parse(filter).expect("the filter"),
                time,
                limit: None,
                with_data: true,
                capture_only: true,
            };
            let mut samples = Vec::with_capacity(args.runs);
            for _ in 0..args.runs {
                let started = Instant::now();
                let snapshot = reader.snapshot().expect("a snapshot");
                let mut out = Vec::new();
                let mut sink = hindsight_output::packets::packet_sink(
                    hindsight_output::Format::Pcap,
                    Box::new(&mut out),
                )
                .expect("a pcap writer");
                snapshot
                    .search(
                        &request,
                        &hindsight_reader::Limits::default(),
                        &mut |_| {},
                        &mut |record, data| sink.write(record, data).map(|()| true),
                    )
                    .expect("the search");
                sink.finish().expect("the pcap's end");
                drop(sink);
                samples.push(started.elapsed());
                assert_eq!(
                    count_records(&out),
                    count_records(&body),
                    "{name}: in process"
                );
            }
            median(samples)
        };
        let api_before = (!samples_before.is_empty()).then(|| median(samples_before));
        let process = time_command(args.runs, || {
            let mut command = Command::new(&hindsight);
            command
                .args(["query", filter, "--archive"])
                .arg(&archive)
                .args(&cli_window)
                .args(["-F", "pcap", "-o", "/dev/null"]);
            command
        });
        let tcpdump = if window.is_some() {
            // tcpdump cannot select by time; editcap's cut is in archive_bench.
            None
        } else {
            Some(time_command(3, || {
                let mut command = Command::new("tcpdump");
                command
                    .args(["-r"])
                    .arg(&capture)
                    .args(["-w", "/dev/null", bpf]);
                command
            }))
        };
        let matched = count_records(&body);
        println!(
            "| {name} | {matched} | {:.3} | {} | {} | {:.3} | {:.2} | {} | {} |",
            ms(api),
            api_before.map_or("-".to_owned(), |t| format!("{:.3}", ms(t))),
            api_before.map_or("-".to_owned(), |t| format!(
                "{:.1}x",
                t.as_secs_f64() / api.as_secs_f64()
            )),
            ms(in_process),
            ms(process),
            tcpdump.map_or("-".to_owned(), |t| format!("{:.0}", ms(t))),
            tcpdump.map_or("-".to_owned(), |t| format!(
                "{:.0}x",
                t.as_secs_f64() / api.as_secs_f64()
            )),
        );
    }
    println!();
    println!("| server | `/metrics` scrape, ms | archive files opened by one scrape (strace) |");
    println!("|---|---:|---:|");
    for (label, server) in [("now", Some(&server)), ("before", before.as_ref())] {
        let Some(server) = server else { continue };
        let (opened, latency) = scrape(&agent, server, &archive, args.runs);
        println!(
            "| {label} | {:.3} | {} |",
            ms(latency),
            opened.map_or("- (no strace)".to_owned(), |n| n.to_string())
        );
    }
}

/// The files under `archive` that one `/metrics` scrape of `server` opens, as
/// `strace` sees them (`None` without strace), and the scrape's latency (median
/// of `runs`, without strace).
fn scrape(
    agent: &ureq::Agent,
    server: &Server,
    archive: &Path,
    runs: usize,
) -> (Option<usize>, Duration) {
    let url = format!("{}/metrics", server.base);
    let get = || {
        agent
            .get(&url)
            .call()
            .expect("scrape")
            .body_mut()
            .read_to_string()
            .expect("read metrics")
    };
    let samples: Vec<Duration> = (0..runs)
        .map(|_| {
            let started = Instant::now();
            get();
            started.elapsed()
        })
        .collect();
    let trace = std::env::temp_dir().join(format!("api-bench-strace-{}", server.child.id()));
    let strace = Command::new("strace")
        .args(["-f", "-e", "trace=open,openat,openat2", "-o"])
        .arg(&trace)
        .args(["-p", &server.child.id().to_string()])
        .stderr(Stdio::piped())
        .spawn();
    let opened = match strace {
        Ok(mut strace) => {
            // Attached once it says so for the first thread.
            let stderr = strace.stderr.take().expect("stderr");
            let mut lines = BufReader::new(stderr).lines();
            let _ = lines.next();
            std::thread::sleep(Duration::from_millis(300));
            get();
            std::thread::sleep(Duration::from_millis(300));
            // SIGINT detaches strace.
            let _ = Command::new("kill")
                .args(["-INT", &strace.id().to_string()])
                .status();
            let _ = strace.wait();
            let text = std::fs::read_to_string(&trace).unwrap_or_default();
            let _ = std::fs::remove_file(&trace);
            let root = archive.to_string_lossy().into_owned();
            Some(text.lines().filter(|line| line.contains(&root)).count())
        }
        Err(_) => None,
    };
    (opened, median(samples))
}

/// Counts the records of a pcap answer: the records after the 24-byte header.
fn count_records(pcap: &[u8]) -> u64 {
    let mut at = 24;
    let mut records = 0;
    while let Some(header) = pcap.get(at..at + 16) {
        let captured = u32::from_le_bytes([header[8], header[9], header[10], header[11]]);
        at += 16 + captured as usize;
        records += 1;
    }
    records
}
