//! SQL over a real archive: lan-hour-2012.pcap ingested through the library, queried
//! through `SqlSession`, with answers checked against tcpdump and a direct read of the
//! capture.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use hindsight_capture::CaptureReader;
use hindsight_ingest::{IngestOptions, Ingestor};
use hindsight_sql::{Format, Limits, SqlError, SqlSession};

fn lan_hour() -> PathBuf {
    let path = Path::new(
        &std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo test sets CARGO_MANIFEST_DIR"),
    )
    .join("../../../shared/data/lan-hour-2012.pcap");
    assert!(path.exists(), "missing capture {}", path.display());
    path
}

/// The archive, ingested once for every test: 10-minute partitions, so that time
/// conditions have segments to skip. It lives in cargo's scratch directory
/// for integration tests, made again by each run: a temporary directory held
/// by a static is never dropped, and each run left one behind in /tmp.
fn archive() -> &'static Path {
    static ARCHIVE: OnceLock<PathBuf> = OnceLock::new();
    ARCHIVE.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("sql-tests-archive");
        if dir.exists() {
            std::fs::remove_dir_all(&dir).unwrap();
        }
        std::fs::create_dir_all(&dir).unwrap();
        let options = IngestOptions {
            partition_nanos: 600 * 1_000_000_000,
            ..IngestOptions::default()
        };
        let (mut ingestor, _) = Ingestor::open(&dir, options).unwrap();
        let outcome = ingestor.ingest_file(&lan_hour(), &mut |_| {}).unwrap();
        assert!(outcome.error.is_none());
        ingestor.finish().unwrap();
        dir
    })
}

fn query(sql: &str) -> String {
    let session = SqlSession::open(archive()).unwrap();
    let mut out = Vec::new();
    session
        .run(sql, Format::Csv, &mut out, &Limits::default())
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    String::from_utf8(out).unwrap()
}

/// The single value of a one-row, one-column result.
fn scalar(sql: &str) -> String {
    let csv = query(sql);
    let mut lines = csv.lines().skip(1);
    let value = lines.next().unwrap_or_default().to_owned();
    assert!(
        lines.next().is_none(),
        "{sql} returned more than one row:\n{csv}"
    );
    value
}

fn tcpdump_count(filter: &str) -> u64 {
    let output = Command::new("tcpdump")
        .args(["-nn", "-q", "-r"])
        .arg(lan_hour())
        .arg(filter)
        .output()
        .expect("tcpdump is not installed: run scripts/setup");
    assert!(output.status.success());
    output
        .stdout
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .count() as u64
}

#[test]
fn counts_agree_with_tcpdump() {
    assert_eq!(scalar("SELECT count(*) FROM packets"), "62781");
    let host = "10.64.88.105";
    let sql = format!(
        "SELECT count(*) FROM packets WHERE src_addr = ip('{host}') OR dst_addr = ip('{host}')"
    );
    // ARP rows carry the sender and target protocol addresses, as tcpdump's `host` matches.
    assert_eq!(
        scalar(&sql),
        tcpdump_count(&format!("host {host}")).to_string()
    );
    let sql =
        "SELECT count(*) FROM packets WHERE ip_proto = 17 AND (src_port = 53 OR dst_port = 53)";
    assert_eq!(scalar(sql), tcpdump_count("udp port 53").to_string());
}

#[test]
fn top_talkers_match_a_direct_count() {
    let mut bytes: HashMap<String, u64> = HashMap::new();
    let mut reader = CaptureReader::open(&lan_hour()).unwrap();
    while let Some(frame) = reader.next_frame() {
        let frame = frame.unwrap();
        let headers = hindsight_decode::decode(frame.link_type, frame.data);
        if let Some(src) = headers.src_addr {
            *bytes.entry(src.to_string()).or_default() += u64::from(frame.wire_len);
        }
    }
    let mut expected: Vec<(String, u64)> = bytes.into_iter().collect();
    expected.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    expected.truncate(5);
    let csv = query(
        "SELECT ip_str(src_addr) AS talker, sum(wire_len) AS bytes FROM packets \
         WHERE src_addr IS NOT NULL GROUP BY 1 ORDER BY bytes DESC, talker LIMIT 5",
    );
    let got: Vec<(String, u64)> = csv
        .lines()
        .skip(1)
        .map(|line| {
            let (talker, bytes) = line.split_once(',').unwrap();
            (talker.to_owned(), bytes.parse().unwrap())
        })
        .collect();
    assert_eq!(got, expected);
}

