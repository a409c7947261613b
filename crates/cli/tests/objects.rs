//! Segments copied to S3-compatible object storage (issue 22): a real
//! SeaweedFS server on 127.0.0.1, started by the test (`scripts/setup` builds
//! it); an archive with `[archive] object_store` copies every sealed segment
//! there, byte for byte, and once the local files are gone (or damaged) SQL
//! and packet searches answer from the copies as they did from the files.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::seaweedfs::{list, start_seaweedfs};
use common::{lan_hour, ok};

/// `hindsight` with the test store's credentials.
fn hindsight_s3() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_hindsight"));
    command
        .env("AWS_ACCESS_KEY_ID", "hindsight")
        .env("AWS_SECRET_ACCESS_KEY", "hindsight-secret");
    command
}

/// A SeaweedFS server in `dir/seaweedfs`, and its S3 port.
fn start_store(dir: &Path) -> (common::seaweedfs::Reaped, u16) {
    let store_dir = dir.join("seaweedfs");
    std::fs::create_dir_all(&store_dir).unwrap();
    start_seaweedfs(&store_dir)
}

/// `archive`'s config.toml: its copies at `s3://hindsight/PREFIX` of the
/// store on `port`, then `more` lines.
fn store_config(archive: &Path, port: u16, prefix: &str, more: &str) {
    std::fs::create_dir_all(archive).unwrap();
    std::fs::write(
        archive.join("config.toml"),
        format!(
            "[archive]\nobject_store = \"s3://hindsight/{prefix}\"\nendpoint = \"http://127.0.0.1:{port}\"\n{more}"
        ),
    )
    .unwrap();
}

/// `hindsight query FILTER` as pcap: its bytes, and its stderr.
fn query(archive: &Path, filter: &str) -> (Vec<u8>, String) {
    let out = archive.with_extension(format!("{}.pcap", filter.len()));
    let output = hindsight_s3()
        .args(["query", filter, "--archive"])
        .arg(archive)
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "{filter}: {stderr}");
    (std::fs::read(&out).unwrap(), stderr)
}

fn sql(archive: &Path, statement: &str) -> std::process::Output {
    hindsight_s3()
        .args(["sql", statement, "--archive"])
        .arg(archive)
        .args(["-F", "csv"])
        .output()
        .unwrap()
}

/// `hindsight check` (with `--repair` if `repair`), which must pass: its
/// stdout and stderr.
fn check(archive: &Path, repair: bool) -> String {
    let mut command = Command::new(env!("CARGO_BIN_EXE_hindsight"));
    command.args(["check", "--archive"]).arg(archive);
    if repair {
        command.arg("--repair");
    }
    let output = command.output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "{text}");
    text
}

