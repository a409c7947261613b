//! Growth benchmark (issue 25): how each cost grows with the archive. One
//! archive is grown to each of `--sizes` packets in turn (lan-hour copied
//! with its timestamps shifted one hour per copy, as `archive_bench` does,
//! streamed into `hindsight ingest -` so the input never lands on disk), and
//! at each size it prints:
//! - the ingest rate of the step and the peak RSS of its `ingest` (one
//!   input stream of up to hundreds of millions of packets);
//! - for answers of a fixed size, the same at every size, as `hindsight`
//!   processes: a rare address in a one-hour window, a connection lookup of
//!   the busiest address in that hour, a one-minute window, and the top 10
//!   sources by bytes over one day (SQL);
//! - the whole-archive rare address (its answer grows with the copies);
//! - `hindsight stats` (opening the archive and its catalog);
//! - each command's peak RSS (`/usr/bin/time -f %M`), segments, and bytes
//!   per packet on disk.
//!
//! The latencies are medians of `--runs` runs of the process, start-up
//! included (about 5 ms). They are timed once every size is built (a copy of
//! the archive kept at each size), after `sync`, every size's queries in
//! turns run by run, so that the sizes compare in the same machine state. Run with
//! `cargo build --release -p hindsight -p hindsight-bench && target/release/growth_bench [--sizes 5000000,50000000,500000000] [--runs N] [--work DIR]`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;
use hindsight_bench::{HOUR, median, read_frames};
use hindsight_output::time::format_nanos;

const NANOS: i64 = 1_000_000_000;

#[derive(Parser)]
struct Args {
    #[arg(long, value_delimiter = ',', default_values_t = [5_000_000, 50_000_000, 500_000_000])]
    sizes: Vec<u64>,
    #[arg(long, default_value_t = 5, value_parser = hindsight_bench::count_from(1))]
    runs: usize,
    #[arg(long, default_value_os_t = std::env::temp_dir().join("hindsight-bench"))]
    work: PathBuf,
}

/// A command's wall time and peak RSS (KiB), run under `/usr/bin/time`.
fn measured(hindsight: &Path, args: &[String]) -> (Duration, u64) {
    let started = Instant::now();
    let output = Command::new("/usr/bin/time")
        .args(["-f", "%M"])
        .arg(hindsight)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .output()
        .expect("run /usr/bin/time (Debian's `time` package)");
    let elapsed = started.elapsed();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "hindsight {args:?} failed: {stderr}"
    );
    (elapsed, hindsight_bench::peak_kib(&stderr))
}