#[test]
fn time_buckets_cover_every_packet() {
    let csv = query(
        "SELECT time_bucket(INTERVAL '10 minutes', ts) AS bucket, count(*) AS packets \
         FROM packets GROUP BY 1 ORDER BY 1",
    );
    let rows: Vec<&str> = csv.lines().skip(1).collect();
    // 17:00:39 to 18:00:38 touches the buckets 17:00 ... 18:00.
    assert_eq!(rows.len(), 7, "{csv}");
    assert!(rows[0].starts_with("2012-11-23T17:00:00"), "{csv}");
    let total: u64 = rows
        .iter()
        .map(|row| row.rsplit(',').next().unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(total, 62_781);
}

#[test]
fn time_conditions_skip_segments() {
    let session = SqlSession::open(archive()).unwrap();
    let all = session
        .explain("SELECT sum(wire_len) FROM packets")
        .unwrap();
    let window = session
        .explain(
            "SELECT sum(wire_len) FROM packets \
             WHERE ts >= '2012-11-23T17:20:00Z' AND ts < '2012-11-23T17:25:00Z'",
        )
        .unwrap();
    let files = |plan: &str| plan.matches(".parquet").count();
    assert!(files(&all) >= 7, "{all}");
    assert!(files(&window) <= 2, "{window}");
    let count = scalar(
        "SELECT count(*) FROM packets \
         WHERE ts >= '2012-11-23T17:20:00Z' AND ts < '2012-11-23T17:25:00Z'",
    );
    let start = 1_353_691_200_i64 * 1_000_000_000; // 2012-11-23T17:20:00Z
    let end = start + 300 * 1_000_000_000;
    let mut reader = CaptureReader::open(&lan_hour()).unwrap();
    let mut in_window = 0u64;
    while let Some(frame) = reader.next_frame() {
        let ts = frame.unwrap().ts_nanos;
        in_window += u64::from(ts >= start && ts < end);
    }
    assert_eq!(count, in_window.to_string());
}

#[test]
fn output_formats_print_addresses_as_text() {
    let session = SqlSession::open(archive()).unwrap();
    let sql = "SELECT src_addr, eth_src FROM packets WHERE src_addr = ip('10.64.88.105') LIMIT 1";
    for (format, expected) in [
        (Format::Csv, "src_addr,eth_src\n10.64.88.105,"),
        (
            Format::Jsonl,
            "{\"src_addr\":\"10.64.88.105\",\"eth_src\":\"",
        ),
        (Format::Table, "| 10.64.88.105 |"),
    ] {
        let mut out = Vec::new();
        session
            .run(sql, format, &mut out, &Limits::default())
            .unwrap();
        let text = String::from_utf8(out).unwrap();
        let found = match format {
            Format::Table => text.contains(expected),
            _ => text.starts_with(expected),
        };
        assert!(found, "{format:?}: {text}");
    }
}

#[test]
fn errors_are_clear() {
    let session = SqlSession::open(archive()).unwrap();
    let mut out = Vec::new();
    let error = session
        .run(
            "SELECT nope FROM packets",
            Format::Csv,
            &mut out,
            &Limits::default(),
        )
        .unwrap_err();
    assert!(error.to_string().contains("nope"), "{error}");
    let error = session
        .run(
            "SELECT ip('not-an-address')",
            Format::Csv,
            &mut out,
            &Limits::default(),
        )
        .unwrap_err();
    assert!(error.to_string().contains("not-an-address"), "{error}");
    let limits = Limits {
        max_rows: Some(10),
        ..Limits::default()
    };
    let error = session
        .run("SELECT ts FROM packets", Format::Csv, &mut out, &limits)
        .unwrap_err();
    assert!(
        matches!(error, SqlError::TooManyRows { max_rows: 10 }),
        "{error}"
    );
}

#[test]
fn a_statement_stops_when_its_cancel_flag_is_set() {
    let session = SqlSession::open(archive()).unwrap();
    let limits = Limits {
        cancel: hindsight_sql::Cancel::new(),
        ..Limits::default()
    };
    let flag = limits.cancel.clone();
    let setter = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(200));
        flag.cancel();
    });
    // Hours of work: only the flag ends it.
    let mut out = Vec::new();
    let error = session
        .run(
            "SELECT count(*) FROM packets a, packets b, packets c WHERE a.wire_len + b.wire_len = c.wire_len + 1",
            Format::Csv,
            &mut out,
            &limits,
        )
        .unwrap_err();
    setter.join().unwrap();
    assert!(matches!(error, SqlError::Cancelled), "{error}");
    assert!(error.to_string().contains("client went away"), "{error}");
}