#[test]
fn sealed_segments_are_copied_to_s3_and_read_there_once_the_local_files_are_gone() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, s3) = start_store(dir.path());
    let archive = dir.path().join("archive");
    store_config(&archive, s3, "recorder-1", "");
    let output = hindsight_s3()
        .args(["ingest"])
        .arg(lan_hour())
        .arg("--archive")
        .arg(&archive)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains("segment(s)") && stderr.contains("to s3://hindsight/recorder-1"),
        "{stderr}"
    );

    // Every segment is there, byte for byte, under the archive's own paths.
    let objects = list(s3, "recorder-1/");
    let mut files = Vec::new();
    for table in ["packets", "flows"] {
        for entry in std::fs::read_dir(archive.join(table))
            .unwrap()
            .map(Result::unwrap)
        {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(".parquet") {
                files.push((format!("recorder-1/{table}/{name}"), entry.path()));
            }
        }
    }
    assert!(files.len() >= 2, "{files:?}");
    assert_eq!(objects.len(), files.len(), "{objects:?}");
    for (key, path) in &files {
        let copy = ureq::get(format!("http://127.0.0.1:{s3}/hindsight/{key}"))
            .call()
            .unwrap()
            .into_body()
            .with_config()
            .limit(1 << 30)
            .read_to_vec()
            .unwrap();
        assert_eq!(copy, std::fs::read(path).unwrap(), "{key}");
    }
    // Copied once: a second ingest copies only its own new segments.
    let log = std::fs::read_to_string(archive.join("objects.log")).unwrap();
    assert_eq!(log.lines().count(), files.len());

    let statements = [
        "SELECT count(*) AS n, sum(wire_len) AS bytes, min(ts) AS first FROM packets",
        "SELECT ip_proto, count(DISTINCT src_addr) AS sources FROM packets GROUP BY 1 ORDER BY 1 NULLS FIRST",
        "SELECT state, count(*) AS n, sum(bytes_out) AS b FROM flows GROUP BY state ORDER BY state",
    ];
    let before: Vec<String> = statements.iter().map(|s| ok(&sql(&archive, s))).collect();
    // Every segment read (tcp), granules of a busy address, covering postings
    // of a rare one (answered without the files), and a port.
    let filters = ["tcp", "host 172.30.100.1", "host 10.7.243.1", "udp port 53"];
    let packets_before: Vec<Vec<u8>> = filters.iter().map(|f| query(&archive, f).0).collect();
    assert!(packets_before.iter().all(|pcap| pcap.len() > 24));

    // The local copies expire first: SQL and packet searches read the copies
    // in the store. One file damaged instead (cut short) is read from its
    // copy too.
    let (_, damaged) = &files[0];
    let bytes = std::fs::read(damaged).unwrap();
    std::fs::write(damaged, &bytes[..bytes.len() / 2]).unwrap();
    for (filter, expected) in filters.iter().zip(&packets_before) {
        let (pcap, stderr) = query(&archive, filter);
        assert!(pcap == *expected, "{filter}: {stderr}");
        assert!(!stderr.contains("incomplete"), "{filter}: {stderr}");
    }
    for (_, path) in &files {
        std::fs::remove_file(path).unwrap();
    }
    for (statement, expected) in statements.iter().zip(&before) {
        let output = sql(&archive, statement);
        assert_eq!(&ok(&output), expected, "{statement}");
        assert!(
            !String::from_utf8_lossy(&output.stderr).contains("incomplete"),
            "{output:?}"
        );
    }
    for (filter, expected) in filters.iter().zip(&packets_before) {
        let (pcap, stderr) = query(&archive, filter);
        assert!(pcap == *expected, "{filter}: {stderr}");
        assert!(!stderr.contains("incomplete"), "{filter}: {stderr}");
    }
    // `check` counts the copies as the segments' (no damage), and a repair
    // sets none aside.
    for repair in [false, true] {
        let text = check(&archive, repair);
        assert_eq!(
            text.matches("read from its copy in the object store")
                .count(),
            files.len(),
            "{text}"
        );
        assert!(!text.contains("(set aside)"), "{text}");
        assert!(text.contains("flows segments: 6320 record(s)"), "{text}");
    }
    // The fetched copies took disk only while they were read.
    let fetched = archive.join("fetched");
    assert_eq!(std::fs::read_dir(&fetched).unwrap().count(), 0);
    // A copy whose bytes are not the sealed ones is not read: the answer says
    // it went without the segment.
    let (key, _) = files
        .iter()
        .find(|(key, _)| key.contains("/packets/"))
        .unwrap();
    ureq::put(format!("http://127.0.0.1:{s3}/hindsight/{key}"))
        .send(&b"not the segment"[..])
        .unwrap();
    let (_, stderr) = query(&archive, "tcp");
    assert!(
        stderr.contains("its copy") && stderr.contains("CRC-32") && stderr.contains("incomplete"),
        "{stderr}"
    );
    // Without the store, the same statement says what it went without.
    std::fs::write(archive.join("config.toml"), "").unwrap();
    let output = sql(&archive, statements[0]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("the file is missing") && stderr.contains("incomplete"),
        "{stderr}"
    );
}

