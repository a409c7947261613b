//! `hindsight watch`: continuous queries over a replayed capture, checked against
//! the same SQL over the archive of the same capture.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::net::UdpSocket;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{hindsight, ingest, lan_hour, ok, require_tool, start_nfcapd};

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

/// Starts `hindsight watch` with `args`, JSON lines out; returns it once its
/// first line on stderr (`watching ...`) is there, with that line.
fn start_watch(args: &[&str]) -> (Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_hindsight"))
        .args(["watch", "-F", "jsonl"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start hindsight watch");
    let mut first = String::new();
    BufReader::new(child.stderr.as_mut().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.starts_with("watching"), "{first}");
    (child, first)
}

/// Stops a watch with SIGINT; its rows, parsed.
fn stop_watch(child: Child) -> Vec<serde_json::Value> {
    ok(&Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .output()
        .expect("run kill"));
    let output = child.wait_with_output().unwrap();
    let stdout = ok(&output);
    stdout
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect()
}

#[test]
fn a_watch_on_an_interface_counts_every_packet_sent() {
    // Loopback, and only this test's datagrams to one port.
    let target = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = target.local_addr().unwrap().port();
    let sql =
        format!("SELECT count(*) AS n FROM live_packets WHERE ip_proto = 17 AND dst_port = {port}");
    let (child, _) = start_watch(&["-i", "lo", "--window", "1s", "--sql", &sql]);
    let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
    let sent = 25;
    for _ in 0..sent {
        sender.send_to(b"hindsight", ("127.0.0.1", port)).unwrap();
        std::thread::sleep(Duration::from_millis(100));
    }
    // Windows close by the clock while the link is quiet.
    std::thread::sleep(Duration::from_millis(1500));
    let rows = stop_watch(child);
    let counted: u64 = rows.iter().map(|row| row["n"].as_u64().unwrap()).sum();
    assert_eq!(counted, sent, "{rows:?}");
    let windows: BTreeSet<&str> = rows
        .iter()
        .map(|row| row["window_start"].as_str().unwrap())
        .collect();
    assert!(windows.len() >= 2, "{rows:?}");
}

#[test]
fn a_watch_on_a_collector_windows_the_records_as_nfdump_reads_them() {
    require_tool("softflowd");
    require_tool("nfcapd");
    require_tool("nfdump");
    let work = tempfile::tempdir().unwrap();
    let (child, first) = start_watch(&[
        "--collect",
        "udp://127.0.0.1:0",
        "--lateness",
        "2h",
        "--window",
        "10m",
        "--sql",
        "SELECT count(*) AS records, sum(bytes_out) AS bytes FROM live_flows",
    ]);
    let listening = first
        .split("udp://")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap()
        .to_owned();
    let nfcapd_dir = work.path().join("nfcapd");
    let (mut nfcapd, nfcapd_port) = start_nfcapd(&nfcapd_dir, &listening);
    // softflowd's export of lan-hour (`-a`: the flows' times from the packets)
    // to nfcapd, which repeats every export packet it receives to the watch:
    // both see the same packets (nfcapd may drop some of softflowd's
    // end-of-file burst, and then neither has them).
    ok(&Command::new("softflowd")
        .args(["-a", "-r"])
        .arg(lan_hour())
        .args([
            "-n",
            &format!("127.0.0.1:{nfcapd_port}"),
            "-v",
            "9",
            "-c",
            "none",
        ])
        .arg("-p")
        .arg(work.path().join("softflowd.pid"))
        .stdin(Stdio::null())
        .output()
        .expect("run softflowd"));
    std::thread::sleep(Duration::from_secs(1));
    let rows = stop_watch(child);
    ok(&Command::new("kill")
        .args(["-TERM", &nfcapd.id().to_string()])
        .output()
        .unwrap());
    assert!(nfcapd.wait().unwrap().success());

    // nfdump's records, by the 10-minute window in which they ended.
    let text = ok(&Command::new("nfdump")
        .env("TZ", "UTC")
        .args(["-q", "-N", "-o", "fmt:%te|%byt", "-R"])
        .arg(&nfcapd_dir)
        .output()
        .expect("run nfdump"));
    let mut theirs: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let (end, bytes) = line.split_once('|').unwrap();
        // "2012-11-23 17:09:59.123": the window starts at the ten minutes.
        let end = end.trim();
        let window = format!("{}T{}0:00Z", &end[..10], &end[11..15]);
        let entry = theirs.entry(window).or_default();
        entry.0 += 1;
        entry.1 += bytes.trim().parse::<u64>().unwrap();
    }
    let ours: BTreeMap<String, (u64, u64)> = rows
        .iter()
        .map(|row| {
            (
                row["window_start"].as_str().unwrap().to_owned(),
                (
                    row["records"].as_u64().unwrap(),
                    row["bytes"].as_u64().unwrap(),
                ),
            )
        })
        .collect();
    assert!(
        theirs.values().map(|v| v.0).sum::<u64>() > 2_000,
        "{theirs:?}"
    );
    assert_eq!(ours, theirs);
}

#[test]
fn a_watch_whose_reader_goes_away_stops_reading_its_stream() {
    // The stream is a FIFO fed lan-hour's packets thirty times over; the
    // watch's reader takes one line and goes. A watch that stops closes the
    // FIFO, and the feeder's writes then fail; one that read on would take
    // all of them.
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("stream.pcap");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    let mut child = Command::new(env!("CARGO_BIN_EXE_hindsight"))
        .args([
            "watch",
            "--window",
            "1s",
            "-F",
            "jsonl",
            "--sql",
            "SELECT count(*) AS n FROM live_packets",
            "--replay",
        ])
        .arg(&fifo)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let capture = std::fs::read(lan_hour()).unwrap();
    let feeder = std::thread::spawn(move || -> std::io::Result<()> {
        use std::io::Write;
        let mut out = std::fs::OpenOptions::new().write(true).open(&fifo)?;
        out.write_all(&capture)?;
        for _ in 0..30 {
            out.write_all(&capture[24..])?;
        }
        Ok(())
    });
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.contains(r#""n":"#), "{first}");
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let fed = feeder.join().unwrap();
    assert!(
        fed.as_ref()
            .is_err_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe),
        "the watch read on to the end of its stream: {fed:?}"
    );
}
