//! Archive benchmark (issue 2): ingest rate, bytes per packet and query latency of
//! hindsight, side by side with the peer tools in the same run:
//! - ingest vs `tcpdump -r X -w /dev/null` (the raw read floor), with connection
//!   records (the default) and without (`--no-flows`, packets only);
//! - bytes per packet vs the raw pcap and vs `zstd -3` of it;
//! - query latency for a rare and a busy address vs `tcpdump -r X 'host A'` (and
//!   `stenoread` with `--stenographer`); 1-minute window vs `editcap -A -B`.
//!
//! The input is lan-hour-2012.pcap replicated (timestamps shifted by one hour per
//! copy) to at least `--packets` packets. Run with
//! `cargo run --release -p hindsight-bench --bin archive_bench -- [--packets N] [--work DIR]`.
//! Figures are medians of several runs; ratios are computed from the medians.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;
use hindsight_bench::{
    cpu_seconds, median, replicate, run_quiet, run_quiet_keeping_stdout, segment_column_bytes,
    time_command,
};
use hindsight_capture::CaptureReader;
use hindsight_ingest::{IngestOptions, Ingestor};
use hindsight_query::filter::Filter;
use hindsight_query::search::{PacketSearch, SearchRequest};
use hindsight_store::{FooterCache, TimeRange};

const NANOS: i64 = 1_000_000_000;

#[derive(Parser)]
struct Args {
    #[arg(long, default_value_t = 5_000_000)]
    packets: u64,
    #[arg(long, default_value_os_t = std::env::temp_dir().join("hindsight-bench"))]
    work: PathBuf,
    #[arg(long, default_value_os_t = hindsight_bench::default_source())]
    source: PathBuf,
    #[arg(long, default_value_t = 3)]
    runs: usize,
    #[arg(long)]
    stenographer: bool,
    #[arg(long)]
    page_rows: Option<usize>,
    #[arg(long)]
    data_page_bytes: Option<usize>,
    #[arg(long)]
    covering_rows: Option<u32>,
}

