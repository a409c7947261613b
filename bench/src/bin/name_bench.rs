//! Name lookup benchmark (issue 24): connections named by a DNS query (exact,
//! and a domain with its subdomains), a TLS server name and a JA4 fingerprint,
//! from an archive of at least 50 M packets, side by side with `tshark -Y` over
//! the same pcap, in one run.
//!
//! The input is lan-hour-2012.pcap (DNS) with TLS and HTTP captures of nDPI's
//! tests merged into its hour (`--extra PCAP`, by default those of
//! `.fixtures/ndpi` listed in [`EXTRAS`]), replicated with timestamps shifted by
//! one hour and hosts changed per copy (so each copy's connections are new
//! ones, as over a month), ingested by the release `hindsight` binary. A name
//! recurs in every copy, so a lookup's answer grows with the copies; lookups
//! read one page of at most `--page` connections (1,000, the API's largest),
//! as `flows` and the API answer. Each is answered in process (archive and
//! indexes open once, as `serve`'s API answers), then as `hindsight flows`
//! processes. tshark 4.0 has no JA4; its JA3 filter over the same connections
//! stands for it. Run with
//! `cargo build --release -p hindsight -p hindsight-bench && target/release/name_bench [--packets N] [--lookups N] [--work DIR] [--no-tshark]`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;
use hindsight_bench::{
    FILE_PACKETS, Rng, hindsight_binary, median, percentile, read_frames, replicate_hosts,
    run_quiet,
};
use hindsight_query::filter::Filter;
use hindsight_reader::{ConnQuery, Reader};
use hindsight_store::TimeRange;

const NANOS: i64 = 1_000_000_000;

/// nDPI's captures merged into the source by default: TLS (SNI, JA3, JA4) and
/// HTTP from browsers and apps.
const EXTRAS: &[&str] = &[
    "443-firefox.pcap",
    "443-safari.pcap",
    "443-curl.pcap",
    "google_ssl.pcap",
    "facebook.pcap",
    "1kxun.pcap",
    "tls_verylong_certificate.pcap",
];

#[derive(Parser)]
struct Args {
    #[arg(long, default_value_t = 50_000_000)]
    packets: u64,
    #[arg(long, default_value_t = 200)]
    lookups: usize,
    #[arg(long, default_value_t = 1000)]
    page: usize,
    #[arg(long, default_value_os_t = std::env::temp_dir().join("hindsight-bench"))]
    work: PathBuf,
    #[arg(long, default_value_os_t = hindsight_bench::default_source())]
    source: PathBuf,
    /// More captures of applications (default: nDPI's, from scripts/fetch-fixtures).
    #[arg(long = "extra", value_name = "PCAP")]
    extras: Vec<PathBuf>,
    #[arg(long = "no-tshark", action = clap::ArgAction::SetFalse)]
    tshark: bool,
}

fn parse_args() -> Args {
    let mut args = Args::parse();
    if args.extras.is_empty() {
        let ndpi = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.fixtures/ndpi");
        args.extras = EXTRAS.iter().map(|name| ndpi.join(name)).collect();
        assert!(
            args.extras.iter().all(|p| p.exists()),
            "nDPI's captures are missing: run scripts/fetch-fixtures"
        );
    }
    args
}

/// The source's frames with each extra capture's moved into its hour (the
/// k-th starting k minutes after the source's first packet), in time order.
fn merged_frames(source: &Path, extras: &[PathBuf]) -> Vec<(i64, u32, Vec<u8>)> {
    let mut frames = read_frames(source);
    let start = frames.first().map_or(0, |f| f.0);
    for (k, extra) in extras.iter().enumerate() {
        let more = read_frames(extra);
        let first = more.first().map_or(0, |f| f.0);
        let at = start + (k as i64 + 1) * 60 * NANOS;
        frames.extend(
            more.into_iter()
                .map(|(ts, len, data)| (at + (ts - first), len, data)),
        );
    }
    frames.sort_by_key(|f| f.0);
    frames
}

/// A filter's string literal: quotes and backslashes escaped.
fn quoted(text: &str) -> String {
    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
}

