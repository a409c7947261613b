//! Cluster benchmark (issue 22), in one run:
//!
//! - **Summary traffic per node**: lan-hour at its own rate, at 100x it and at
//!   110,000 packets/s (Hyperion's figure: 102 KB/s per leaf at that rate),
//!   made of copies of lan-hour with the last two bytes of every IPv4 address
//!   changed per copy, ingested with 60-second segments (`serve`'s seal), each
//!   segment summarised as a node does (`SegmentSummary::build` on the sealed
//!   file) and serialised as the node's uploads and syncs (one every 2 s):
//!   JSON bytes per second of stream (HTTP headers not counted).
//! - **Index-node lookup**: a rare address in a one-hour and a 30-day window
//!   over three nodes' month of 60-second summaries (p50, p99).
//! - **Federated rare address**: the same query through the API of one node
//!   holding all of lan-hour, and through the index node of three nodes each
//!   holding a third of it (`cluster=true`), alternating (medians, p99).
//!
//! `cargo build --release -p hindsight -p hindsight-bench && target/release/cluster_bench`

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;
use hindsight_cluster::ClusterConfig;
use hindsight_cluster::index::{ClusterIndex, SummaryUpload, SyncRequest};
use hindsight_cluster::summary::{Digest, SegmentSummary, id_ranges};
use hindsight_ingest::{IngestOptions, Ingestor};
use hindsight_model::{Addr16, Frame, LinkType};
use hindsight_store::Archive;

const NANOS: i64 = 1_000_000_000;
const TOKEN: &str = "cluster-bench-token-0123456789";

#[derive(Parser)]
struct Args {
    #[arg(long, default_value_os_t = std::env::temp_dir().join("hindsight-bench-cluster"))]
    work: PathBuf,
    #[arg(long, default_value_os_t = hindsight_bench::default_source())]
    source: PathBuf,
    #[arg(long, default_value_t = 51)]
    runs: usize,
}

type Frames = Vec<(i64, u32, Vec<u8>)>;

/// Archives `copies` copies of the frames of the first `minutes` of `base`,
/// each copy's hosts changed, in 60-second segments; returns the packets.
fn archive(
    dir: &Path,
    base: &Frames,
    copies: usize,
    minutes: i64,
    keep: &dyn Fn(usize) -> bool,
) -> u64 {
    let _ = std::fs::remove_dir_all(dir);
    let options = IngestOptions {
        partition_nanos: 60 * NANOS,
        ..IngestOptions::default()
    };
    let (mut ingestor, _) = Ingestor::open(dir, options).expect("create an archive");
    let first = base.first().map_or(0, |f| f.0);
    let mut packets = 0u64;
    for (index, (ts, wire_len, data)) in base.iter().enumerate() {
        if *ts - first >= minutes * 60 * NANOS || !keep(index) {
            continue;
        }
        let mut data = data.clone();
        let mut applied = 0usize;
        for copy in 0..copies {
            hindsight_bench::shift_hosts(&mut data, applied ^ copy);
            applied = copy;
            let frame = Frame {
                ts_nanos: *ts + copy as i64,
                wire_len: *wire_len,
                data: &data,
                link_type: LinkType::ETHERNET,
                iface: 0,
            };
            ingestor.push(&frame).expect("archive a frame");
            packets += 1;
        }
    }
    ingestor.finish().expect("seal the archive");
    packets
}

/// The summaries of every segment of the archive at `dir`.
fn summaries(dir: &Path) -> Vec<SegmentSummary> {
    let archive = Archive::open_reader(dir).expect("open the archive");
    archive
        .catalog()
        .entries()
        .map(|entry| SegmentSummary::build(dir, entry).expect("summarise a segment"))
        .collect()
}

