//! Connection-index benchmark (issue 3), side by side in one run:
//! - insert rate of the Diventi index (events/s) without and with count-based
//!   expiration running (cutoff updates and full compactions on their clocks);
//! - query latency by result-size bucket (0, 1–1k, 1k–10k, 10k-100k, >100k
//!   connections) for 1000 present and 100 absent addresses, against DuckDB,
//!   PostgreSQL (inet + GiST) and OpenSearch (an `ip` field) holding the same
//!   entries (`bench/index_peers.py`; DuckDB and PostgreSQL run if `python3` can
//!   import duckdb and psycopg and a PostgreSQL cluster runs, which
//!   `bench/index-peers-setup.sh` installs; OpenSearch is started for the run by
//!   `bench/opensearch.sh` unless `--no-opensearch`), and the insert rate of each;
//! - with `--grow-to N`, Diventi's growth figures (section 6): the index grows to
//!   N connections with expiration keeping `--keep` (the insert rate, the disk and
//!   the live entries at every `--step`), a client asks a query set over and
//!   over from half way to the end while it ingests and another set once, idle,
//!   at the end, the same looped workload grows without
//!   expiration to `--plain-to` (the disk without expiration), and a workload of
//!   uniformly random IPv4 addresses grows to `--random-to` with expiration,
//!   queried by random ranges from /31 to /16. The records are made copy by copy
//!   as they are inserted, so memory does not grow with N; the disk is bounded
//!   by `--keep` (and `--plain-to`).
//!
//! The connections are real: the flow table's records of lan-hour-2012.pcap,
//! replicated (one hour later per copy) with the addresses outside the busiest few
//! renamed per copy, so that there are many rare addresses, some frequent and a
//! few very busy, as in a network over weeks. Run with
//! `cargo run --release -p hindsight-bench --bin index_bench -- [--copies N] [--runs N] [--grow-to N]`.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use hindsight_bench::{HOUR, Rng, median};
use hindsight_capture::CaptureReader;
use hindsight_flow::{FlowTable, FlowTableConfig};
use hindsight_index::{ConnScan, ConnectionIndex, Expiry, Maintenance};
use hindsight_model::{Addr16, FlowRecord};

/// Addresses kept in every copy (the busiest of the capture).
const KEPT: usize = 12;

#[derive(Parser)]
struct Args {
    #[arg(long, default_value_t = 400)]
    copies: usize,
    #[arg(long, default_value_t = 3)]
    runs: usize,
    #[arg(long, default_value_os_t = std::env::temp_dir().join("hindsight-index-bench"))]
    work: PathBuf,
    #[arg(long, default_value_os_t = hindsight_bench::default_source())]
    source: PathBuf,
    /// Only the insert figures of the base run, no queries and no peers (the
    /// growth run, if asked for, still runs).
    #[arg(long)]
    insert_only: bool,
    /// Expiration schedule of the insert run with expiration.
    #[arg(long, default_value_t = 500)]
    cutoff_ms: u64,
    #[arg(long, default_value_t = 2000)]
    compaction_ms: u64,
    /// Start an OpenSearch node (bench/opensearch.sh) as a third peer.
    #[arg(long = "no-opensearch", action = clap::ArgAction::SetFalse)]
    opensearch: bool,
    #[arg(long, default_value_t = 9251)]
    opensearch_port: u16,
    /// The growth run: connections to insert with expiration (0: no growth run).
    #[arg(long, default_value_t = 0)]
    grow_to: u64,
    /// N of the growth run's expiration, in connections.
    #[arg(long, default_value_t = 25_000_000)]
    keep: u64,
    /// Connections of the growth run without expiration.
    #[arg(long, default_value_t = 100_000_000)]
    plain_to: u64,
    /// Connections of the random-address growth run, expiration keeping
    /// `keep` (default: --grow-to).
    #[arg(long)]
    random_to: Option<u64>,
    /// Connections between two rows of the growth tables (default: a tenth
    /// of --grow-to).
    #[arg(long)]
    step: Option<u64>,
    /// Full-compaction interval of the growth runs.
    #[arg(long, default_value_t = 30)]
    grow_compaction_s: u64,
}

impl Args {
    fn random_to(&self) -> u64 {
        self.random_to.unwrap_or(self.grow_to)
    }