/// A regular expression that matches `text` literally.
fn regex_literal(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// One kind of lookup: its filters (hindsight's and tshark's for the same
/// connections).
struct Kind {
    name: &'static str,
    lookups: Vec<(String, String)>,
}

fn main() {
    let args = parse_args();
    std::fs::create_dir_all(&args.work).expect("work directory");
    let frames = merged_frames(&args.source, &args.extras);
    let (pcaps, copies) = replicate_hosts(&frames, args.packets, &args.work, "names");
    let total = copies * frames.len() as u64;
    let archive = args.work.join(format!("names-archive-{}", args.packets));
    if !archive.join("HINDSIGHT").exists() {
        let _ = std::fs::remove_dir_all(&archive);
        let started = Instant::now();
        run_quiet(
            Command::new(hindsight_binary())
                .arg("ingest")
                .arg("--quiet")
                .arg("--archive")
                .arg(&archive)
                .args(&pcaps),
        );
        println!(
            "ingested {total} packets ({copies} copies of {} with {} nDPI captures merged) in {:.1} s",
            args.source.display(),
            args.extras.len(),
            started.elapsed().as_secs_f64()
        );
    }

    // The names to look up: those hindsight keeps (a connection's first DNS
    // query, its SNI, its JA4 and JA3 for tshark, which has no JA4), from its
    // flows table; every copy has the same.
    let queries = distinct(&archive, "dns_query");
    let snis = distinct(&archive, "tls_sni");
    let ja: Vec<(String, String)> = distinct(&archive, "ja4 || ';' || ja3")
        .iter()
        .filter_map(|pair| {
            let (ja4, ja3) = pair.split_once(';')?;
            Some((ja4.to_owned(), ja3.to_owned()))
        })
        .collect();
    let domains: BTreeSet<String> = queries
        .iter()
        .filter_map(|q| {
            let labels: Vec<&str> = q.split('.').collect();
            (labels.len() >= 3).then(|| labels[labels.len() - 2..].join("."))
        })
        .collect();
    assert!(
        !queries.is_empty() && !snis.is_empty() && !ja.is_empty(),
        "the source has no DNS names, SNIs or JA4s"
    );
    let kinds = [
        Kind {
            name: "dns.qry.name ==",
            lookups: queries
                .iter()
                .map(|q| {
                    let filter = format!("dns.qry.name == {}", quoted(q));
                    (filter.clone(), filter)
                })
                .collect(),
        },
        Kind {
            name: "dns.qry.name, a domain and its subdomains",
            lookups: domains
                .iter()
                .map(|d| {
                    let pattern = quoted(&format!("(^|\\.){}$", regex_literal(d)));
                    let filter = format!("dns.qry.name matches {pattern}");
                    (filter.clone(), filter)
                })
                .collect(),
        },
        Kind {
            name: "tls.handshake.extensions_server_name ==",
            lookups: snis
                .iter()
                .map(|s| {
                    let filter = format!("tls.handshake.extensions_server_name == {}", quoted(s));
                    (filter.clone(), filter)
                })
                .collect(),
        },
        Kind {
            name: "ja4 ==",
            lookups: ja
                .iter()
                .map(|(ja4, ja3)| {
                    (
                        format!("ja4 == {}", quoted(ja4)),
                        format!("tls.handshake.ja3 == {}", quoted(ja3)),
                    )
                })
                .collect(),
        },
    ];

    println!(
        "archive: {total} packets ({copies} copies); pages of at most {} connections; {} lookups per kind, picked at random among {} DNS names, {} domains, {} SNIs, {} JA4s",
        args.page,
        args.lookups,
        queries.len(),
        domains.len(),
        snis.len(),
        ja.len()
    );
    let reader = Reader::open(&archive).expect("open the archive");
    let snapshot = reader.snapshot().expect("a snapshot");
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut report = Vec::new();
    for kind in &kinds {
        let mut latencies = Vec::with_capacity(args.lookups);
        let mut sizes = Vec::with_capacity(args.lookups);
        for _ in 0..args.lookups {
            let (filter, _) = &kind.lookups[rng.below(kind.lookups.len() as u64) as usize];
            let started = Instant::now();
            let filter = Filter::parse(filter).expect("a filter");
            let query = ConnQuery {
                ranges: ConnQuery::ranges_of(None, Some(&filter)).expect("a lookup"),
                filter: Some(filter),
                time: TimeRange::ALL,
                limit: args.page,
                after: None,
                timeout: None,
            };
            let page = snapshot.connections(&query).expect("a lookup");
            latencies.push(started.elapsed());
            sizes.push(page.entries.len());
        }
        assert!(
            sizes.iter().all(|&n| n > 0),
            "a {} lookup found nothing",
            kind.name
        );
        sizes.sort_unstable();
        let (p50, p99, max) = (
            percentile(latencies.clone(), 0.5),
            percentile(latencies.clone(), 0.99),
            percentile(latencies, 1.0),
        );
        println!(
            "{}: in process p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms (connections per page: median {}, max {})",
            kind.name,
            ms(p50),
            ms(p99),
            ms(max),
            sizes[sizes.len() / 2],
            sizes[sizes.len() - 1]
        );
        // As a process, as a user at the command line runs it.
        let mut process = Vec::new();
        let mut first_count = 0;
        for (i, (filter, _)) in kind.lookups.iter().cycle().take(11).enumerate() {
            let started = Instant::now();
            let output = Command::new(hindsight_binary())
                .args(["flows", "--format", "csv", "--limit"])
                .arg(args.page.to_string())
                .arg("--archive")
                .arg(&archive)
                .arg(filter)
                .stderr(Stdio::null())
                .output()
                .expect("run hindsight flows");
            assert!(output.status.success(), "hindsight flows {filter}");
            process.push(started.elapsed());
            if i == 0 {
                first_count = String::from_utf8_lossy(&output.stdout).lines().count() - 1;
            }
        }
        let process = median(process);
        println!(
            "{}: hindsight flows process median {:.1} ms (11 lookups)",
            kind.name,
            ms(process)
        );
        report.push((kind, p99, process, first_count));
    }
    if !args.tshark {
        return;
    }
    for (kind, p99, process, count) in report {
        let (filter, tshark_filter) = &kind.lookups[0];
        let started = Instant::now();
        let mut packets = 0u64;
        for pcap in &pcaps {
            let output = Command::new("tshark")
                .args(["-n", "-r"])
                .arg(pcap)
                .args(["-Y", tshark_filter, "-T", "fields", "-e", "frame.number"])
                .stderr(Stdio::null())
                .output()
                .expect("run tshark");
            assert!(
                output.status.success(),
                "tshark failed on {}",
                pcap.display()
            );
            packets += String::from_utf8_lossy(&output.stdout).lines().count() as u64;
        }
        let tshark = started.elapsed();
        assert!(packets > 0, "tshark found no packet for {tshark_filter}");
        println!(
            "{}: tshark -Y '{tshark_filter}' over the pcap ({} files of at most {FILE_PACKETS} packets, one after the other): {:.1} s, {packets} packets; hindsight (`{filter}`: {count} connections in its first page) p99 is {:.0}x faster, its process {:.0}x",
            kind.name,
            pcaps.len(),
            tshark.as_secs_f64(),
            tshark.as_secs_f64() / p99.as_secs_f64(),
            tshark.as_secs_f64() / process.as_secs_f64()
        );
    }
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

/// The distinct values of an expression over the archive's `flows` (not null,
/// without a comma or a line break, which CSV would quote).
fn distinct(archive: &Path, expression: &str) -> Vec<String> {
    let sql = format!(
        "SELECT DISTINCT {expression} AS v FROM flows WHERE {expression} IS NOT NULL ORDER BY 1"
    );
    let output = Command::new(hindsight_binary())
        .args(["sql", &sql, "--format", "csv", "--archive"])
        .arg(archive)
        .stderr(Stdio::inherit())
        .output()
        .expect("run hindsight sql");
    assert!(output.status.success(), "hindsight sql {sql}");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .skip(1)
        .filter(|v| !v.is_empty() && !v.starts_with('"'))
        .map(str::to_owned)
        .collect()
}
