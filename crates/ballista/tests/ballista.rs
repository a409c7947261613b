//! The distributed engine's recipe (issue 22): lan-hour ingested into an
//! archive that copies its segments to a real SeaweedFS, a Ballista scheduler
//! and two executors on 127.0.0.1, and statements over `flows` and `packets`
//! that give, on the cluster reading the copies, the rows `hindsight sql`
//! gives on the archive.

#[path = "../../cli/tests/common/seaweedfs.rs"]
mod seaweedfs;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use hindsight_ingest::{IngestOptions, Ingestor};
use hindsight_sql::ObjectStoreSettings;
use hindsight_sql::{Format, Limits, SqlSession};
use seaweedfs::{Reaped, list, start_seaweedfs};

const KEY: (&str, &str) = ("AWS_ACCESS_KEY_ID", "hindsight");
const SECRET: (&str, &str) = ("AWS_SECRET_ACCESS_KEY", "hindsight-secret");

/// What the cluster is asked, each compared with `hindsight sql`.
const STATEMENTS: &[&str] = &[
    // The talkers, with every sum and count of the records.
    "SELECT ip_str(src_addr) AS src, count(*) AS records, sum(packets_out + packets_in) AS packets, \
     sum(bytes_out + bytes_in) AS bytes FROM flows GROUP BY src ORDER BY bytes DESC, src LIMIT 15",
    // Services and their distinct clients.
    "SELECT dst_port, ip_proto, count(*) AS records, count(DISTINCT src_addr) AS clients \
     FROM flows GROUP BY dst_port, ip_proto ORDER BY records DESC, dst_port, ip_proto LIMIT 20",
    // The whole table at once.
    "SELECT count(*) AS records, sum(bytes_out) AS out, sum(bytes_in) AS inb, min(ts) AS first, \
     max(last_ts) AS last, count(DISTINCT dst_addr) AS destinations FROM flows",
    // A filter on an address function, and the derived uid (flow_uid on the executors).
    "SELECT uid, ip_str(src_addr) AS src, ip_str(dst_addr) AS dst, dst_port, bytes_out + bytes_in AS bytes \
     FROM flows WHERE ip_in(dst_addr, '10.64.0.0/16') ORDER BY bytes DESC, uid LIMIT 10",
    // Time buckets of packets.
    "SELECT time_bucket(INTERVAL '5 minutes', ts) AS t, count(*) AS packets, sum(wire_len) AS bytes \
     FROM packets GROUP BY t ORDER BY t",
];

fn lan_hour() -> PathBuf {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/lan-hour-2012.pcap");
    assert!(path.exists(), "missing shared capture {}", path.display());
    path
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port()
}

/// A `hindsight-ballista` process logging to `log`.
fn ballista(args: &[String], log: &Path) -> Reaped {
    let file = std::fs::File::create(log).unwrap();
    Reaped(
        Command::new(env!("CARGO_BIN_EXE_hindsight-ballista"))
            .args(args)
            .env(KEY.0, KEY.1)
            .env(SECRET.0, SECRET.1)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .expect("start hindsight-ballista"),
    )
}

fn wait_for(log: &Path, line: &str) {
    let started = Instant::now();
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.contains(line) {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no {line:?} in {}: {text}",
            log.display()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_ballista_cluster_over_the_copies_in_s3_answers_as_hindsight_sql() {
    // SAFETY: set before this binary's one test starts any thread that reads
    // the environment; the object store's client reads them.
    unsafe {
        std::env::set_var(KEY.0, KEY.1);
        std::env::set_var(SECRET.0, SECRET.1);
    }
    let dir = tempfile::tempdir().unwrap();
    let store_dir = dir.path().join("seaweedfs");
    std::fs::create_dir(&store_dir).unwrap();
    let (_server, s3) = start_seaweedfs(&store_dir);
    let endpoint = format!("http://127.0.0.1:{s3}");

    // The archive: five-minute partitions, so that there are segments for
    // both executors; every sealed one copied to the bucket.
    let root = dir.path().join("archive");
    let options = IngestOptions {
        partition_nanos: 300 * 1_000_000_000,
        ..IngestOptions::default()
    };
    let (mut ingestor, _) = Ingestor::open(&root, options).unwrap();
    let outcome = ingestor.ingest_file(&lan_hour(), &mut |_| {}).unwrap();
    assert!(outcome.error.is_none());
    ingestor.finish().unwrap();
    let settings = ObjectStoreSettings {
        url: "s3://hindsight/recorder-1".into(),
        endpoint: Some(endpoint.clone()),
        region: None,
        local_max_bytes: 0,
    };
    let (copied, _) = hindsight_sql::objects::copy_archive(&root, &settings).unwrap();
    assert!(copied.segments >= 4, "{copied:?}");
    let keys = list(s3, "recorder-1/flows/");
    assert!(keys.len() >= 2, "{keys:?}");

    // The cluster: a scheduler and two executors of one task each.
    let scheduler_port = free_port();
    let scheduler_log = dir.path().join("scheduler.log");
    let _scheduler = ballista(
        &[
            "scheduler".into(),
            "--bind-port".into(),
            scheduler_port.to_string(),
        ],
        &scheduler_log,
    );
    let mut executors = Vec::new();
    for n in 0..2 {
        let log = dir.path().join(format!("executor-{n}.log"));
        let work = dir.path().join(format!("executor-{n}"));
        std::fs::create_dir(&work).unwrap();
        let child = ballista(
            &[
                "executor".into(),
                "--scheduler-port".into(),
                scheduler_port.to_string(),
                "--bind-port".into(),
                free_port().to_string(),
                "--bind-grpc-port".into(),
                free_port().to_string(),
                "--concurrent-tasks".into(),
                "1".into(),
                "--work-dir".into(),
                work.display().to_string(),
            ],
            &log,
        );
        executors.push((child, log));
    }
    for (_, log) in &executors {
        wait_for(log, "Executor registration succeed");
    }

    let session = SqlSession::open(&root).unwrap();
    let ask = |statement: &str, extra: &[&str]| {
        let output = Command::new(env!("CARGO_BIN_EXE_hindsight-ballista"))
            .args([
                "sql",
                statement,
                "--format",
                "csv",
                "--archive",
                "s3://hindsight/recorder-1",
            ])
            .args(["--scheduler", &format!("df://127.0.0.1:{scheduler_port}")])
            .args(["--endpoint", &endpoint])
            .args(extra)
            .env(KEY.0, KEY.1)
            .env(SECRET.0, SECRET.1)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{statement}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).unwrap()
    };
    for statement in STATEMENTS {
        let mut expected = Vec::new();
        session
            .run(statement, Format::Csv, &mut expected, &Limits::default())
            .unwrap();
        let expected = String::from_utf8(expected).unwrap();
        assert!(expected.lines().count() > 1, "{statement}: {expected}");
        assert_eq!(ask(statement, &[]), expected, "{statement}");
    }

    // Each statement ran as stages split at its repartitions, with tasks
    // on both executors.
    let plan = ask(STATEMENTS[0], &["--explain"]);
    assert!(plan.contains("mode=Partial"), "{plan}");
    for (_, log) in &executors {
        let text = std::fs::read_to_string(log).unwrap();
        assert!(text.contains("Execute task"), "{}: {text}", log.display());
    }

    // Only loopback is listened on: Ballista has no authentication.
    let refused = Command::new(env!("CARGO_BIN_EXE_hindsight-ballista"))
        .args(["executor", "--bind-host", "0.0.0.0"])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("loopback only"), "{stderr}");
}
