//! HTTP API benchmark (issue 4): the latency of packet queries through
//! `hindsight serve`, side by side in one run with the same query as a
//! `hindsight query` process and with `tcpdump -r` scanning the raw capture.
//!
//! The input is lan-hour replicated to `--packets` packets (timestamps shifted by
//! one hour per copy), ingested with the release `hindsight` binary next to this
//! one. Each query returns a pcap; the client reads the whole body over a
//! kept-alive connection. Medians of `--runs` (tcpdump: of 3).
//! `cargo build --release -p hindsight -p hindsight-bench && target/release/api_bench [--packets N] [--runs N] [--work DIR]`

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hindsight_bench::{median, replicate, run_quiet, time_command};

const NANOS: i64 = 1_000_000_000;

struct Args {
    packets: u64,
    runs: usize,
    work: PathBuf,
}

fn parse_args() -> Args {
    let mut args = Args {
        packets: 5_000_000,
        runs: 21,
        work: std::env::temp_dir().join("hindsight-bench"),
    };
    let mut flags =
        hindsight_bench::Flags::new("api_bench", "[--packets N] [--runs N] [--work DIR]");
    while let Some(flag) = flags.next_flag() {
        match flag.as_str() {
            "--packets" => args.packets = flags.value(&flag),
            "--runs" => args.runs = flags.value(&flag),
            "--work" => args.work = flags.value(&flag),
            other => flags.unknown(other),
        }
    }
    args
}

/// `hindsight serve` on a free port; killed when dropped.
struct Server {
    child: Child,
    base: String,
}

impl Server {
    fn start(hindsight: &Path, archive: &Path) -> Self {
        let mut child = Command::new(hindsight)
            .args(["serve", "--listen", "127.0.0.1:0", "--archive"])
            .arg(archive)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start hindsight serve");
        let stderr = child.stderr.take().expect("stderr");
        let mut lines = BufReader::new(stderr).lines();
        let address = loop {
            let line = lines.next().expect("serve ended").expect("read stderr");
            if let Some(address) = line.split("listening on http://").nth(1) {
                break address.trim().to_owned();
            }
        };
        std::thread::spawn(move || lines.for_each(drop));
        Self {
            child,
            base: format!("http://{address}"),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

fn main() {
    let args = parse_args();
    std::fs::create_dir_all(&args.work).expect("create work dir");
    let hindsight = std::env::current_exe()
        .expect("own path")
        .with_file_name("hindsight");
    assert!(
        hindsight.exists(),
        "{} is missing: cargo build --release -p hindsight",
        hindsight.display()
    );
    let (capture, packets, first_ts) =
        replicate(&hindsight_bench::default_source(), args.packets, &args.work);
    let archive = args.work.join(format!("api-archive-{packets}"));
    if !archive.exists() {
        run_quiet(
            Command::new(&hindsight)
                .args(["ingest", "--quiet", "--archive"])
                .arg(&archive)
                .arg(&capture),
        );
    }
    let server = Server::start(&hindsight, &archive);
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(300)))
        .build()
        .into();

    let window_start = first_ts + 30 * 60 * NANOS;
    let epoch = |ns: i64| format!("{}.{:09}", ns / NANOS, ns % NANOS);
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
        "# hindsight API benchmark: {packets} packets ({}), {} runs per figure (medians; tcpdump: 3)\n",
        capture.display(),
        args.runs
    );
    println!(
        "| query | packets | HTTP API, ms | `hindsight query` process, ms | `tcpdump -r` scan, ms | API vs tcpdump |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    for (name, filter, window, bpf) in queries {
        let url = format!("{}/api/v1/query", server.base);
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
        let mut samples = Vec::with_capacity(args.runs);
        let mut body = Vec::new();
        for _ in 0..args.runs {
            let started = Instant::now();
            body = agent
                .get(&url)
                .query_pairs(params.iter().copied())
                .call()
                .expect("query the API")
                .body_mut()
                .with_config()
                .limit(u64::MAX)
                .read_to_vec()
                .expect("read the answer");
            samples.push(started.elapsed());
            assert!(body.len() >= 24, "not a pcap");
        }
        let api = median(samples);
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
            "| {name} | {matched} | {:.2} | {:.2} | {} | {} |",
            ms(api),
            ms(process),
            tcpdump.map_or("-".to_owned(), |t| format!("{:.0}", ms(t))),
            tcpdump.map_or("-".to_owned(), |t| format!(
                "{:.0}x",
                t.as_secs_f64() / api.as_secs_f64()
            )),
        );
    }
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
