//! Connection-index benchmark (issue 3), side by side in one run:
//! - insert rate of the Diventi index (events/s) without and with count-based
//!   expiration running (cutoff updates and full compactions on their clocks);
//! - query latency by result-size bucket (0, 1–1k, 1k–10k, 10k-100k, >100k
//!   connections) for 1000 present and 100 absent addresses, against DuckDB and
//!   PostgreSQL (inet + GiST) holding the same entries (`bench/index_peers.py`,
//!   run if `python3` can import duckdb and psycopg and a PostgreSQL cluster runs;
//!   `bench/index-peers-setup.sh` installs them).
//!
//! The connections are real: the flow table's records of lan-hour-2012.pcap,
//! replicated (one hour later per copy) with the addresses outside the busiest few
//! renamed per copy, so that there are many rare addresses, some frequent and a
//! few very busy, as in a network over weeks. Run with
//! `cargo run --release -p hindsight-bench --bin index_bench -- [--copies N] [--runs N]`.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hindsight_bench::median;
use hindsight_capture::CaptureReader;
use hindsight_flow::{FlowTable, FlowTableConfig};
use hindsight_index::{ConnScan, ConnectionIndex, Expiry, Maintenance};
use hindsight_model::{Addr16, FlowRecord};

const HOUR_NS: i64 = 3_600_000_000_000;
/// Addresses kept in every copy (the busiest of the capture).
const KEPT: usize = 12;

struct Args {
    copies: usize,
    runs: usize,
    work: PathBuf,
    source: PathBuf,
    /// Only the insert figures, no queries and no peers.
    insert_only: bool,
    /// Expiration schedule of the insert run with expiration.
    cutoff_interval: Duration,
    compaction_interval: Duration,
}

fn parse_args() -> Args {
    let mut args = Args {
        copies: 400,
        runs: 3,
        work: std::env::temp_dir().join("hindsight-index-bench"),
        source: hindsight_bench::default_source(),
        insert_only: false,
        cutoff_interval: Duration::from_millis(500),
        compaction_interval: Duration::from_secs(2),
    };
    let mut flags = hindsight_bench::Flags::new(
        "index_bench",
        "[--copies N] [--runs N] [--work DIR] [--source PCAP] [--insert-only] [--cutoff-ms N] [--compaction-ms N]",
    );
    while let Some(flag) = flags.next_flag() {
        match flag.as_str() {
            "--insert-only" => args.insert_only = true,
            "--copies" => args.copies = flags.value(&flag),
            "--runs" => args.runs = flags.value(&flag),
            "--work" => args.work = flags.value(&flag),
            "--source" => args.source = flags.value(&flag),
            "--cutoff-ms" => args.cutoff_interval = Duration::from_millis(flags.value(&flag)),
            "--compaction-ms" => {
                args.compaction_interval = Duration::from_millis(flags.value(&flag));
            }
            other => flags.unknown(other),
        }
    }
    args
}

/// The flow records of the capture.
fn capture_flows(source: &Path) -> Vec<FlowRecord> {
    let mut reader = CaptureReader::open(source).expect("open the capture");
    let mut table = FlowTable::new(FlowTableConfig::default());
    let mut out = Vec::new();
    while let Some(frame) = reader.next_frame() {
        let frame = frame.expect("read the capture");
        let headers = hindsight_decode::decode(frame.link_type, frame.data);
        table.push(frame.ts_nanos, &headers, frame.wire_len, &mut out);
    }
    table.flush(&mut out);
    out
}

/// Replicates `flows` `copies` times, one hour later each, renaming every address
/// but the `KEPT` busiest into 10.128.0.0/9 (the next `KEPT` every 40 copies, the
/// others in every copy).
fn replicate(flows: &[FlowRecord], copies: usize) -> Vec<FlowRecord> {
    let mut counts: HashMap<Addr16, usize> = HashMap::new();
    for r in flows {
        *counts.entry(r.src).or_default() += 1;
        *counts.entry(r.dst).or_default() += 1;
    }
    let mut by_count: Vec<(usize, Addr16)> = counts.iter().map(|(a, c)| (*c, *a)).collect();
    by_count.sort_unstable_by(|a, b| b.cmp(a));
    let kept: Vec<Addr16> = by_count.iter().take(KEPT).map(|(_, a)| *a).collect();
    let others: HashMap<Addr16, u32> = by_count
        .iter()
        .skip(KEPT)
        .enumerate()
        .map(|(i, (_, a))| (*a, i as u32))
        .collect();
    let rename = |address: Addr16, copy: usize| {
        if kept.contains(&address) {
            return address;
        }
        let rank = others.get(&address).copied().unwrap_or(63);
        // The next busiest keep their name for 40 copies at a time (thousands
        // of connections each), the rest are renamed in every copy.
        let epoch = if rank < KEPT as u32 { copy / 40 } else { copy };
        let n = (epoch as u32) * 64 + rank % 64;
        Addr16::from_v4_bytes([10, 128 | (n >> 16) as u8, (n >> 8) as u8, n as u8])
    };
    let mut out = Vec::with_capacity(flows.len() * copies);
    for copy in 0..copies {
        let shift = copy as i64 * HOUR_NS;
        for r in flows {
            let mut r = r.clone();
            r.first_ns += shift;
            r.last_ns += shift;
            r.src = rename(r.src, copy);
            r.dst = rename(r.dst, copy);
            out.push(r);
        }
    }
    out
}