    fn step(&self) -> u64 {
        self.step.unwrap_or((self.grow_to / 10).max(1))
    }
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

/// Copies of the capture's flow records, one hour later each, with every
/// address but the `KEPT` busiest renamed into 10.128.0.0/9 (the next `KEPT`
/// every 40 copies, the others in every copy).
struct Replicator<'a> {
    flows: &'a [FlowRecord],
    kept: Vec<Addr16>,
    /// Every other address of the capture, by rank (busiest first).
    others: HashMap<Addr16, u32>,
}

impl<'a> Replicator<'a> {
    fn new(flows: &'a [FlowRecord]) -> Self {
        let mut counts: HashMap<Addr16, usize> = HashMap::new();
        for r in flows {
            *counts.entry(r.src).or_default() += 1;
            *counts.entry(r.dst).or_default() += 1;
        }
        let mut by_count: Vec<(usize, Addr16)> = counts.iter().map(|(a, c)| (*c, *a)).collect();
        by_count.sort_unstable_by(|a, b| b.cmp(a));
        let kept = by_count.iter().take(KEPT).map(|(_, a)| *a).collect();
        let others = by_count
            .iter()
            .skip(KEPT)
            .enumerate()
            .map(|(i, (_, a))| (*a, i as u32))
            .collect();
        Self {
            flows,
            kept,
            others,
        }
    }

    /// The name of the capture's `address` in copy `copy`.
    fn rename(&self, address: Addr16, copy: usize) -> Addr16 {
        if self.kept.contains(&address) {
            return address;
        }
        let rank = self.others.get(&address).copied().unwrap_or(63);
        // The next busiest keep their name for 40 copies at a time (thousands
        // of connections each), the rest are renamed in every copy.
        let epoch = if rank < KEPT as u32 { copy / 40 } else { copy };
        let n = (epoch as u32) * 64 + rank % 64;
        Addr16::from_v4_bytes([10, 128 | (n >> 16) as u8, (n >> 8) as u8, n as u8])
    }

    /// Appends copy `copy` to `out`.
    fn copy_into(&self, copy: usize, out: &mut Vec<FlowRecord>) {
        let shift = copy as i64 * HOUR;
        for r in self.flows {
            let mut r = r.clone();
            r.first_ns += shift;
            r.last_ns += shift;
            r.src = self.rename(r.src, copy);
            r.dst = self.rename(r.dst, copy);
            out.push(r);
        }
    }

    /// Copies `0..copies`.
    fn copies(&self, copies: usize) -> Vec<FlowRecord> {
        let mut out = Vec::with_capacity(self.flows.len() * copies);
        for copy in 0..copies {
            self.copy_into(copy, &mut out);
        }
        out
    }

    /// The capture's addresses, in no particular order.
    fn addresses(&self) -> Vec<Addr16> {
        let mut all: Vec<Addr16> = self.kept.clone();
        all.extend(self.others.keys());
        all.sort_unstable();
        all
    }
}

