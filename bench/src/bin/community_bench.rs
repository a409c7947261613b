//! Community ID lookup benchmark (issue 23): packets of one connection, named by
//! its Community ID, from an archive of at least 50 M packets, side by side with
//! `tshark -Y 'communityid == "..."'` over the same pcap, in one run.
//!
//! The input is lan-hour-2012.pcap replicated with timestamps shifted by one hour
//! and hosts changed per copy (so every copy's connections are new ones, as in a
//! month of traffic), ingested by the release `hindsight` binary. The lookups are
//! connections picked at random among the copies: each answered in process, as
//! `serve`'s API answers (archive and indexes open once), and as a `hindsight
//! query` process. Run with
//! `cargo build --release -p hindsight && cargo run --release -p hindsight-bench --bin community_bench -- [--packets N] [--lookups N] [--work DIR]`.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;

use clap::Parser;
use hindsight_bench::{
    FILE_PACKETS, Rng, hindsight_binary, median, percentile, read_frames, replicate_hosts,
    run_quiet, shift_hosts,
};
use hindsight_model::LinkType;
use hindsight_model::community::community_id_text;
use hindsight_query::filter::Filter;
use hindsight_query::search::{PacketSearch, SearchRequest};
use hindsight_store::TimeRange;

#[derive(Parser)]
struct Args {
    #[arg(long, default_value_t = 50_000_000)]
    packets: u64,
    #[arg(long, default_value_t = 200)]
    lookups: usize,
    #[arg(long, default_value_os_t = std::env::temp_dir().join("hindsight-bench"))]
    work: PathBuf,
    #[arg(long, default_value_os_t = hindsight_bench::default_source())]
    source: PathBuf,
    #[arg(long = "no-tshark", action = clap::ArgAction::SetFalse)]
    tshark: bool,
}

fn main() {
    let args = Args::parse();
    std::fs::create_dir_all(&args.work).expect("work directory");
    let frames = read_frames(&args.source);
    let (pcaps, copies) = replicate_hosts(&frames, args.packets, &args.work, "hosts");
    let total = copies * frames.len() as u64;
    let archive = args
        .work
        .join(format!("community-archive-{}", args.packets));
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
            "ingested {total} packets ({copies} copies of {}) in {:.1} s",
            args.source.display(),
            started.elapsed().as_secs_f64()
        );
    }
    // Connections picked at random: a TCP or UDP packet of a random copy, its
    // hosts changed as that copy's were.
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut lookups = Vec::new();
    while lookups.len() < args.lookups {
        let (_, _, frame) = &frames[rng.below(frames.len() as u64) as usize];
        let copy = rng.below(copies);
        let mut data = frame.clone();
        shift_hosts(&mut data, copy as usize);
        let headers = hindsight_decode::decode(LinkType::ETHERNET, &data);
        if !matches!(headers.ip_proto, Some(6 | 17)) || headers.src_port.is_none() {
            continue;
        }
        let Some(hash) = headers.community_id_hash(0) else {
            continue;
        };
        lookups.push(community_id_text(&hash));
    }
    let search = PacketSearch::open(&archive).expect("open the archive");
    let mut latencies = Vec::with_capacity(lookups.len());
    let mut matched = Vec::with_capacity(lookups.len());
    for id in &lookups {
        let request = SearchRequest {
            filter: Filter::parse(&format!("community_id == \"{id}\"")).expect("a filter"),
            time: TimeRange::ALL,
            limit: None,
            with_data: true,
            capture_only: true,
        };
        let started = Instant::now();
        let plan = search.plan(&request).expect("plan");
        let mut packets = 0u64;
        search
            .execute(&request, &plan, &mut |_, _| {
                packets += 1;
                Ok(true)
            })
            .expect("execute");
        latencies.push(started.elapsed());
        matched.push(packets);
    }
    assert!(matched.iter().all(|&n| n > 0), "a lookup found no packets");
    let p50 = percentile(latencies.clone(), 0.5);
    let p99 = percentile(latencies.clone(), 0.99);
    let max = percentile(latencies, 1.0);
    let mut sorted = matched.clone();
    sorted.sort_unstable();
    println!(
        "archive: {total} packets; {} Community ID lookups (packets per answer: median {}, max {})",
        lookups.len(),
        sorted[sorted.len() / 2],
        sorted[sorted.len() - 1]
    );
    println!(
        "hindsight in process: p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
        p50.as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3,
        max.as_secs_f64() * 1e3
    );
    // As a process, as a user at the command line runs it.
    let mut process = Vec::new();
    for id in lookups.iter().take(11) {
        let started = Instant::now();
        let output = Command::new(hindsight_binary())
            .args(["query", "--count", "--archive"])
            .arg(&archive)
            .arg(format!("community_id == \"{id}\""))
            .stderr(Stdio::inherit())
            .output()
            .expect("run hindsight query");
        assert!(output.status.success());
        process.push(started.elapsed());
    }
    let process = median(process);
    println!(
        "hindsight query process: median {:.1} ms (11 lookups)",
        process.as_secs_f64() * 1e3
    );
    if args.tshark {
        let id = &lookups[0];
        let started = Instant::now();
        let mut found = 0u64;
        for pcap in &pcaps {
            let output = Command::new("tshark")
                .args(["-n", "--enable-protocol", "communityid", "-r"])
                .arg(pcap)
                .args([
                    "-Y",
                    &format!("communityid == \"{id}\""),
                    "-T",
                    "fields",
                    "-e",
                    "frame.number",
                ])
                .stderr(Stdio::null())
                .output()
                .expect("run tshark");
            assert!(
                output.status.success(),
                "tshark failed on {}",
                pcap.display()
            );
            found += String::from_utf8_lossy(&output.stdout).lines().count() as u64;
        }
        let tshark = started.elapsed();
        assert_eq!(found, matched[0], "tshark and hindsight disagree on {id}");
        println!(
            "tshark -Y over the pcap ({} files of at most {FILE_PACKETS} packets, one after the other): {:.1} s ({found} packets, as hindsight); hindsight p99 is {:.0}x faster, its process {:.0}x",
            pcaps.len(),
            tshark.as_secs_f64(),
            tshark.as_secs_f64() / p99.as_secs_f64(),
            tshark.as_secs_f64() / process.as_secs_f64()
        );
    }
}
