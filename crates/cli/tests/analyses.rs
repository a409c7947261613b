//! The five analyses of the live and historical paper, as built-in watches:
//! replaying a real capture through `hindsight watch --analysis` gives exactly
//! the rows the same SQL gives afterwards over the archive of that capture for
//! the same windows (`--over-archive`), where the history the analyses join
//! with is earlier copies of the capture, shifted back by days with editcap.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{fixtures_dir, hindsight, ingest, lan_hour, ok, require_tool};

/// `capture` shifted back by `secs` into `dir`, without the packets of
/// `leave_out` (a tcpdump filter) if given.
fn shifted(capture: &Path, dir: &Path, secs: u64, leave_out: Option<&str>) -> PathBuf {
    let mut source = capture.to_path_buf();
    if let Some(filter) = leave_out {
        let filtered = dir.join(format!("filtered-{secs}.pcap"));
        let status = Command::new("tcpdump")
            .args(["-r", capture.to_str().unwrap(), "-w"])
            .arg(&filtered)
            .arg(filter)
            .stderr(std::process::Stdio::null())
            .status()
            .expect("run tcpdump");
        assert!(status.success());
        source = filtered;
    }
    let out = dir.join(format!("shifted-{secs}.pcap"));
    let status = Command::new("editcap")
        .args(["-t", &format!("-{secs}")])
        .arg(&source)
        .arg(&out)
        .status()
        .expect("run editcap");
    assert!(status.success());
    out
}

/// An archive of `capture` and its copies shifted back by `shifts` seconds.
fn archive_with_history(
    capture: &Path,
    dir: &Path,
    shifts: &[u64],
    leave_out: Option<&str>,
) -> PathBuf {
    let archive = dir.join("archive");
    ingest(capture, &archive);
    for &secs in shifts {
        ingest(&shifted(capture, dir, secs, leave_out), &archive);
    }
    archive
}

/// The rows of `hindsight watch` in JSON lines, each as its text.
fn watch(args: &[&str]) -> BTreeSet<String> {
    let output = hindsight(&[&["watch", "-F", "jsonl"], args].concat());
    let stdout = ok(&output);
    assert!(
        output.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout.lines().map(str::to_owned).collect()
}

/// Runs each analysis with its parameters over `capture` replayed and over the
/// archive's copy of it; returns the rows of each, after checking they match.
fn live_equals_archive(
    capture: &Path,
    archive: &Path,
    home: &str,
    window: &str,
    (since, until): (&str, &str),
    analyses: &[(&str, &[&str])],
) -> Vec<(String, BTreeSet<String>)> {
    let archive = archive.to_str().unwrap();
    let mut all = Vec::new();
    for (analysis, params) in analyses {
        let common = [
            &[
                "--analysis",
                analysis,
                "--home",
                home,
                "--window",
                window,
                "-a",
                archive,
            ][..],
            params,
        ]
        .concat();
        let live = watch(&[&common[..], &["--replay", capture.to_str().unwrap()]].concat());
        let past = watch(
            &[
                &common[..],
                &["--over-archive", "--since", since, "--until", until],
            ]
            .concat(),
        );
        assert_eq!(live, past, "{analysis}: live and over the archive differ");
        all.push(((*analysis).to_owned(), live));
    }
    all
}

fn rows_of<'a>(all: &'a [(String, BTreeSet<String>)], analysis: &str) -> &'a BTreeSet<String> {
    &all.iter().find(|(name, _)| name == analysis).unwrap().1
}