/// Inserts `records` as ingest does: staged in batches, committed every
/// `STAGED_MAX_BYTES` of staged entries and at the end; returns the wall time.
fn insert_all(dir: &Path, records: &[FlowRecord], expiry: Expiry) -> (Duration, u64) {
    let _ = std::fs::remove_dir_all(dir);
    let index = Arc::new(ConnectionIndex::open(dir, expiry).expect("open the index"));
    let maintenance = expiry
        .expires()
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
    let args = Args::parse();
    std::fs::create_dir_all(&args.work).expect("create the work directory");
    let flows = capture_flows(&args.source);
    let replicator = Replicator::new(&flows);
    let records = replicator.copies(args.copies);
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
        cutoff_interval: Duration::from_millis(args.cutoff_ms),
        compaction_interval: Duration::from_millis(args.compaction_ms),
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
        // The growth run has its own figures; only the base run's queries
        // and peers are left out.
        if args.grow_to > 0 {
            growth(&args, &replicator);
        }
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
        let started = Instant::now();
        let found = scan_all(&index, *address, *address);
        let elapsed = started.elapsed();
        let expected = per_address.get(address).copied().unwrap_or(0);
        assert_eq!(found, expected, "{address}");
        ours.entry(bucket(found)).or_default().push(elapsed);
        lines.push_str(&format!("{address},{found}\n"));
    }
    drop(index);
    let queries_path = args.work.join("queries.csv");
    std::fs::write(&queries_path, lines).expect("write the queries");

    // --- the same entries in DuckDB, PostgreSQL and OpenSearch ---
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
    drop(records);
    let mut peer_notes = Vec::new();
    let opensearch = if args.opensearch {
        match OpenSearch::start(&args.work.join("opensearch"), args.opensearch_port) {
            Ok(node) => Some(node),
            Err(error) => {
                peer_notes.push(format!("note,opensearch,not run: {error}"));
                None
            }
        }
    } else {
        None
    };
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("index_peers.py");
    let mut command = Command::new("python3");
    command.arg(&script).arg(&entries_path).arg(&queries_path);
    if opensearch.is_some() {
        command.arg(format!("127.0.0.1:{}", args.opensearch_port));
    }
    let peers = command.output();
    drop(opensearch);
    let mut theirs: BTreeMap<(String, String), Vec<Duration>> = BTreeMap::new();
    let mut loads: Vec<(String, u64, f64)> = Vec::new();
    match peers {
        Ok(output) if output.status.success() => {
            for line in String::from_utf8_lossy(&output.stdout).lines() {
                // peer,address,found,microseconds | insert,peer,entries,seconds | note,peer,text
                let fields: Vec<&str> = line.splitn(4, ',').collect();
                if fields[0] == "note" {
                    peer_notes.push(line.to_owned());
                    continue;
                }
                if fields.len() != 4 {
                    continue;
                }
                if fields[0] == "insert" {
                    loads.push((
                        fields[1].to_owned(),
                        fields[2].parse().unwrap_or(0),
                        fields[3].parse().unwrap_or(f64::NAN),
                    ));
                    continue;
                }
                let found: u64 = fields[2].parse().unwrap_or(0);
                let us: f64 = fields[3].parse().unwrap_or(0.0);
                theirs
                    .entry((fields[0].to_owned(), bucket(found).to_owned()))
                    .or_default()
                    .push(Duration::from_secs_f64(us / 1e6));
            }
        }
        Ok(output) => peer_notes.push(format!(
            "note,peers,not run: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        )),
        Err(error) => peer_notes.push(format!("note,peers,not run: {error}")),
    }
    if !loads.is_empty() {
        println!("## the peers' loads (the same entries; connections/s = entries/2/s)");
        println!(
            "| peer | entries | s | connections/s | hindsight's insert rate (no expiration) / peer's |"
        );
        println!("|---|---:|---:|---:|---:|");
        for (peer, entries, seconds) in &loads {
            let their = *entries as f64 / 2.0 / seconds;
            println!(
                "| {peer} | {entries} | {seconds:.1} | {their:.0} | {:.1}x |",
                rate(plain) / their
            );
        }
        println!();
    }
    const PEERS: [(&str, &str); 3] = [
        ("duckdb", "DuckDB"),
        ("postgres", "PostgreSQL"),
        ("opensearch", "OpenSearch"),
    ];
    println!("## query latency by result size (all connections of one address, all time)");
    let mut header = String::from("| bucket | queries | hindsight p50 ms | p99 ms |");
    let mut rule = String::from("|---|---:|---:|---:|");
    for (_, name) in PEERS {
        header.push_str(&format!(" {name} p50 | p99 |"));
        rule.push_str("---:|---:|");
    }
    for (_, name) in PEERS {
        header.push_str(&format!(" p99 speed-up vs {name} |"));
        rule.push_str("---:|");
    }
    println!("{header}\n{rule}");
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
        for (peer, _) in PEERS {
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
    println!();

    if args.grow_to > 0 {
        growth(&args, &replicator);
    }
}

/// All connections of the addresses in `[low, high]`, all time, page by page as
/// the API reads them; returns how many.
fn scan_all(index: &ConnectionIndex, low: Addr16, high: Addr16) -> u64 {
    let scan = ConnScan {
        low,
        high,
        start_ns: i64::MIN,
        end_ns: i64::MAX,
    };
    let mut found = 0u64;
    let mut after: Option<Vec<u8>> = None;
    loop {
        let page = index.scan(&scan, after.as_deref(), 10_000).expect("scan");
        found += page.entries.len() as u64;
        match page.next {
            Some(key) => after = Some(key),
            None => return found,
        }
    }
}

/// The OpenSearch node of `bench/opensearch.sh`, stopped on drop.
struct OpenSearch {
    script: PathBuf,
    home: PathBuf,
}

impl OpenSearch {
    fn start(home: &Path, port: u16) -> Result<Self, String> {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("opensearch.sh");
        let _ = std::fs::remove_dir_all(home);
        let output = Command::new("bash")
            .arg(&script)
            .arg("start")
            .arg(home)
            .arg(port.to_string())
            .output()
            .map_err(|e| format!("{}: {e}", script.display()))?;
        let node = Self {
            script,
            home: home.to_owned(),
        };
        if output.status.success() {
            Ok(node)
        } else {
            Err(String::from_utf8_lossy(&output.stderr)
                .trim()
                .replace('\n', " / "))
        }
    }
}

impl Drop for OpenSearch {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(&self.script)
            .arg("stop")
            .arg(&self.home)
            .status();
        let _ = std::fs::remove_dir_all(self.home.join("data"));
    }
}

/// The records of a growth run, made copy by copy.
enum Workload<'a> {
    /// The capture's records replicated as in the base run (SC Looped in Diventi).
    Looped(&'a Replicator<'a>),
    /// The capture's records with both addresses drawn uniformly from IPv4.
    Random(&'a [FlowRecord]),
}

impl Workload<'_> {
    fn name(&self) -> &'static str {
        match self {
            Self::Looped(_) => "looped",
            Self::Random(_) => "random",
        }
    }

    fn copy_into(&self, copy: usize, rng: &mut Rng, out: &mut Vec<FlowRecord>) {
        match self {
            Self::Looped(replicator) => replicator.copy_into(copy, out),
            Self::Random(flows) => {
                let shift = copy as i64 * HOUR;
                for r in *flows {
                    let mut r = r.clone();
                    r.first_ns += shift;
                    r.last_ns += shift;
                    r.src = random_v4(rng);
                    r.dst = random_v4(rng);
                    out.push(r);
                }
            }
        }
    }

    /// A query set: `(low, high)` ranges. Looped: 1,000 addresses of the live
    /// copies `live` (uniform over the capture's addresses, as Diventi drew
    /// distinct addresses) and 100 absent ones; random: 20 random blocks of each
    /// length /16 to /31.
    fn queries(&self, live: std::ops::Range<usize>, seed: u64) -> Vec<(Addr16, Addr16, u8)> {
        let mut rng = Rng(seed);
        let mut out = Vec::new();
        match self {
            Self::Looped(replicator) => {
                // Every name of the live copies, then 1,000 of them drawn
                // without replacement.
                let addresses = replicator.addresses();
                let mut names: Vec<Addr16> = live
                    .flat_map(|copy| addresses.iter().map(move |a| replicator.rename(*a, copy)))
                    .collect();
                names.sort_unstable();
                names.dedup();
                for i in 0..names.len().min(1000) {
                    let j = i + rng.below((names.len() - i) as u64) as usize;
                    names.swap(i, j);
                    out.push((names[i], names[i], 32));
                }
                for i in 0..100u8 {
                    // TEST-NET-1 for one set, TEST-NET-2 for the other.
                    let a = if seed.is_multiple_of(2) {
                        Addr16::from_v4_bytes([192, 0, 2, i])
                    } else {
                        Addr16::from_v4_bytes([198, 51, 100, i])
                    };
                    out.push((a, a, 32));
                }
            }
            Self::Random(_) => {
                for bits in 16..=31u8 {
                    for _ in 0..20 {
                        let base = rng.below(1 << 32) as u32 & (u32::MAX << (32 - bits));
                        let last = base | !(u32::MAX << (32 - bits));
                        out.push((
                            Addr16::from_v4_bytes(base.to_be_bytes()),
                            Addr16::from_v4_bytes(last.to_be_bytes()),
                            bits,
                        ));
                    }
                }
            }
        }
        out
    }
}

