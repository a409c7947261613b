//! Aggregation benchmark (issue 25): the API's histogram (packets matching a
//! filter per time bucket, the web UI's timeline) and SQL aggregations over
//! the whole archive, side by side in one run with DuckDB reading the same
//! segment files (`bench/aggregate_duckdb.py`; DuckDB from PyPI, which
//! `bench/index-peers-setup.sh` installs).
//!
//! For each histogram filter it prints the API's time (`GET
//! /api/v1/histogram`, 100 buckets over the archive's span) and, in this
//! process through `hindsight_reader`, the columnar path and the row path it
//! replaced; then DuckDB's time for the same grouped count (the filter
//! written as the SQL it means), and whether the totals agree. For each SQL
//! aggregation, `POST /api/v1/sql` against DuckDB on the same text.
//!
//! The input is lan-hour replicated to `--packets` packets (timestamps
//! shifted by one hour per copy), or `--archive DIR` (load_bench's). Medians
//! of `--runs`. Run with
//! `cargo build --release -p hindsight -p hindsight-bench && target/release/aggregate_bench [--packets N] [--runs N] [--work DIR] [--archive DIR]`.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;
use hindsight_bench::{Server, median};
use hindsight_query::filter::Filter;
use hindsight_query::search::SearchRequest;
use hindsight_reader::{HistogramMethod, Limits, Reader};
use hindsight_store::TimeRange;

#[derive(Parser)]
struct Args {
    #[arg(long, default_value_t = 5_000_000)]
    packets: u64,
    #[arg(long, default_value_t = 5, value_parser = hindsight_bench::count_from(1))]
    runs: usize,
    #[arg(long, default_value_os_t = std::env::temp_dir().join("hindsight-bench"))]
    work: PathBuf,
    /// An archive already made (load_bench's), instead of the replicated one.
    #[arg(long)]
    archive: Option<PathBuf>,
}

/// A histogram's filter, and the same condition in DuckDB's SQL over the
/// `packets` columns (`transport` is what hindsight's layers mean: IPv4 or
/// IPv6, not a non-first fragment).
const HISTOGRAMS: [(&str, &str); 4] = [
    ("", "TRUE"),
    (
        "tcp",
        "ip_version IN (4, 6) AND ip_proto = 6 AND status <> 5",
    ),
    (
        "udp port 53",
        "ip_version IN (4, 6) AND ip_proto = 17 AND status <> 5 AND (src_port = 53 OR dst_port = 53)",
    ),
    (
        "host 10.174.200.10",
        "(src_addr = from_hex('00000000000000000000ffff0aaec80a') OR dst_addr = from_hex('00000000000000000000ffff0aaec80a'))",
    ),
];

/// SQL aggregations, run as written by both; the last column is the one
/// summed to check that both answered the same.
const AGGREGATIONS: [(&str, &str); 4] = [
    (
        "packets and bytes per protocol",
        "SELECT ip_proto, count(*) AS packets, sum(wire_len) AS n FROM packets GROUP BY ip_proto",
    ),
    (
        "top 10 sources by bytes",
        "SELECT src_addr, sum(wire_len) AS n FROM packets GROUP BY src_addr ORDER BY n DESC LIMIT 10",
    ),
    (
        "TCP ports by distinct sources",
        "SELECT dst_port, count(DISTINCT src_addr) AS n FROM packets WHERE ip_proto = 6 \
         GROUP BY dst_port ORDER BY n DESC, dst_port LIMIT 10",
    ),
    (
        "bytes per hour",
        "SELECT date_trunc('hour', ts) AS h, sum(wire_len) AS n FROM packets GROUP BY h",
    ),
];

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

fn timed<T>(runs: usize, mut work: impl FnMut() -> T) -> (Duration, T) {
    let mut samples = Vec::new();
    let mut last = None;
    for _ in 0..runs {
        let started = Instant::now();
        last = Some(work());
        samples.push(started.elapsed());
    }
    (median(samples), last.expect("at least one run"))
}

/// One DuckDB answer: median milliseconds and the checksum of its last column.
struct Peer {
    ms: f64,
    checksum: u64,
}