#[test]
fn network_functions_agree_with_tcpdump_net() {
    let net = scalar("SELECT count(*) FROM packets WHERE ip_in(src_addr, '10.64.88.0/24')");
    assert_eq!(net, tcpdump_count("src net 10.64.88.0/24").to_string());
    let prefix =
        scalar("SELECT count(*) FROM packets WHERE ip_prefix(src_addr, 16) = ip('10.64.0.0')");
    assert_eq!(prefix, tcpdump_count("src net 10.64.0.0/16").to_string());
    let printed = scalar("SELECT ip_str(ip_prefix(ip('10.1.2.3'), 20))");
    assert_eq!(printed, "10.1.0.0");
    let printed = scalar("SELECT ip_str(ip_prefix(ip('2001:db8:1:2::9'), 48))");
    assert_eq!(printed, "2001:db8:1::");

    let session = SqlSession::open(archive()).unwrap();
    let home_count = "SELECT count(*) AS n FROM packets WHERE ip_home(dst_addr)";
    let error = session.collect(home_count, None).unwrap_err().to_string();
    assert!(error.contains("no home network is set"), "{error}");
    session.set_home(vec![
        hindsight_model::network_range("10.64.88.0/24").unwrap(),
        hindsight_model::network_range("10.151.0.0/16").unwrap(),
    ]);
    let batches = session.collect(home_count, None).unwrap();
    let text = hindsight_sql::ScalarValue::try_from_array(batches[0].column(0), 0).unwrap();
    assert_eq!(
        text.to_string(),
        tcpdump_count("dst net 10.64.88.0/24 or dst net 10.151.0.0/16").to_string()
    );
    let error = session
        .collect("SELECT ip_in(src_addr, '10.0.0.0/40') FROM packets", None)
        .unwrap_err()
        .to_string();
    assert!(error.contains("prefix length"), "{error}");
}