fn random_v4(rng: &mut Rng) -> Addr16 {
    Addr16::from_v4_bytes((rng.below(1 << 32) as u32).to_be_bytes())
}

/// Each query's result size and latency.
fn run_queries(index: &ConnectionIndex, queries: &[(Addr16, Addr16, u8)]) -> Vec<Sample> {
    queries
        .iter()
        .map(|(low, high, bits)| {
            let started = Instant::now();
            let found = scan_all(index, *low, *high);
            (*bits, found, started.elapsed())
        })
        .collect()
}

/// One query of a growth run: its prefix length, results and latency.
type Sample = (u8, u64, Duration);

/// The thread asking queries while the index grows, and the connections in
/// when it began.
type QueryThread = (std::thread::JoinHandle<Vec<Sample>>, u64);

/// What a growth run measured.
struct Growth {
    /// Queries while ingesting, and how many connections went in meanwhile.
    busy: Vec<Sample>,
    busy_inserted: u64,
    /// The same kind of queries at the end, idle.
    idle: Vec<Sample>,
}

/// Grows an index to `limit` connections of `workload` and measures it.
fn grow_run(
    args: &Args,
    workload: &Workload,
    expiry: Expiry,
    limit: u64,
    label: &str,
    title: &str,
) -> Growth {
    let mut table = GrowthTable::start(title, expiry);
    let dir = args.work.join(format!("grow-{}-{label}", workload.name()));
    let _ = std::fs::remove_dir_all(&dir);
    let index = Arc::new(ConnectionIndex::open(&dir, expiry).expect("open the index"));
    let maintenance = expiry
        .expires()
        .then(|| Maintenance::start(Arc::clone(&index), |e| panic!("expiration: {e}")));
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut batch = Vec::new();
    let (mut inserted, mut copy, mut next_row) = (0u64, 0usize, args.step());
    let mut busy_thread: Option<QueryThread> = None;
    let ingesting = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let per_copy = match workload {
        Workload::Looped(r) => r.flows.len(),
        Workload::Random(f) => f.len(),
    } as u64;
    // Copies still live under expiration (the newest `keep` connections).
    let live = |copy: usize| {
        let kept = if expiry.expires() {
            (expiry.keep_events / per_copy.max(1)) as usize
        } else {
            copy
        };
        copy.saturating_sub(kept.max(1))..copy.max(1)
    };
    let started = Instant::now();
    while inserted < limit {
        batch.clear();
        workload.copy_into(copy, &mut rng, &mut batch);
        copy += 1;
        let take = batch.len().min((limit - inserted) as usize);
        for chunk in batch[..take].chunks(4096) {
            index.stage(chunk);
            if index.staged_bytes() >= hindsight_ingest::STAGED_MAX_BYTES {
                index.commit(None).expect("commit");
            }
        }
        inserted += take as u64;
        if busy_thread.is_none() && inserted >= limit / 2 {
            // From half way to the end, a client asks the query set over and
            // over, a query a millisecond, of what is committed (ingest commits
            // at every seal).
            index.commit(None).expect("commit");
            let queries = workload.queries(live(copy), 1);
            let reader = Arc::clone(&index);
            let stop = Arc::clone(&ingesting);
            let thread = std::thread::spawn(move || {
                let mut out = Vec::new();
                while stop.load(std::sync::atomic::Ordering::Relaxed) {
                    for query in queries.chunks(1) {
                        out.extend(run_queries(&reader, query));
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
                out
            });
            busy_thread = Some((thread, inserted));
        }
        if inserted >= next_row || inserted >= limit {
            index.commit(None).expect("commit");
            table.row(
                inserted,
                started.elapsed().as_secs_f64(),
                hindsight_bench::disk_bytes(&dir),
                "",
            );
            next_row += args.step();
        }
    }
    ingesting.store(false, std::sync::atomic::Ordering::Relaxed);
    let (busy, busy_inserted) = match busy_thread {
        Some((thread, from)) => (thread.join().expect("queries"), inserted - from),
        None => (Vec::new(), 0),
    };
    index.flush().expect("flush");
    table.row(
        inserted,
        started.elapsed().as_secs_f64(),
        hindsight_bench::disk_bytes(&dir),
        " (flushed)",
    );
    drop(maintenance);
    // Expiration's last word before the count: the cutoff, then a compaction.
    if expiry.expires() {
        index.update_cutoff().expect("cutoff");
        index.compact().expect("compact");
    }
    let idle = run_queries(&index, &workload.queries(live(copy), 2));
    let (live_events, _) = index.count().expect("count");
    table.row(
        inserted,
        started.elapsed().as_secs_f64(),
        hindsight_bench::disk_bytes(&dir),
        " (after the last cutoff, compaction, the idle queries and a count)",
    );
    table.end(live_events);
    drop(index);
    let _ = std::fs::remove_dir_all(&dir);
    Growth {
        busy,
        busy_inserted,
        idle,
    }
}

/// The growth table, printed a row at a time as the run goes.
struct GrowthTable {
    expiry: Expiry,
    last: (u64, f64),
}

impl GrowthTable {
    fn start(title: &str, expiry: Expiry) -> Self {
        println!("### {title}");
        println!(
            "| connections inserted | wall s | connections/s over the step | index bytes | bytes per connection (of N when expiring) |"
        );
        println!("|---:|---:|---:|---:|---:|");
        Self {
            expiry,
            last: (0, 0.0),
        }
    }

    fn row(&mut self, connections: u64, seconds: f64, bytes: u64, note: &str) {
        let step = connections - self.last.0;
        let rate = if step > 0 {
            format!("{:.0}", step as f64 / (seconds - self.last.1))
        } else {
            "-".to_owned()
        };
        let live = if self.expiry.expires() {
            self.expiry.keep_events.min(connections)
        } else {
            connections
        };
        println!(
            "| {connections}{note} | {seconds:.1} | {rate} | {bytes} | {:.1} |",
            bytes as f64 / live.max(1) as f64
        );
        self.last = (connections, seconds);
    }

    fn end(&self, live: u64) {
        if self.expiry.expires() {
            println!(
                "live connections at the end: {live} (N = {}, inserted {}); bytes per connection above are per N",
                self.expiry.keep_events, self.last.0
            );
        } else {
            println!(
                "live connections at the end: {live} (inserted {})",
                self.last.0
            );
        }
    }
}

fn print_queries(by: &str, groups: &[(&str, &[Sample])], key: impl Fn(u8, u64) -> String) {
    println!("| {by} | when | queries | mean results | p50 ms | p99 ms | max ms |");
    println!("|---|---|---:|---:|---:|---:|---:|");
    let mut keys: Vec<String> = Vec::new();
    for (_, samples) in groups {
        for (bits, found, _) in *samples {
            let k = key(*bits, *found);
            if !keys.contains(&k) {
                keys.push(k);
            }
        }
    }
    for k in keys {
        for (when, samples) in groups {
            let mine: Vec<&Sample> = samples
                .iter()
                .filter(|(b, f, _)| key(*b, *f) == k)
                .collect();
            if mine.is_empty() {
                continue;
            }
            let mut times: Vec<Duration> = mine.iter().map(|s| s.2).collect();
            times.sort();
            let mean = mine.iter().map(|s| s.1).sum::<u64>() as f64 / mine.len() as f64;
            println!(
                "| {k} | {when} | {} | {mean:.0} | {:.3} | {:.3} | {:.3} |",
                mine.len(),
                ms(percentile(&times, 0.5)),
                ms(percentile(&times, 0.99)),
                ms(*times.last().expect("a sample"))
            );
        }
    }
}

/// Diventi's section 6 on this machine: growth with and without expiration, the
/// looped and the random workloads, queries while ingesting and idle.
fn growth(args: &Args, replicator: &Replicator) {
    let expiry = Expiry {
        keep_events: args.keep,
        histogram_granularity: Duration::from_secs(60),
        cutoff_interval: Duration::from_secs(1),
        compaction_interval: Duration::from_secs(args.grow_compaction_s),
    };
    println!(
        "## growth (Diventi section 6): expiration keeps N = {} connections, cutoff every {:?}, full compaction every {:?}\n",
        expiry.keep_events, expiry.cutoff_interval, expiry.compaction_interval
    );
    let looped = Workload::Looped(replicator);
    let grown = grow_run(
        args,
        &looped,
        expiry,
        args.grow_to,
        "expiring",
        &format!(
            "looped workload to {} connections, expiration on",
            args.grow_to
        ),
    );
    println!(
        "\nqueries by result size (up to 1,000 addresses of the live copies, uniform over the capture's addresses, and 100 absent; all time; while ingesting: the set over and over, a query a millisecond, while the second half ({} connections) went in; idle: another set once, at the end)",
        grown.busy_inserted
    );
    print_queries(
        "results",
        &[("ingesting", &grown.busy), ("idle", &grown.idle)],
        |_, found| bucket(found).to_owned(),
    );
    println!();
    if args.plain_to > 0 {
        grow_run(
            args,
            &looped,
            Expiry::OFF,
            args.plain_to,
            "plain",
            &format!(
                "looped workload to {} connections, no expiration (the disk without it)",
                args.plain_to
            ),
        );
        println!();
    }
    if args.random_to() > 0 {
        let random = Workload::Random(replicator.flows);
        let grown = grow_run(
            args,
            &random,
            expiry,
            args.random_to(),
            "expiring",
            &format!(
                "random-address workload to {} connections, expiration on",
                args.random_to()
            ),
        );
        println!(
            "\nrandom ranges, 20 of each prefix length (while ingesting: over and over, a query a millisecond, while the second half ({} connections) went in; idle: another set once, at the end)",
            grown.busy_inserted
        );
        print_queries(
            "prefix",
            &[("ingesting", &grown.busy), ("idle", &grown.idle)],
            |bits, _| format!("/{bits}"),
        );
        println!();
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