/// Runs `queries` (name, SQL) in DuckDB over the archive's packet segments.
fn duckdb(
    archive: &std::path::Path,
    queries: &[(String, String)],
    runs: usize,
) -> Result<Vec<Peer>, String> {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("aggregate_duckdb.py");
    let mut child = Command::new("python3")
        .arg(script)
        .arg("--files")
        .arg(archive.join("packets").join("*.parquet"))
        .args(["--runs", &runs.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run python3: {e}"))?;
    let input: Vec<serde_json::Value> = queries
        .iter()
        .map(|(name, sql)| serde_json::json!({"name": name, "sql": sql}))
        .collect();
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(serde_json::to_string(&input).expect("json").as_bytes())
        .map_err(|e| e.to_string())?;
    let output = child.wait_with_output().map_err(|e| e.to_string())?;
    if !output.status.success() {
        return Err(String::from_utf8_lossy(&output.stderr).into_owned());
    }
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| {
            let value: serde_json::Value = serde_json::from_str(line).map_err(|e| e.to_string())?;
            Ok(Peer {
                ms: value["ms"].as_f64().unwrap_or(f64::NAN),
                checksum: value["checksum"].as_u64().unwrap_or(0),
            })
        })
        .collect()
}

fn main() {
    let args = Args::parse();
    std::fs::create_dir_all(&args.work).expect("create work dir");
    let hindsight = hindsight_bench::hindsight_binary();
    let (archive, packets) = match &args.archive {
        Some(archive) => {
            let stats = hindsight_bench::archive_stats(&hindsight, archive);
            (archive.clone(), stats["packets"].as_u64().unwrap_or(0))
        }
        None => {
            let (archive, _, packets, _) =
                hindsight_bench::replicated_archive(&hindsight, args.packets, &args.work);
            (archive, packets)
        }
    };
    let server = Server::start(&hindsight, &archive);
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(3600)))
        .build()
        .into();
    let reader = Reader::open(&archive).expect("open the archive");
    let snapshot = reader.snapshot().expect("a snapshot");

    println!(
        "# aggregate_bench: {packets} packets, medians of {} runs\n",
        args.runs
    );
    println!("## Histograms: 100 buckets over the archive's span\n");
    let mut histograms = Vec::new();
    let mut peer_queries = Vec::new();
    for (filter, condition) in HISTOGRAMS {
        let url = format!(
            "{}/api/v1/histogram?buckets=100&filter={}",
            server.base,
            filter.replace(' ', "%20")
        );
        let (api, answer) = timed(args.runs, || {
            let mut response = agent.get(&url).call().expect("histogram");
            let body: serde_json::Value = response.body_mut().read_json().expect("json");
            body
        });
        let request = SearchRequest {
            filter: Filter::parse(filter).expect("filter"),
            time: TimeRange::ALL,
            limit: None,
            with_data: false,
            capture_only: true,
        };
        let limits = Limits::default();
        let run = |method| {
            timed(args.runs, || {
                snapshot
                    .histogram(&request, None, 100, &limits, method)
                    .expect("histogram")
                    .total
            })
        };
        let (columnar, columnar_total) = run(HistogramMethod::Columnar);
        let (rows, rows_total) = run(HistogramMethod::Rows);
        let (start, width) = (
            answer["start_ns"].as_i64().unwrap_or(0),
            answer["bucket_ns"].as_i64().unwrap_or(1),
        );
        let end = start + width * 100 - 1;
        peer_queries.push((
            format!("histogram {filter:?}"),
            format!(
                "SELECT (epoch_ns(ts) - {start}) // {width} AS slot, count(*) AS n FROM packets \
                 WHERE ({condition}) AND epoch_ns(ts) BETWEEN {start} AND {end} GROUP BY slot"
            ),
        ));
        histograms.push((
            filter,
            answer,
            api,
            columnar,
            columnar_total,
            rows,
            rows_total,
        ));
    }
    let mut sql_times = Vec::new();
    for (name, sql) in AGGREGATIONS {
        let (api, checksum) = timed(args.runs, || {
            let mut response = agent
                .post(&format!("{}/api/v1/sql", server.base))
                .send_json(serde_json::json!({"sql": sql, "format": "jsonl"}))
                .expect("sql");
            let body = response.body_mut().read_to_string().expect("body");
            body.lines()
                .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
                .map(|row| row["n"].as_u64().unwrap_or(0))
                .sum::<u64>()
        });
        sql_times.push((name, api, checksum));
        peer_queries.push((name.to_owned(), sql.to_owned()));
    }
    let peers = duckdb(&archive, &peer_queries, args.runs);
    if let Err(why) = &peers {
        println!("DuckDB did not run ({why}); install it with bench/index-peers-setup.sh\n");
    }
    let peer = |index: usize| peers.as_ref().ok().and_then(|p| p.get(index));
    println!(
        "| filter | method | packets | API ms | columnar ms (in process) | rows ms (in process, before) | DuckDB ms | DuckDB / API | same total |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---|");
    for (index, (filter, answer, api, columnar, columnar_total, rows, rows_total)) in
        histograms.iter().enumerate()
    {
        let total = answer["total"].as_u64().unwrap_or(0);
        let (peer_ms, ratio, same) = match peer(index) {
            Some(p) => (
                format!("{:.1}", p.ms),
                format!("{:.1}×", p.ms / ms(*api)),
                p.checksum == total && *columnar_total == total && *rows_total == total,
            ),
            None => (
                "–".into(),
                "–".into(),
                *columnar_total == total && *rows_total == total,
            ),
        };
        println!(
            "| `{filter}` | {} | {total} | {:.1} | {:.1} | {:.1} | {peer_ms} | {ratio} | {} |",
            answer["method"].as_str().unwrap_or("?"),
            ms(*api),
            ms(*columnar),
            ms(*rows),
            if same { "yes" } else { "NO" },
        );
    }
    println!("\n## SQL aggregations through the API\n");
    println!("| aggregation | API ms | DuckDB ms | DuckDB / API | same answer |");
    println!("|---|---:|---:|---:|---|");
    for (index, (name, api, checksum)) in sql_times.iter().enumerate() {
        let (peer_ms, ratio, same) = match peer(HISTOGRAMS.len() + index) {
            Some(p) => (
                format!("{:.1}", p.ms),
                format!("{:.1}×", p.ms / ms(*api)),
                if p.checksum == *checksum { "yes" } else { "NO" },
            ),
            None => ("–".into(), "–".into(), "–"),
        };
        println!(
            "| {name} | {:.1} | {peer_ms} | {ratio} | {same} |",
            ms(*api)
        );
    }
}