#[test]
fn the_five_analyses_live_equal_the_same_sql_over_the_archive_on_lan_hour() {
    require_tool("editcap");
    require_tool("tcpdump");
    let dir = tempfile::tempdir().unwrap();
    // History: the hour a day and a half hour, two days and a quarter hour,
    // and a week earlier, without one host (which makes it a new elephant).
    let archive = archive_with_history(
        &lan_hour(),
        dir.path(),
        &[88_200, 173_700, 604_800],
        Some("not host 10.64.93.249"),
    );
    let all = live_equals_archive(
        &lan_hour(),
        &archive,
        "10.64.88.0/24",
        "5m",
        ("2012-11-23T17:00:00Z", "2012-11-23T18:01:00Z"),
        &[
            ("elephants", &["--param", "k=5"]),
            ("mice", &["--param", "k=5"]),
            ("portscan", &["--param", "min_fanout=3"]),
            ("matrix", &["--param", "threshold=0.99"]),
            ("dispersion", &["--param", "prefix_len=28"]),
        ],
    );
    for (analysis, rows) in &all {
        assert!(!rows.is_empty(), "{analysis} gave no rows");
    }
    // The host left out of history is a new elephant in every window it sends in.
    let elephants = rows_of(&all, "elephants");
    assert!(
        elephants
            .iter()
            .all(|row| row.contains(r#""src":"10.64.93.249""#) && row.contains(r#""days_seen":0"#)),
        "{elephants:?}"
    );
    // Sources that sent before have usual peers from history.
    assert!(
        rows_of(&all, "portscan")
            .iter()
            .any(|row| !row.contains(r#""usual_peers":0"#)),
        "no portscan row has history"
    );
}

#[test]
fn the_five_analyses_live_equal_the_same_sql_over_the_archive_on_an_nmap_scan() {
    require_tool("editcap");
    let capture = fixtures_dir().join("ndpi/synscan.pcap");
    assert!(
        capture.exists(),
        "missing {}: run scripts/fetch-fixtures",
        capture.display()
    );
    let dir = tempfile::tempdir().unwrap();
    let archive = archive_with_history(&capture, dir.path(), &[86_400, 172_810], None);
    let all = live_equals_archive(
        &capture,
        &archive,
        "64.13.134.0/24",
        "5s",
        ("2010-07-04T20:24:00Z", "2010-07-04T20:25:00Z"),
        &[
            ("elephants", &[]),
            ("mice", &[]),
            ("portscan", &[]),
            ("matrix", &[]),
            ("dispersion", &[]),
        ],
    );
    // nmap's SYN scan of scanme.nmap.org (1,000 ports in 10 s): one source,
    // hundreds of ports per window, which the shifted copies show it scanned
    // before.
    let portscan = rows_of(&all, "portscan");
    assert!(portscan.len() >= 2, "{portscan:?}");
    for row in portscan {
        let row: serde_json::Value = serde_json::from_str(row).unwrap();
        assert_eq!(row["src"], "172.16.0.8", "{row}");
        assert!(row["fanout"].as_u64().unwrap() >= 100, "{row}");
        assert!(row["connections_before"].as_u64().unwrap() > 0, "{row}");
    }
}

#[test]
fn analyses_are_listed_shown_and_refused_clearly() {
    let list = ok(&hindsight(&["watch", "--analysis", "list"]));
    for name in ["elephants", "mice", "portscan", "matrix", "dispersion"] {
        assert!(list.contains(name), "{list}");
    }
    let sql = ok(&hindsight(&["watch", "--analysis", "portscan", "--show"]));
    assert!(sql.contains("CREATE TEMPORARY TABLE scanners"), "{sql}");
    let capture = lan_hour();
    let capture = capture.to_str().unwrap();
    for (args, expected) in [
        (
            vec!["--analysis", "portscans", "--replay", capture],
            "no analysis is named",
        ),
        (
            vec!["--analysis", "mice", "--param", "kk=1", "--replay", capture],
            "no parameter \"kk\"",
        ),
        (
            vec!["--analysis", "portscan", "--replay", capture],
            "no home network is set",
        ),
        (
            vec![
                "--analysis",
                "portscan",
                "--home",
                "10.0.0.0/33",
                "--replay",
                capture,
            ],
            "prefix length",
        ),
    ] {
        let output = hindsight(&[&["watch"], &args[..]].concat());
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains(expected),
            "{args:?}: expected {expected:?} in {stderr}"
        );
    }
}