/// Inserts `records` as ingest does: staged in batches, committed every
/// `STAGED_MAX_BYTES` of staged entries and at the end; returns the wall time.
fn insert_all(dir: &Path, records: &[FlowRecord], expiry: Expiry) -> (Duration, u64) {
    let _ = std::fs::remove_dir_all(dir);
    let index = Arc::new(ConnectionIndex::open(dir, expiry).expect("open the index"));
    let maintenance = (expiry.keep_events > 0)
        .then(|| Maintenance::start(Arc::clone(&index), |e| panic!("expiration: {e}")));
    let started = Instant::now();
    for batch in records.chunks(4096) {
        index.stage(batch);
        if index.staged_bytes() >= hindsight_ingest::STAGED_MAX_BYTES {
            index.commit(None).expect("commit");
        }
    }
    index.commit(None).expect("commit");
    index.flush().expect("flush");
    let elapsed = started.elapsed();
    drop(maintenance);
    let (entries, _) = index.count().expect("count");
    (elapsed, entries)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(at).copied().unwrap_or_default()
}

fn bucket(n: u64) -> &'static str {
    match n {
        0 => "0",
        1..=999 => "1-1k",
        1_000..=9_999 => "1k-10k",
        10_000..=100_000 => "10k-100k",
        _ => ">100k",
    }
}

const BUCKETS: [&str; 5] = ["0", "1-1k", "1k-10k", "10k-100k", ">100k"];