/// `hindsight serve` on `archive` (no capture), its stderr lines gathered.
fn serve(archive: &Path) -> (std::process::Child, Arc<Mutex<Vec<String>>>) {
    let mut child = hindsight_s3()
        .args(["serve", "--listen", "127.0.0.1:0", "--archive"])
        .arg(archive)
        .env_remove("HINDSIGHT_API_TOKEN")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = Arc::new(Mutex::new(Vec::new()));
    let (stderr, gathered) = (child.stderr.take().unwrap(), Arc::clone(&lines));
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            eprintln!("serve: {line}");
            gathered.lock().unwrap().push(line);
        }
    });
    (child, lines)
}

#[test]
fn serve_copies_every_sealed_segment() {
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("archive");
    common::ingest(&lan_hour(), &archive);

    // With the store there, every sealed segment is copied.
    let (_server, s3) = start_store(dir.path());
    store_config(&archive, s3, "recorder-2", "");
    let (mut child, lines) = serve(&archive);
    let segments = std::fs::read_to_string(archive.join("catalog.jsonl"))
        .unwrap()
        .lines()
        .count();
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::fs::read_to_string(archive.join("objects.log")).map_or(0, |log| log.lines().count())
        < segments
    {
        assert!(Instant::now() < deadline, "{:#?}", lines.lock().unwrap());
        std::thread::sleep(Duration::from_millis(200));
    }
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(list(s3, "recorder-2/").len(), segments);
    assert!(
        lines
            .lock()
            .unwrap()
            .iter()
            .any(|line| line.contains(&format!("copied {segments} segment(s)"))),
        "{:#?}",
        lines.lock().unwrap()
    );
}

/// `hindsight ingest` of lan-hour into `archive` in 5-minute partitions.
fn ingest_partitioned(archive: &Path) -> String {
    let output = hindsight_s3()
        .args(["ingest", "--partition-secs", "300", "--archive"])
        .arg(archive)
        .arg(lan_hour())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "{stderr}");
    stderr
}

#[test]
fn a_local_bound_removes_the_oldest_copied_files_and_retention_their_postings() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, s3) = start_store(dir.path());
    // The same capture without a store: the answers to compare with.
    let plain = dir.path().join("plain");
    ingest_partitioned(&plain);
    let archive = dir.path().join("archive");
    store_config(&archive, s3, "recorder-3", "local_max_bytes = 1\n");
    let stderr = ingest_partitioned(&archive);
    assert!(stderr.contains("removed the local files of"), "{stderr}");

    // Every copied segment but the newest of each table is held as a copy
    // alone, and a packets segment's addresses are kept.
    let catalog = std::fs::read_to_string(archive.join("catalog.jsonl")).unwrap();
    let entries: Vec<serde_json::Value> = catalog
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let local = entries
        .iter()
        .filter(|entry| archive.join(entry["file"].as_str().unwrap()).exists())
        .count();
    assert_eq!(local, 2, "{catalog}");
    let kept = std::fs::read_dir(archive.join("copy-only"))
        .unwrap()
        .count();
    let packets = entries
        .iter()
        .filter(|entry| entry["table"] == "packets")
        .count();
    assert!(packets >= 3, "{catalog}");
    assert_eq!(kept, packets - 1);
    // Answers are the same as from local files.
    for filter in ["tcp", "host 172.30.100.1", "host 10.7.243.1"] {
        let (pcap, stderr) = query(&archive, filter);
        assert!(pcap == query(&plain, filter).0, "{filter}: {stderr}");
        assert!(!stderr.contains("incomplete"), "{filter}: {stderr}");
    }
    let text = check(&archive, false);
    assert_eq!(
        text.matches("read from its copy in the object store")
            .count(),
        entries.len() - 2,
        "{text}"
    );

    // Retention removes segments held only as copies with their postings
    // (from the kept addresses), and forgets their addresses.
    store_config(
        &archive,
        s3,
        "recorder-3",
        "local_max_bytes = 1\n[packets]\nmax_bytes = 1\n",
    );
    ingest_partitioned(&archive);
    let text = check(&archive, false);
    assert!(text.contains("the archive is sound"), "{text}");
    assert!(!text.contains("which the catalog does not list"), "{text}");
    assert_eq!(
        std::fs::read_dir(archive.join("copy-only"))
            .unwrap()
            .count(),
        0
    );
}