fn segments(hindsight: &Path, archive: &Path) -> u64 {
    hindsight_bench::archive_stats(hindsight, archive)["segments"]
        .as_u64()
        .unwrap_or(0)
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn main() {
    let mut args = Args::parse();
    args.sizes.sort_unstable();
    std::fs::create_dir_all(&args.work).expect("create work dir");
    let hindsight = hindsight_bench::hindsight_binary();
    let frames = read_frames(&hindsight_bench::default_source());
    let per_copy = frames.len() as u64;
    let first = frames.first().map_or(0, |f| f.0);
    let archive = args.work.join("growth-archive");
    for entry in std::fs::read_dir(&args.work)
        .expect("list the work dir")
        .flatten()
    {
        let name = entry.file_name();
        if name.to_string_lossy().starts_with("growth-archive") {
            std::fs::remove_dir_all(entry.path()).expect("remove the last run's archive");
        }
    }
    let epoch = hindsight_bench::epoch_arg;
    // The fixed windows lie in the second copy: the same rows at every size.
    let hour = (first + HOUR, first + 2 * HOUR);
    let minute = (
        first + HOUR + 30 * 60 * NANOS,
        first + HOUR + 31 * 60 * NANOS,
    );
    let day = (first, first + 24 * HOUR);
    let window = |(since, until): (i64, i64)| {
        vec![
            "--since".to_owned(),
            epoch(since),
            "--until".to_owned(),
            epoch(until),
        ]
    };
    let with = |head: &[&str], tail: Vec<String>| {
        head.iter()
            .map(|s| (*s).to_owned())
            .chain(tail)
            .collect::<Vec<String>>()
    };
    let queries_of = |path: &str| -> Vec<(&str, Vec<String>)> {
        vec![
            (
                "rare address, one hour (3 packets)",
                with(
                    &["query", "--archive", path, "-F", "pcap", "-o", "/dev/null"],
                    [window(hour), vec!["host 172.30.100.1".to_owned()]].concat(),
                ),
            ),
            (
                "connection lookup, one hour (10.174.200.10)",
                with(
                    &[
                        "flows",
                        "--archive",
                        path,
                        "--ip",
                        "10.174.200.10",
                        "-F",
                        "jsonl",
                    ],
                    window(hour),
                ),
            ),
            (
                "one-minute window (1,047 packets)",
                with(
                    &["query", "--archive", path, "-F", "pcap", "-o", "/dev/null"],
                    window(minute),
                ),
            ),
            (
                "top 10 sources by bytes, one day",
                vec![
                    "sql".to_owned(),
                    "--archive".to_owned(),
                    path.to_owned(),
                    format!(
                        "SELECT src_addr, sum(wire_len) AS bytes FROM packets \
                     WHERE ts >= '{}' AND ts < '{}' GROUP BY src_addr ORDER BY bytes DESC LIMIT 10",
                        format_nanos(day.0),
                        format_nanos(day.1)
                    ),
                ],
            ),
            (
                "rare address, whole archive (3 a copy)",
                with(
                    &["query", "--archive", path, "-F", "pcap", "-o", "/dev/null"],
                    vec!["host 172.30.100.1".to_owned()],
                ),
            ),
            (
                "stats (open the archive and its catalog)",
                with(&["stats", "--archive", path], Vec::new()),
            ),
        ]
    };

    println!(
        "# growth_bench: lan-hour ({per_copy} packets) copied an hour apart; medians of {} process runs\n",
        args.runs
    );
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut header = vec![
        "packets".to_owned(),
        "segments".to_owned(),
        "bytes/packet".to_owned(),
        "ingest packets/s (step)".to_owned(),
        "ingest peak RSS MiB".to_owned(),
    ];
    for (name, _) in queries_of("") {
        header.push(format!("{name} ms (RSS MiB)"));
    }
    let mut copies = 0u64;
    // Each size's archive: a copy of the growing one for every size but the
    // last, so that every size's queries are timed at the end, in turns.
    let mut archives: Vec<PathBuf> = Vec::new();
    for (step, &size) in args.sizes.iter().enumerate() {
        let target = size.div_ceil(per_copy);
        let (elapsed, ingest_rss) =
            hindsight_bench::stream_copies(&hindsight, &archive, &frames, copies, target);
        let added = (target - copies) * per_copy;
        copies = target;
        let packets = copies * per_copy;
        rows.push(vec![
            packets.to_string(),
            segments(&hindsight, &archive).to_string(),
            format!(
                "{:.1}",
                hindsight_bench::disk_bytes(&archive) as f64 / packets as f64
            ),
            format!("{:.0}", added as f64 / elapsed.as_secs_f64()),
            format!("{:.0}", mib(ingest_rss)),
        ]);
        if step + 1 < args.sizes.len() {
            let copy = args.work.join(format!("growth-archive-{packets}"));
            let copied = Command::new("cp")
                .arg("-a")
                .arg(&archive)
                .arg(&copy)
                .status();
            assert!(
                copied.is_ok_and(|status| status.success()),
                "copy the archive"
            );
            archives.push(copy);
        } else {
            archives.push(archive.clone());
        }
        eprintln!("growth_bench: {packets} packets ingested");
    }
    // The dirty pages written back before the queries are timed: right after
    // 450 M packets the kernel's writeback of some 13 GB ran beside them (a
    // rare address took 26.6 ms there, 17.4 ms idle).
    let synced = Command::new("sync").status();
    assert!(synced.is_ok_and(|status| status.success()), "sync");
    // Every size's queries in turns, run by run: the machine's state (its
    // page cache, what the host lends it) drifts over the tens of minutes a
    // large archive takes to build, and the same query on the same archive
    // measured 1.5x apart from one hour to the next, so only sizes timed
    // side by side compare.
    let queries: Vec<Vec<(&str, Vec<String>)>> = archives
        .iter()
        .map(|path| queries_of(&path.to_string_lossy()))
        .collect();
    // A first run of each, untimed: the page cache holds what a recorder's
    // recent queries hold.
    for query in queries.iter().flatten() {
        measured(&hindsight, &query.1);
    }
    let mut samples = vec![vec![Vec::new(); queries[0].len()]; archives.len()];
    let mut peaks = vec![vec![0u64; queries[0].len()]; archives.len()];
    for _ in 0..args.runs {
        for (size, of_size) in queries.iter().enumerate() {
            for (index, (_, query)) in of_size.iter().enumerate() {
                let (elapsed, peak) = measured(&hindsight, query);
                samples[size][index].push(elapsed);
                peaks[size][index] = peaks[size][index].max(peak);
            }
        }
    }
    for (size, row) in rows.iter_mut().enumerate() {
        for (index, times) in samples[size].iter().enumerate() {
            let time = median(times.clone());
            row.push(format!("{:.1} ({:.0})", ms(time), mib(peaks[size][index])));
        }
    }
    let queries = &queries[0];
    // One row per measure, one column per size: easier to read across sizes.
    print!("| measure |");
    for row in &rows {
        print!(" {} packets |", row[0]);
    }
    println!();
    print!("|---|");
    for _ in &rows {
        print!("---:|");
    }
    println!();
    for (index, name) in header.iter().enumerate().skip(1) {
        print!("| {name} |");
        for row in &rows {
            print!(" {} |", row[index]);
        }
        println!();
    }
    if let (Some(small), Some(large)) = (rows.first(), rows.last()) {
        println!("\nFixed-size answers, largest against smallest archive:");
        for (offset, (name, _)) in queries.iter().enumerate().take(4) {
            let value = |row: &Vec<String>| {
                row[5 + offset]
                    .split_whitespace()
                    .next()
                    .and_then(|v| v.parse::<f64>().ok())
                    .unwrap_or(f64::NAN)
            };
            println!("- {name}: {:.2}×", value(large) / value(small));
        }
    }
}