fn main() {
    let args = parse_args();
    std::fs::create_dir_all(&args.work).expect("create the work directory");
    let flows = capture_flows(&args.source);
    let records = replicate(&flows, args.copies);
    let events = records.len() as u64;
    println!("# hindsight connection-index benchmark");
    println!(
        "{} connections of {} ({} copies of its {} records), {} index entries (two per connection)\n",
        events,
        args.source.display(),
        args.copies,
        flows.len(),
        2 * events
    );

    // --- insert, without and with expiration, alternating runs ---
    let span_s = (args.copies as f64) * 3600.0;
    let expiry = Expiry {
        keep_events: events / 2,
        histogram_granularity: Duration::from_secs(60),
        cutoff_interval: args.cutoff_interval,
        compaction_interval: args.compaction_interval,
    };
    let (mut plain, mut expiring) = (Vec::new(), Vec::new());
    let mut kept_entries = 0;
    for _ in 0..args.runs {
        plain.push(insert_all(&args.work.join("plain"), &records, Expiry::OFF).0);
        let (elapsed, entries) = insert_all(&args.work.join("expiring"), &records, expiry);
        expiring.push(elapsed);
        kept_entries = entries;
    }
    let (plain, expiring) = (median(plain), median(expiring));
    let rate = |d: Duration| events as f64 / d.as_secs_f64();
    println!("## insert (connections/s; each is two index entries)");
    println!("| index | wall s | connections/s | note |");
    println!("|---|---:|---:|---|");
    println!(
        "| hindsight, no expiration | {:.3} | {:.0} | |",
        plain.as_secs_f64(),
        rate(plain)
    );
    println!(
        "| hindsight, expiration (N = {}, cutoff every {:?}, full compaction every {:?}) | {:.3} | {:.0} | {} entries left of {} |",
        expiry.keep_events,
        expiry.cutoff_interval,
        expiry.compaction_interval,
        expiring.as_secs_f64(),
        rate(expiring),
        kept_entries,
        2 * events
    );
    println!(
        "expiration overhead: {:+.1}% (target ≤ 5%); event time spans {:.0} h\n",
        (expiring.as_secs_f64() / plain.as_secs_f64() - 1.0) * 100.0,
        span_s / 3600.0
    );

    if args.insert_only {
        return;
    }

    // --- queries ---
    let index = ConnectionIndex::open(&args.work.join("plain"), Expiry::OFF).expect("reopen");
    let mut per_address: BTreeMap<Addr16, u64> = BTreeMap::new();
    for r in &records {
        *per_address.entry(r.src).or_default() += 1;
        *per_address.entry(r.dst).or_default() += 1;
    }
    let mut by_bucket: BTreeMap<&str, Vec<Addr16>> = BTreeMap::new();
    for (address, n) in &per_address {
        by_bucket.entry(bucket(*n)).or_default().push(*address);
    }
    // 1000 present addresses: every bucket's share, at least what it has, the
    // rare bucket the rest; 100 absent ones from 192.0.2.0/24.
    let mut queries: Vec<Addr16> = Vec::new();
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for name in ["1k-10k", "10k-100k", ">100k"] {
        let addresses = by_bucket.get(name).cloned().unwrap_or_default();
        queries.extend(addresses.iter().take(100));
    }
    let rare = by_bucket.get("1-1k").cloned().unwrap_or_default();
    while queries.len() < 1000 && !rare.is_empty() {
        queries.push(rare[(next() % rare.len() as u64) as usize]);
    }
    for i in 0..100u8 {
        queries.push(Addr16::from_v4_bytes([192, 0, 2, i]));
    }
    let mut lines = String::new();
    let mut ours: BTreeMap<&str, Vec<Duration>> = BTreeMap::new();
    for address in &queries {
        let scan = ConnScan {
            low: *address,
            high: *address,
            start_ns: i64::MIN,
            end_ns: i64::MAX,
        };
        let started = Instant::now();
        let mut found = 0u64;
        let mut after: Option<Vec<u8>> = None;
        loop {
            let page = index.scan(&scan, after.as_deref(), 10_000).expect("scan");
            found += page.entries.len() as u64;
            match page.next {
                Some(key) => after = Some(key),
                None => break,
            }
        }
        let elapsed = started.elapsed();
        let expected = per_address.get(address).copied().unwrap_or(0);
        assert_eq!(found, expected, "{address}");
        ours.entry(bucket(found)).or_default().push(elapsed);
        lines.push_str(&format!("{address},{found}\n"));
    }
    let queries_path = args.work.join("queries.csv");
    std::fs::write(&queries_path, lines).expect("write the queries");

    // --- the same entries in DuckDB and PostgreSQL ---
    let entries_path = args.work.join("entries.csv");
    let mut csv = String::with_capacity(records.len() * 2 * 80);
    for r in &records {
        for (addr, peer, port, peer_port, reverse) in [
            (r.src, r.dst, r.src_port, r.dst_port, 0),
            (r.dst, r.src, r.dst_port, r.src_port, 1),
        ] {
            csv.push_str(&format!(
                "{addr},{},{peer},{port},{peer_port},{},{reverse},{},{}\n",
                r.first_ns, r.proto, r.bytes_out, r.packets_out
            ));
        }
    }
    std::fs::write(&entries_path, csv).expect("write the entries");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("index_peers.py");
    let peers = Command::new("python3")
        .arg(&script)
        .arg(&entries_path)
        .arg(&queries_path)
        .output();
    let mut theirs: BTreeMap<(String, String), Vec<Duration>> = BTreeMap::new();
    let mut peer_notes = Vec::new();
    match peers {
        Ok(output) if output.status.success() => {
            for line in String::from_utf8_lossy(&output.stdout).lines() {
                // peer,address,found,microseconds | note,peer,text
                let fields: Vec<&str> = line.splitn(4, ',').collect();
                if fields[0] == "note" {
                    peer_notes.push(line.to_owned());
                    continue;
                }
                if fields.len() == 4 {
                    let found: u64 = fields[2].parse().unwrap_or(0);
                    let us: f64 = fields[3].parse().unwrap_or(0.0);
                    theirs
                        .entry((fields[0].to_owned(), bucket(found).to_owned()))
                        .or_default()
                        .push(Duration::from_secs_f64(us / 1e6));
                }
            }
        }
        Ok(output) => peer_notes.push(format!(
            "note,peers,not run: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        )),
        Err(error) => peer_notes.push(format!("note,peers,not run: {error}")),
    }
    println!("## query latency by result size (all connections of one address, all time)");
    println!(
        "| bucket | queries | hindsight p50 ms | p99 ms | DuckDB p50 | p99 | PostgreSQL p50 | p99 | speed-up p99 vs DuckDB | vs PostgreSQL |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for name in BUCKETS {
        let Some(mut samples) = ours.get(name).cloned() else {
            continue;
        };
        samples.sort();
        let (p50, p99) = (percentile(&samples, 0.5), percentile(&samples, 0.99));
        let mut row = format!(
            "| {name} | {} | {:.3} | {:.3} |",
            samples.len(),
            ms(p50),
            ms(p99)
        );
        let mut ratios = String::new();
        for peer in ["duckdb", "postgres"] {
            match theirs.get(&(peer.to_owned(), name.to_owned())) {
                Some(their) => {
                    let mut their = their.clone();
                    their.sort();
                    let (t50, t99) = (percentile(&their, 0.5), percentile(&their, 0.99));
                    row.push_str(&format!(" {:.3} | {:.3} |", ms(t50), ms(t99)));
                    ratios.push_str(&format!(
                        " {:.1}x |",
                        t99.as_secs_f64() / p99.as_secs_f64().max(1e-9)
                    ));
                }
                None => {
                    row.push_str(" - | - |");
                    ratios.push_str(" - |");
                }
            }
        }
        println!("{row}{ratios}");
    }
    for note in peer_notes {
        println!("{note}");
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