/// Bytes per second a node sends for `summaries` over `seconds` of stream:
/// one upload per minute (its segments sealed in that minute) and one sync
/// every 2 s.
fn traffic(summaries: &[SegmentSummary], seconds: f64) -> (f64, usize) {
    let mut by_minute: BTreeMap<i64, Vec<SegmentSummary>> = BTreeMap::new();
    for summary in summaries {
        by_minute
            .entry(summary.max_ts.div_euclid(60 * NANOS))
            .or_default()
            .push(summary.clone());
    }
    let mut bytes = 0usize;
    for batch in by_minute.into_values() {
        let upload = SummaryUpload {
            node: "branch".to_owned(),
            summaries: batch,
        };
        bytes += serde_json::to_vec(&upload).expect("serialise").len();
    }
    let sync = SyncRequest {
        node: "branch".to_owned(),
        ids: id_ranges(summaries.iter().map(|s| s.id)),
        capturing: true,
        now_ns: 1_353_690_039_425_111_000,
        digest: Digest::of_summaries(summaries).to_hex(),
    };
    let syncs = (seconds / 2.0).ceil() as usize;
    bytes += syncs * serde_json::to_vec(&sync).expect("serialise").len();
    let distinct = summaries
        .iter()
        .map(|s| s.distinct_addresses as usize)
        .max()
        .unwrap_or(0);
    (bytes as f64 / seconds, distinct)
}

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    samples[((samples.len() as f64 * p) as usize).min(samples.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Node `name`'s own token.
fn node_token(name: &str) -> String {
    format!("{name}-node-token-0123456789")
}

fn cluster_toml(nodes: &[(&str, u16)], name: Option<&str>) -> String {
    let mut text = String::from("[cluster]\n");
    if let Some(name) = name {
        text.push_str(&format!(
            "name = \"{name}\"\nnode_token = \"{}\"\n",
            node_token(name)
        ));
    }
    text.push_str(&format!(
        "token = \"{TOKEN}\"\nindex = [\"a\"]\nsync_secs = 1\n"
    ));
    for (node, port) in nodes {
        text.push_str(&format!(
            "[[cluster.node]]\nname = \"{node}\"\nurl = \"http://127.0.0.1:{port}\"\ntoken_sha256 = \"{}\"\n",
            hindsight_cluster::config::token_sha256(&node_token(node))
        ));
    }
    text
}

/// `hindsight serve` on `port`; killed when dropped.
struct Server(Child);

impl Server {
    fn start(hindsight: &Path, archive: &Path, port: u16, config: Option<&Path>) -> Self {
        let mut command = Command::new(hindsight);
        command
            .args([
                "serve",
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--archive",
            ])
            .arg(archive);
        if let Some(config) = config {
            command.arg("--config").arg(config);
        }
        let mut child = command
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start hindsight serve");
        let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
        loop {
            let line = lines.next().expect("serve ended").expect("read stderr");
            if line.contains("listening on http://") {
                break;
            }
        }
        std::thread::spawn(move || lines.for_each(drop));
        Self(child)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// An address seen in few packets of `frames` (at least 2).
fn rare_address(frames: &Frames) -> Addr16 {
    let mut counts: BTreeMap<[u8; 4], usize> = BTreeMap::new();
    for (_, _, data) in frames {
        if data.len() >= 34 && data[12] == 0x08 && data[13] == 0x00 {
            for at in [26, 30] {
                *counts
                    .entry(data[at..at + 4].try_into().unwrap())
                    .or_default() += 1;
            }
        }
    }
    let (octets, _) = counts
        .into_iter()
        .filter(|&(_, n)| (2..=8).contains(&n))
        .min_by_key(|&(_, n)| n)
        .expect("a rare address");
    Addr16::from_v4_bytes(octets)
}

fn main() {
    let args = Args::parse();
    std::fs::create_dir_all(&args.work).expect("create the work directory");
    let hindsight = hindsight_bench::hindsight_binary();
    let base = hindsight_bench::read_frames(&args.source);
    let span = (base.last().unwrap().0 - base.first().unwrap().0) as f64 / 1e9;
    let rate = base.len() as f64 / span;
    println!("# hindsight cluster benchmark");
    println!(
        "source: {} ({} packets over {span:.0} s, {rate:.1} packets/s)",
        args.source.display(),
        base.len()
    );

    // Summary traffic per node.
    println!(
        "\n## summary traffic per node (60-second segments, packets and flows; JSON bodies, sync every 2 s)"
    );
    println!(
        "{:<28} {:>12} {:>10} {:>26} {:>14}",
        "stream", "packets/s", "segments", "most distinct addresses", "bytes/s"
    );
    let mut month: Vec<SegmentSummary> = Vec::new();
    for (copies, minutes) in [(1usize, 60i64), (100, 60), (6_320, 3)] {
        let dir = args.work.join(format!("traffic-{copies}"));
        let packets = archive(&dir, &base, copies, minutes, &|_| true);
        let seconds = (minutes * 60) as f64;
        let all = summaries(&dir);
        let (bytes_per_second, distinct) = traffic(&all, seconds);
        println!(
            "{:<28} {:>12.0} {:>10} {:>26} {:>14.0}",
            format!("lan-hour x{copies}, {minutes} min"),
            packets as f64 / seconds,
            all.len(),
            distinct,
            bytes_per_second
        );
        if copies == 1 {
            month = all;
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    println!(
        "Hyperion (section 7.5): 102 KB/s per leaf at about 110,000 packets/s; target here: under 10 KB/s"
    );

    // Index-node lookup: three nodes, a month of lan-hour's 60-second summaries each.
    let nodes: Vec<(&str, u16)> = vec![("a", 1), ("b", 2), ("c", 3)];
    let dir = args.work.join("cluster.toml");
    std::fs::write(&dir, cluster_toml(&nodes, None)).expect("write the cluster file");
    let config = ClusterConfig::load(&dir).expect("the cluster file");
    let index = ClusterIndex::new(&config, "a");
    let hours = 30 * 24;
    let mut total = 0usize;
    for (n, (node, _)) in nodes.iter().enumerate() {
        let mut id = 0u64;
        let mut upload = Vec::new();
        for hour in 0..hours {
            for summary in &month {
                let mut s = summary.clone();
                id += 1;
                s.id = id;
                // Each node and hour sees other hosts, as lan-hour's copies do.
                let shift = (hour * 3 + n as i64) * 3600 * NANOS;
                s.min_ts -= shift;
                s.max_ts -= shift;
                upload.push(s);
            }
        }
        total += upload.len();
        index
            .sync(
                node,
                &SyncRequest {
                    node: (*node).to_owned(),
                    ids: id_ranges(upload.iter().map(|s| s.id)),
                    capturing: false,
                    now_ns: 0,
                    digest: Digest::of_summaries(&upload).to_hex(),
                },
            )
            .expect("sync");
        index
            .add(
                node,
                SummaryUpload {
                    node: (*node).to_owned(),
                    summaries: upload,
                },
                0,
            )
            .expect("add");
    }
    let rare = rare_address(&base);
    let last = month.iter().map(|s| s.max_ts).max().unwrap_or(0);
    println!(
        "\n## index-node lookup ({total} summaries of 3 nodes, 30 days of 60-second segments each; rare address {rare})"
    );
    for (name, window) in [("one hour", 3600 * NANOS), ("30 days", 30 * 86_400 * NANOS)] {
        let mut samples = Vec::new();
        for _ in 0..args.runs.max(11) {
            let started = Instant::now();
            let route = index.route(&["packets"], last - window, last, Some(&[(rare, rare)]));
            samples.push(started.elapsed());
            std::hint::black_box(route);
        }
        let p50 = percentile(&mut samples, 0.5);
        let p99 = percentile(&mut samples, 0.99);
        println!(
            "{name:<10} p50 {:>8.3} ms  p99 {:>8.3} ms",
            ms(p50),
            ms(p99)
        );
    }

    // A rare address through one node holding all, and through three.
    let single = args.work.join("single");
    archive(&single, &base, 1, 60, &|_| true);
    let ports: Vec<u16> = (0..4).map(|_| free_port()).collect();
    let layout: Vec<(&str, u16)> = vec![("a", ports[0]), ("b", ports[1]), ("c", ports[2])];
    let mut servers = vec![Server::start(&hindsight, &single, ports[3], None)];
    let third = base.len().div_ceil(3);
    for (n, (name, port)) in layout.iter().enumerate() {
        let dir = args.work.join(format!("node-{name}"));
        archive(&dir, &base, 1, 60, &|i| i / third == n);
        let config = args.work.join(format!("{name}.toml"));
        std::fs::write(&config, cluster_toml(&layout, Some(name)))
            .expect("write a node's configuration");
        servers.push(Server::start(&hindsight, &dir, *port, Some(&config)));
    }
    let agent: ureq::Agent = ureq::Agent::config_builder().build().into();
    // One answer: its time, its bytes, and the nodes it asked.
    let get = |port: u16, cluster: bool| -> (Duration, usize, String) {
        let started = Instant::now();
        let mut response = agent
            .get(format!("http://127.0.0.1:{port}/api/v1/query"))
            .header("Authorization", format!("Bearer {TOKEN}"))
            .query("filter", format!("host {rare}"))
            .query("format", "pcap")
            .query("cluster", if cluster { "true" } else { "false" })
            .call()
            .expect("ask a node");
        let asked = response
            .headers()
            .get("hindsight-nodes")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let bytes = response
            .body_mut()
            .read_to_vec()
            .expect("read the answer")
            .len();
        (started.elapsed(), bytes, asked)
    };
    // Until the index holds every node's summaries.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let status = agent
            .get(format!(
                "http://127.0.0.1:{}/api/v1/cluster/status",
                ports[0]
            ))
            .header("Authorization", format!("Bearer {TOKEN}"))
            .call()
            .ok()
            .and_then(|mut r| r.body_mut().read_to_string().ok())
            .unwrap_or_default();
        if status.matches("\"health\":\"ok\"").count() == 3 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the index did not fill: {status}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // The node that holds the address, when one does: asked there, its own
    // share is read in process.
    let (_, _, asked) = get(ports[0], true);
    let holder = layout
        .iter()
        .find(|(name, _)| asked == *name)
        .map(|(name, port)| (*name, *port));
    let (mut one, mut three, mut at_holder) = (Vec::new(), Vec::new(), Vec::new());
    let (mut one_bytes, mut three_bytes) = (0, 0);
    for run in 0..args.runs + 5 {
        let (a, bytes_a, _) = get(ports[3], false);
        let (b, bytes_b, _) = get(ports[0], true);
        let c = holder.map(|(_, port)| get(port, true).0);
        if run >= 5 {
            one.push(a);
            three.push(b);
            at_holder.extend(c);
            one_bytes = bytes_a;
            three_bytes = bytes_b;
        }
    }
    let (p50_one, p50_three) = (percentile(&mut one, 0.5), percentile(&mut three, 0.5));
    println!(
        "\n## rare address {rare} through the API ({} runs each, alternating)",
        args.runs
    );
    println!(
        "one node, all of lan-hour        p50 {:>8.3} ms  p99 {:>8.3} ms  ({one_bytes} bytes of pcap)",
        ms(p50_one),
        ms(percentile(&mut one, 0.99))
    );
    println!(
        "three nodes, cluster=true        p50 {:>8.3} ms  p99 {:>8.3} ms  ({three_bytes} bytes of pcap)",
        ms(p50_three),
        ms(percentile(&mut three, 0.99))
    );
    println!(
        "ratio (three / one, medians): {:.2}x; target: within 2x (asked: {asked})",
        p50_three.as_secs_f64() / p50_one.as_secs_f64()
    );
    if let Some((name, _)) = holder {
        let p50 = percentile(&mut at_holder, 0.5);
        println!(
            "three nodes, cluster=true at {name}  p50 {:>8.3} ms  p99 {:>8.3} ms  ({:.2}x, the node holding it)",
            ms(p50),
            ms(percentile(&mut at_holder, 0.99)),
            p50.as_secs_f64() / p50_one.as_secs_f64()
        );
    }
    drop(servers);
}