fn main() {
    let args = Args::parse();
    std::fs::create_dir_all(&args.work).expect("create work dir");
    println!("# hindsight archive benchmark");
    println!(
        "machine: {} cores; runs per figure: {} (medians)",
        num_cores(),
        args.runs
    );
    let (capture, packets, first_ts) = replicate(&args.source, args.packets, &args.work);
    let pcap_bytes = std::fs::metadata(&capture).map(|m| m.len()).unwrap_or(0);
    println!(
        "input: {} ({packets} packets, {:.1} MB)\n",
        capture.display(),
        pcap_bytes as f64 / 1e6
    );

    // --- ingest ---
    let tcpdump_read = time_command(args.runs, || {
        let mut c = Command::new("tcpdump");
        c.args(["-r"]).arg(&capture).args(["-w", "/dev/null"]);
        c
    });
    let archive = args.work.join("archive");
    // Runs alternate between the default (connection records built too) and
    // `--no-flows` (packets only), so that both see the machine alike.
    let packets_only = args.work.join("archive-packets-only");
    let mut samples: [(Vec<Duration>, Vec<Duration>); 2] = Default::default();
    for _ in 0..args.runs {
        for (variant, (dir, flows)) in [(&archive, true), (&packets_only, false)]
            .into_iter()
            .enumerate()
        {
            let _ = std::fs::remove_dir_all(dir);
            let cpu_before = cpu_seconds();
            let started = Instant::now();
            let mut options = IngestOptions {
                flows_from_packets: flows,
                ..IngestOptions::default()
            };
            if let Some(rows) = args.page_rows {
                options.segment.page_rows = rows;
            }
            if let Some(bytes) = args.data_page_bytes {
                options.segment.data_page_bytes = bytes;
            }
            if let Some(rows) = args.covering_rows {
                options.segment.covering_rows = rows;
            }
            let (mut ingestor, _) = Ingestor::open(dir, options).expect("open archive");
            let outcome = ingestor.ingest_file(&capture, &mut |_| {}).expect("ingest");
            assert!(outcome.error.is_none(), "{:?}", outcome.error);
            ingestor.finish().expect("finish");
            samples[variant].0.push(started.elapsed());
            samples[variant]
                .1
                .push(Duration::from_secs_f64(cpu_seconds() - cpu_before));
        }
    }
    let _ = std::fs::remove_dir_all(&packets_only);
    let [(ingest, ingest_cpu), (packets_only_wall, packets_only_cpu)] =
        samples.map(|(wall, cpu)| (median(wall), median(cpu)));
    let rate = |d: Duration| packets as f64 / d.as_secs_f64();
    println!("## ingest ({packets} packets)");
    println!("| tool | wall s | packets/s | note |");
    println!("|---|---:|---:|---|");
    println!(
        "| tcpdump -r X -w /dev/null | {:.3} | {:.0} | raw read floor |",
        tcpdump_read.as_secs_f64(),
        rate(tcpdump_read)
    );
    println!(
        "| hindsight ingest | {:.3} | {:.0} | {:.2} CPU s → {:.0} packets per CPU-second (per core) |",
        ingest.as_secs_f64(),
        rate(ingest),
        ingest_cpu.as_secs_f64(),
        rate(ingest_cpu)
    );
    println!(
        "| hindsight ingest --no-flows (packets only) | {:.3} | {:.0} | {:.2} CPU s → {:.0} packets per CPU-second (per core) |",
        packets_only_wall.as_secs_f64(),
        rate(packets_only_wall),
        packets_only_cpu.as_secs_f64(),
        rate(packets_only_cpu)
    );
    println!(
        "ratio hindsight/tcpdump wall time: {:.2}\n",
        ingest.as_secs_f64() / tcpdump_read.as_secs_f64()
    );

    // --- bytes per packet ---
    let (data_bytes, header_bytes, segment_bytes) = segment_column_bytes(&archive.join("packets"));
    let zstd_path = args.work.join("replicated.pcap.zst");
    run_quiet(
        Command::new("zstd")
            .args(["-3", "-q", "-f", "-T1", "-o"])
            .arg(&zstd_path)
            .arg(&capture),
    );
    let zstd_bytes = std::fs::metadata(&zstd_path).map(|m| m.len()).unwrap_or(0);
    let per = |b: u64| b as f64 / packets as f64;
    println!("## bytes per packet");
    println!("| what | bytes | bytes/packet |");
    println!("|---|---:|---:|");
    println!("| raw pcap | {pcap_bytes} | {:.2} |", per(pcap_bytes));
    println!(
        "| zstd -3 of the pcap | {zstd_bytes} | {:.2} |",
        per(zstd_bytes)
    );
    println!(
        "| hindsight segments, all | {segment_bytes} | {:.2} |",
        per(segment_bytes)
    );
    println!(
        "| hindsight header fields (all columns but data) | {header_bytes} | {:.2} |",
        per(header_bytes)
    );
    println!(
        "| hindsight snap bytes (data column, 128 B snap) | {data_bytes} | {:.2} |",
        per(data_bytes)
    );
    let index_bytes = directory_bytes(&archive.join("index"));
    println!(
        "| hindsight address index (RocksDB: postings and covering postings) | {index_bytes} | {:.2} |\n",
        per(index_bytes)
    );

    // --- queries ---
    // Two addresses, both seen only in IP packets (Stenographer indexes IP packets
    // only, so it can answer the same queries): an NTP server a host asks 3 times
    // an hour (rare), and the DNS server, 390 packets an hour (busy).
    let addresses = [("rare", "172.30.100.1"), ("busy", "10.174.200.10")];
    // As `serve` searches: its reader keeps the parsed footers between queries.
    let search = PacketSearch::open(&archive)
        .expect("open archive for search")
        .with_footers(std::sync::Arc::new(FooterCache::new(
            FooterCache::DEFAULT_BYTES,
        )));
    let run_search = |filter: &str, time: TimeRange| -> (Duration, u64) {
        let mut matched = 0;
        let samples: Vec<Duration> = (0..args.runs.max(5))
            .map(|_| {
                let started = Instant::now();
                let request = SearchRequest {
                    filter: Filter::parse(filter).expect("filter"),
                    time,
                    limit: None,
                    with_data: false,
                    capture_only: false,
                };
                let plan = search.plan(&request).expect("plan");
                let stats = search
                    .execute(&request, &plan, &mut |_, _| Ok(true))
                    .expect("execute");
                matched = stats.rows_matched;
                started.elapsed()
            })
            .collect();
        (median(samples), matched)
    };
    let cli = hindsight_cli();
    let mut rows = Vec::new();
    let mut address_times = Vec::new();
    for (kind, address) in addresses {
        let filter = format!("host {address}");
        let (ours, matches) = run_search(&filter, TimeRange::ALL);
        let tcpdump = time_command(args.runs, || {
            let mut c = Command::new("tcpdump");
            c.args(["-nn", "-r"])
                .arg(&capture)
                .args(["-w", "/dev/null", "host", address]);
            c
        });
        rows.push(format!(
            "| {kind} address host {address} ({matches} packets), in process | {:.2} | tcpdump -r X 'host {address}' | {:.1} | {:.1}x |",
            ms(ours),
            ms(tcpdump),
            ratio(tcpdump, ours)
        ));
        if let Some(cli) = &cli {
            let (process, exported) = time_counting(args.runs.max(21), &args.work, || {
                let mut c = Command::new(cli);
                c.args(["query", &filter, "--format", "pcap", "--archive"])
                    .arg(&archive);
                c
            });
            rows.push(format!(
                "| same, as a process: hindsight query --format pcap ({exported} packets) | {:.2} | tcpdump -r X 'host {address}' | {:.1} | {:.1}x |",
                ms(process),
                ms(tcpdump),
                ratio(tcpdump, process)
            ));
        }
        address_times.push((address, ours));
    }
    let window_start = first_ts + 30 * 60 * NANOS;
    let window = TimeRange {
        start_nanos: window_start,
        end_nanos: window_start + 60 * NANOS - 1,
    };
    let (ours_window, window_matches) = run_search("", window);
    let editcap_window = time_command(args.runs, || {
        let mut c = Command::new("editcap");
        c.args([
            "-A",
            &hindsight_bench::epoch_arg(window.start_nanos),
            "-B",
            &hindsight_bench::epoch_arg(window.end_nanos + 1),
        ])
        .arg(&capture)
        .arg("/dev/null");
        c
    });
    rows.push(format!(
        "| 1-minute window ({window_matches} packets), in process | {:.2} | editcap -A -B X | {:.1} | {:.1}x |",
        ms(ours_window),
        ms(editcap_window),
        ratio(editcap_window, ours_window)
    ));
    println!("## query latency");
    println!("| query | hindsight ms | peer | peer ms | speed-up |");
    println!("|---|---:|---|---:|---:|");
    for row in rows {
        println!("{row}");
    }
    if cli.is_none() {
        println!(
            "(the hindsight CLI is not built next to this binary, so no process-level \
             figures: cargo build --release -p hindsight)"
        );
    }
    if args.stenographer {
        stenographer(&args, &capture, &address_times);
    } else {
        println!(
            "\nstenoread: not compared; pass --stenographer (as root) to capture the same \
             packets with Stenographer on a veth pair in a private network namespace"
        );
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// How many times faster `ours` is than `peer`.
fn ratio(peer: Duration, ours: Duration) -> f64 {
    peer.as_secs_f64() / ours.as_secs_f64().max(1e-9)
}

/// Replays the capture into a Stenographer on a veth pair (bench/stenographer.sh)
/// and times `stenoread`'s queries for the addresses against hindsight's.
fn stenographer(args: &Args, capture: &Path, ours: &[(&str, Duration)]) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("stenographer.sh");
    println!("\n## Stenographer");
    let started = Instant::now();
    let output = Command::new(&script)
        .arg("start")
        .arg(capture)
        .stderr(Stdio::inherit())
        .output()
        .expect("run bench/stenographer.sh");
    assert!(
        output.status.success(),
        "bench/stenographer.sh start failed"
    );
    println!(
        "replayed with tcpreplay --topspeed into stenographer on a veth pair; {} ({:.0} s incl. replay and indexing)",
        String::from_utf8_lossy(&output.stdout).trim(),
        started.elapsed().as_secs_f64()
    );
    println!("| query | hindsight ms (in process) | peer | peer ms | speed-up |");
    println!("|---|---:|---|---:|---:|");
    for &(address, ours) in ours {
        let (steno, steno_matches) = time_counting(args.runs.max(21), &args.work, || {
            let mut c = Command::new(&script);
            c.args(["query", &format!("host {address}")]);
            c
        });
        println!(
            "| host {address} | {:.2} | stenoread 'host {address}' ({steno_matches} packets) | {:.1} | {:.1}x |",
            ms(ours),
            ms(steno),
            ratio(steno, ours)
        );
    }
    let _ = Command::new(&script).arg("stop").status();
    println!(
        "No 1-minute window comparison: Stenographer stamps packets with the replay time, \
         so its time filters cannot select the capture's original minute."
    );
}

/// Runs a command writing a pcap to stdout `runs` times; returns the median wall
/// time and the packet count of the last output.
fn time_counting(
    runs: usize,
    work: &Path,
    mut command: impl FnMut() -> Command,
) -> (Duration, u64) {
    let out = work.join("query-output.pcap");
    let mut samples = Vec::new();
    for _ in 0..runs {
        let file = std::fs::File::create(&out).expect("create query output");
        let mut c = command();
        c.stdout(file);
        let started = Instant::now();
        run_quiet_keeping_stdout(&mut c);
        samples.push(started.elapsed());
    }
    let mut reader = CaptureReader::open(&out).expect("open query output");
    let mut packets = 0;
    while let Some(frame) = reader.next_frame() {
        frame.expect("read query output");
        packets += 1;
    }
    (median(samples), packets)
}

/// The `hindsight` binary built next to this one (`cargo build --release`), if any.
fn hindsight_cli() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let cli = exe.parent()?.join("hindsight");
    cli.is_file().then_some(cli)
}

/// Returns the bytes of the files in `dir` and its subdirectories.
fn directory_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| match entry.metadata() {
            Ok(m) if m.is_dir() => directory_bytes(&entry.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

/// Returns (data column bytes, other columns bytes, total file bytes) over all segments.
fn num_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}