/// The single value of a script's one-row answer.
fn script_scalar(session: &SqlSession, sql: &str) -> String {
    let script = session.script(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
    session.prepare_script(&script).unwrap();
    let batches = session.run_script(&script, &[], None).unwrap();
    let batch = batches.iter().find(|b| b.num_rows() > 0).expect("a row");
    hindsight_sql::ScalarValue::try_from_array(batch.column(0), 0)
        .unwrap()
        .to_string()
}

#[test]
fn a_script_binds_its_stages_into_later_statements() {
    let session = SqlSession::open(archive()).unwrap();
    // The busiest source (10.64.88.105 in lan-hour), found by a stage, then
    // its packets through a condition bound to the stage's rows.
    let top = "CREATE TEMPORARY TABLE top AS \
               SELECT src_addr FROM packets GROUP BY src_addr ORDER BY count(*) DESC LIMIT 1;";
    let count = script_scalar(
        &session,
        &format!("{top} SELECT count(*) FROM packets WHERE src_addr IN (SELECT src_addr FROM top)"),
    );
    assert_eq!(count, tcpdump_count("src host 10.64.88.105").to_string());
    let others = script_scalar(
        &session,
        &format!(
            "{top} SELECT count(*) FROM packets \
             WHERE src_addr NOT IN (SELECT src_addr FROM top) AND ip_version = 4"
        ),
    );
    assert_eq!(
        others,
        tcpdump_count("ip and not src host 10.64.88.105").to_string()
    );
    // A scalar subquery over a stage, and a stage read by the next stage.
    let busiest = script_scalar(
        &session,
        &format!(
            "{top} CREATE TEMPORARY TABLE busiest AS SELECT ip_str(src_addr) AS a FROM top; \
             SELECT (SELECT a FROM busiest)"
        ),
    );
    assert_eq!(busiest, "10.64.88.105");
    // An empty stage: NOT IN nothing is every row, IN nothing none.
    let none = "CREATE TEMPORARY TABLE none AS SELECT src_addr FROM packets WHERE false;";
    let all = script_scalar(
        &session,
        &format!(
            "{none} SELECT count(*) FROM packets WHERE src_addr NOT IN (SELECT src_addr FROM none)"
        ),
    );
    assert_eq!(all, scalar("SELECT count(*) FROM packets"));
    let zero = script_scalar(
        &session,
        &format!(
            "{none} SELECT count(*) FROM packets WHERE src_addr IN (SELECT src_addr FROM none)"
        ),
    );
    assert_eq!(zero, "0");
}

#[test]
fn scripts_that_are_not_stages_then_a_query_are_refused() {
    let session = SqlSession::open(archive()).unwrap();
    for (sql, expected) in [
        ("SELECT 1; SELECT 2", "CREATE TEMPORARY TABLE name AS"),
        ("CREATE TEMPORARY TABLE a AS SELECT 1", "ends with a stage"),
        (
            "CREATE TEMPORARY TABLE packets AS SELECT 1; SELECT 1",
            "cannot be named packets",
        ),
        (
            "CREATE TEMPORARY TABLE a AS SELECT 1; CREATE TEMPORARY TABLE a AS SELECT 2; SELECT 1",
            "two stages are named a",
        ),
        (
            "CREATE TABLE a AS SELECT 1; SELECT 1",
            "CREATE TEMPORARY TABLE name AS",
        ),
        (
            "CREATE TEMPORARY TABLE a AS SELECT 1; COPY (SELECT 1) TO '/tmp/x.csv'",
            "COPY is refused",
        ),
        ("", "no statement"),
    ] {
        let error = session.script(sql).map(|_| ()).unwrap_err().to_string();
        assert!(error.contains(expected), "{sql}: {error}");
    }
}

/// One node, in this process: each fragment runs on a session over the
/// test's archive, as `serve` runs it; the fragments are kept.
#[derive(Debug, Default)]
struct LocalNode {
    fragments: std::sync::Mutex<Vec<Vec<u8>>>,
    missing: std::sync::Mutex<Vec<String>>,
}

impl hindsight_sql::Nodes for LocalNode {
    fn route(
        &self,
        _table: hindsight_store::Table,
        _time: hindsight_store::TimeRange,
        _addresses: &[Vec<(hindsight_model::Addr16, hindsight_model::Addr16)>],
    ) -> Vec<String> {
        vec!["local".to_owned()]
    }

    fn ask(&self, _node: &str, fragment: &[u8]) -> Result<Box<dyn std::io::Read + Send>, String> {
        self.fragments.lock().unwrap().push(fragment.to_vec());
        let session = SqlSession::open(archive()).map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        session
            .run_fragment(fragment, &mut out, &Limits::default())
            .map_err(|e| e.to_string())?;
        Ok(Box::new(std::io::Cursor::new(out)))
    }

    fn missing(&self, node: &str, reason: String) {
        self.missing
            .lock()
            .unwrap()
            .push(format!("{node}: {reason}"));
    }
}

#[test]
fn a_statement_cut_into_fragments_answers_as_the_archive_and_bad_fragments_are_refused() {
    let node = std::sync::Arc::new(LocalNode::default());
    let federated = SqlSession::federated(node.clone(), None).unwrap();
    for sql in [
        "SELECT ip_proto, count(*) AS n, count(DISTINCT dst_addr) AS peers FROM packets \
         GROUP BY ip_proto ORDER BY ip_proto NULLS FIRST",
        "SELECT state, count(DISTINCT uid) AS n, sum(bytes_out) AS b FROM flows GROUP BY state ORDER BY state",
        "SELECT ip_str(src_addr) AS src, wire_len FROM packets WHERE dst_port = 53 ORDER BY ts, src LIMIT 7",
    ] {
        let mut out = Vec::new();
        federated
            .run(sql, Format::Csv, &mut out, &Limits::default())
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        assert_eq!(String::from_utf8(out).unwrap(), query(sql), "{sql}");
    }
    assert!(node.missing.lock().unwrap().is_empty());
    let fragments = node.fragments.lock().unwrap().clone();
    assert!(fragments.len() >= 3);

    // A plan that is not a cut: a scan of a file. (A scan of Parquet files
    // cannot even be decoded: the protobuf codec is built without them.)
    let local = SqlSession::open(archive()).unwrap();
    let hostile = {
        let context = datafusion::prelude::SessionContext::new();
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let secret = tempfile::NamedTempFile::with_suffix(".csv").unwrap();
        std::fs::write(secret.path(), "a,b\n1,2\n").unwrap();
        let path = secret.path().to_string_lossy().into_owned();
        runtime.block_on(async {
            let frame = context
                .read_csv(path, datafusion::prelude::CsvReadOptions::new())
                .await
                .unwrap();
            let plan = frame.create_physical_plan().await.unwrap();
            datafusion_proto::bytes::physical_plan_to_bytes(plan)
                .unwrap()
                .to_vec()
        })
    };
    let error = local
        .run_fragment(&hostile, &mut Vec::new(), &Limits::default())
        .unwrap_err()
        .to_string();
    assert!(error.contains("not one this node runs"), "{error}");

    // Damaged fragments: refused with an error, never a panic. (A cheap
    // mutation fuzzer: flipped bytes, cuts, splices, random bytes.)
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for round in 0..3000 {
        let mut bytes = fragments[round % fragments.len()].clone();
        match next() % 4 {
            0 => {
                for _ in 0..1 + next() % 4 {
                    let at = (next() as usize) % bytes.len();
                    bytes[at] ^= 1 << (next() % 8);
                }
            }
            1 => bytes.truncate((next() as usize) % bytes.len()),
            2 => {
                let at = (next() as usize) % bytes.len();
                let other = &fragments[(next() as usize) % fragments.len()];
                let from = (next() as usize) % other.len();
                bytes.splice(at..at, other[from..].iter().copied().take(64));
            }
            _ => bytes = (0..next() % 200).map(|_| next() as u8).collect(),
        }
        let _ = local.run_fragment(&bytes, &mut Vec::new(), &Limits::default());
    }
}

/// Aggregations the segments' summaries answer, each with its condition (if
/// any): the same statement reading `ip_ttl` too (which no summary holds)
/// reads the rows, and must answer the same.
const SUMMARISED: &[(&str, &str)] = &[
    (
        "SELECT ip_proto, count(*) AS packets, sum(wire_len) AS bytes, sum(cap_len) AS captured \
         FROM packets {where} GROUP BY ip_proto ORDER BY ip_proto",
        "",
    ),
    (
        "SELECT src_addr, sum(wire_len) AS n FROM packets {where} GROUP BY src_addr \
         ORDER BY n DESC, src_addr LIMIT 10",
        "",
    ),
    (
        "SELECT date_trunc('minute', ts) AS m, count(*) AS n FROM packets {where} \
         GROUP BY m ORDER BY m",
        "ip_proto = 6",
    ),
    (
        "SELECT date_trunc('hour', ts) AS h, sum(wire_len) AS n FROM packets {where} GROUP BY h ORDER BY h",
        "",
    ),
    (
        "SELECT dst_addr, count(DISTINCT src_addr) AS sources, count(vlan_outer) AS tagged, \
         min(ip_version) AS lo, max(eth_type) AS hi FROM packets {where} \
         GROUP BY dst_addr ORDER BY sources DESC, dst_addr LIMIT 20",
        "ip_version IS NOT NULL",
    ),
    (
        "SELECT count(*) AS n, sum(wire_len) AS b FROM packets {where}",
        "src_addr = ip('10.174.200.10') OR dst_addr = ip('10.174.200.10')",
    ),
    (
        "SELECT count(*) AS n, sum(wire_len) AS b FROM packets {where}",
        "ip_proto = 250",
    ),
    (
        "SELECT iface, link_type, status, count(*) AS n FROM packets {where} \
         GROUP BY iface, link_type, status ORDER BY iface, link_type, status",
        "NOT (ip_proto = 17)",
    ),
    (
        "SELECT ip_proto, count(*) AS n, sum(wire_len) AS b FROM packets {where} \
         GROUP BY ip_proto ORDER BY ip_proto",
        "src_port = 53 OR dst_port = 53",
    ),
    (
        "SELECT tcp_flags, icmp_type, count(*) AS n FROM packets {where} \
         GROUP BY tcp_flags, icmp_type ORDER BY tcp_flags, icmp_type",
        "dst_port < 1024 OR dst_port IS NULL",
    ),
    // The flows summary: exact ports with the addresses.
    (
        "SELECT dst_port, count(DISTINCT src_addr) AS n FROM packets {where} \
         GROUP BY dst_port ORDER BY n DESC, dst_port LIMIT 10",
        "ip_proto = 6",
    ),
    (
        "SELECT src_addr, count(*) AS n FROM packets {where} GROUP BY src_addr \
         ORDER BY n DESC, src_addr",
        "dst_port = 53",
    ),
    (
        "SELECT dst_port, max(src_port) AS p, count(*) AS n FROM packets {where} \
         GROUP BY dst_port ORDER BY n DESC, dst_port LIMIT 20",
        "dst_port >= 1024 AND icmp_type IS NULL",
    ),
];

fn with_condition(template: &str, conditions: &[&str]) -> String {
    let conditions: Vec<&str> = conditions
        .iter()
        .copied()
        .filter(|c| !c.is_empty())
        .collect();
    let clause = if conditions.is_empty() {
        String::new()
    } else {
        format!("WHERE {}", conditions.join(" AND "))
    };
    template.replace("{where}", &clause)
}

#[test]
fn aggregations_on_summarised_fields_read_the_summaries_and_answer_as_the_rows_do() {
    let session = SqlSession::open(archive()).unwrap();
    for (template, condition) in SUMMARISED {
        let summarised = with_condition(template, &[condition]);
        let rows = with_condition(template, &["(ip_ttl IS NULL OR ip_ttl >= 0)", condition]);
        let plan = session.explain(&summarised).unwrap();
        assert!(plan.contains("StreamingTableExec"), "{summarised}:\n{plan}");
        let plan = session.explain(&rows).unwrap();
        assert!(!plan.contains("StreamingTableExec"), "{rows}:\n{plan}");
        let (summarised_answer, rows_answer) = (query(&summarised), query(&rows));
        assert!(rows_answer.lines().count() > 1, "{rows}");
        assert_eq!(summarised_answer, rows_answer, "{summarised}");
    }
    // What the summaries cannot answer reads the rows.
    for statement in [
        "SELECT src_addr, count(*) FROM packets WHERE tcp_flags = 2 GROUP BY src_addr",
        "SELECT dst_addr, tcp_flags, count(*) FROM packets GROUP BY dst_addr, tcp_flags",
        "SELECT ip_proto, count(*) FROM packets \
         WHERE ip_proto = (SELECT max(ip_proto) FROM packets) GROUP BY ip_proto",
        "SELECT count(*) FROM packets",
        "SELECT ip_proto, avg(wire_len) FROM packets GROUP BY ip_proto",
        "SELECT ip_proto, count(*) FROM packets WHERE ts > '2012-11-23T17:10:00Z' GROUP BY ip_proto",
        "SELECT date_trunc('second', ts), count(*) FROM packets GROUP BY 1",
        "SELECT ip_proto, sum(ip_ttl) FROM packets GROUP BY ip_proto",
    ] {
        let plan = session.explain(statement).unwrap();
        assert!(!plan.contains("StreamingTableExec"), "{statement}:\n{plan}");
    }
}

#[test]
fn a_damaged_summary_is_made_again_from_its_rows() {
    use hindsight_store::parquet::file::reader::{FileReader, SerializedFileReader};
    use hindsight_store::segment::summary::{SummaryKind, SummaryLocation};

    let copy = tempfile::tempdir().unwrap();
    let status = std::process::Command::new("cp")
        .arg("-r")
        .arg(archive())
        .arg(copy.path().join("a"))
        .status()
        .unwrap();
    assert!(status.success());
    let root = copy.path().join("a");
    let mut damaged = 0;
    for entry in std::fs::read_dir(root.join("packets")).unwrap() {
        let path = entry.unwrap().path();
        let reader = SerializedFileReader::new(std::fs::File::open(&path).unwrap()).unwrap();
        let text = reader
            .metadata()
            .file_metadata()
            .key_value_metadata()
            .and_then(|kv| {
                kv.iter()
                    .find(|kv| kv.key == SummaryKind::Services.key())
                    .cloned()
            })
            .and_then(|kv| kv.value);
        // A segment below `summary_min_rows` (the last ten minutes) has none.
        let Some(text) = text else { continue };
        let location = SummaryLocation::parse(&text).unwrap();
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[(location.offset + location.len / 2) as usize] ^= 1;
        std::fs::write(&path, bytes).unwrap();
        damaged += 1;
        if damaged == 3 {
            break;
        }
    }
    assert_eq!(damaged, 3);
    let statement = with_condition(SUMMARISED[0].0, &[]);
    let session = SqlSession::open(&root).unwrap();
    let mut out = Vec::new();
    session
        .run(&statement, Format::Csv, &mut out, &Limits::default())
        .unwrap();
    assert_eq!(String::from_utf8(out).unwrap(), query(&statement));
}
