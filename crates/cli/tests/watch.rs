//! `hindsight watch`: continuous queries over a replayed capture, checked against
//! the same SQL over the archive of the same capture.

mod common;

use std::collections::BTreeSet;

use common::{hindsight, ingest, lan_hour, ok};

/// The rows of JSON lines output, each as its text, without the watch's name.
fn rows(jsonl: &str) -> BTreeSet<String> {
    jsonl
        .lines()
        .map(|line| {
            let mut row: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
            row.as_object_mut().expect("an object").remove("watch");
            row.to_string()
        })
        .collect()
}

/// Runs a watch over lan-hour with tumbling windows of `window`, JSON lines.
fn watch(sql: &str, window: &str, archive: Option<&str>) -> String {
    let capture = lan_hour();
    let mut args = vec![
        "watch",
        "--sql",
        sql,
        "--window",
        window,
        "--replay",
        capture.to_str().unwrap(),
        "-F",
        "jsonl",
    ];
    if let Some(archive) = archive {
        args.extend(["--archive", archive]);
    }
    let output = hindsight(&args);
    assert!(
        output.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    ok(&output)
}

/// The same question over the archive afterwards: `grouped` is a statement with
/// `window_start` and `window_end` columns computed from the row's time.
fn over_archive(archive: &str, grouped: &str) -> String {
    ok(&hindsight(&[
        "sql",
        "--sealed-only",
        "--archive",
        archive,
        "-F",
        "jsonl",
        grouped,
    ]))
}

#[test]
fn tumbling_windows_over_a_replay_equal_the_same_sql_over_the_archive() {
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("archive");
    ingest(&lan_hour(), &archive);
    let archive = archive.to_str().unwrap();

    // Packets: bytes and distinct destinations per source, 5-minute windows.
    let live = watch(
        "SELECT ip_str(src_addr) AS src, count(*) AS packets, sum(wire_len) AS bytes, \
         count(DISTINCT dst_addr) AS peers FROM live_packets GROUP BY src_addr",
        "5m",
        None,
    );
    let history = over_archive(
        archive,
        "SELECT time_bucket(INTERVAL '5 minutes', ts) AS window_start, \
         time_bucket(INTERVAL '5 minutes', ts) + INTERVAL '5 minutes' AS window_end, \
         ip_str(src_addr) AS src, count(*) AS packets, sum(wire_len) AS bytes, \
         count(DISTINCT dst_addr) AS peers FROM packets GROUP BY 1, 2, src_addr",
    );
    let live_rows = rows(&live);
    assert!(live_rows.len() > 100, "{} rows", live_rows.len());
    assert_eq!(live_rows, rows(&history));

    // Connection records: in the window in which they ended.
    let live = watch(
        "SELECT ip_proto, count(*) AS connections, sum(bytes_out + bytes_in) AS bytes \
         FROM live_flows WHERE last_ts >= :window_start AND last_ts < :window_end \
         GROUP BY ip_proto",
        "10m",
        None,
    );
    let history = over_archive(
        archive,
        "SELECT time_bucket(INTERVAL '10 minutes', last_ts) AS window_start, \
         time_bucket(INTERVAL '10 minutes', last_ts) + INTERVAL '10 minutes' AS window_end, \
         ip_proto, count(*) AS connections, sum(bytes_out + bytes_in) AS bytes \
         FROM flows GROUP BY 1, 2, ip_proto",
    );
    assert!(rows(&live).len() >= 6, "{live}");
    assert_eq!(rows(&live), rows(&history));

    // The join with history: each window's busiest source and its connections
    // in the archive.
    let live = watch(
        "SELECT ip_str(l.src_addr) AS src, l.packets, \
         (SELECT count(*) FROM flows f WHERE f.src_addr = l.src_addr) AS connections_ever \
         FROM (SELECT src_addr, count(*) AS packets FROM live_packets GROUP BY src_addr \
         ORDER BY packets DESC LIMIT 1) l",
        "30m",
        Some(archive),
    );
    let ever = over_archive(
        archive,
        "SELECT count(*) AS n FROM flows WHERE src_addr = ip('10.64.88.105')",
    );
    let ever: serde_json::Value = serde_json::from_str(ever.trim()).unwrap();
    let first: serde_json::Value = serde_json::from_str(live.lines().next().unwrap()).unwrap();
    assert_eq!(first["src"], "10.64.88.105", "{live}");
    assert_eq!(first["connections_ever"], ever["n"], "{live}");
}

#[test]
fn bad_statements_and_windows_are_clear_errors() {
    let capture = lan_hour();
    let capture = capture.to_str().unwrap();
    for (args, expected) in [
        (vec!["--sql", "SELEC 1", "--replay", capture], "SELEC"),
        (
            vec!["--sql", "SELECT * FROM nowhere", "--replay", capture],
            "nowhere",
        ),
        (
            vec![
                "--sql", "SELECT 1", "--window", "10s", "--slide", "3s", "--replay", capture,
            ],
            "whole number of slides",
        ),
        (
            vec!["--sql", "SELECT 1", "--window", "ten", "--replay", capture],
            "duration",
        ),
        (
            vec![
                "--sql",
                "COPY (SELECT 1) TO '/tmp/x.csv'",
                "--replay",
                capture,
            ],
            "refused",
        ),
        (
            vec!["--sql", "SELECT 1", "--replay", "/nonexistent.pcap"],
            "/nonexistent.pcap",
        ),
    ] {
        let mut full = vec!["watch"];
        full.extend(args);
        let output = hindsight(&full);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{full:?}");
        assert!(stderr.contains(expected), "{full:?}: {stderr}");
    }
}
