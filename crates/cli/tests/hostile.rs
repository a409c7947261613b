//! The hostile-client suite: what an attacker (or a careless script) sends to
//! the real `hindsight serve` on 127.0.0.1, each case a finding of issue 65.
//! After every case the server must still answer, and answer right.

mod common;

use common::server::{FakePeer, Server, get, post_with};
use common::{hindsight_with_input, lan_hour};

use std::path::{Path, PathBuf};

use serde_json::json;

/// lan-hour ingested with the defaults.
fn archive_lan_hour(dir: &Path) -> PathBuf {
    let archive = dir.join("archive");
    common::ingest(&lan_hour(), &archive);
    archive
}

/// `SELECT first link first link ... first` with `terms` terms.
fn chain(head: &str, link: &str, term: &str, terms: usize) -> String {
    let mut sql = String::with_capacity(head.len() + terms * (link.len() + term.len()));
    sql.push_str(head);
    sql.push_str(term);
    for _ in 1..terms {
        sql.push_str(link);
        sql.push_str(term);
    }
    sql
}

/// The statement shapes that once overflowed a SQL thread's stack and took
/// the whole process down, with the answer each gives at `terms` terms.
fn deep_statements(terms: usize) -> Vec<(&'static str, String, String)> {
    let n = terms.to_string();
    vec![
        ("+", chain("SELECT ", "+", "1", terms), n.clone()),
        (
            "OR",
            chain(
                "SELECT count(*) > 0 FROM packets WHERE ",
                " OR ",
                "ip_proto = 6",
                terms,
            ),
            "true".to_owned(),
        ),
        (
            "AND",
            chain(
                "SELECT count(*) > 0 FROM packets WHERE ",
                " AND ",
                "ip_proto = 6",
                terms * 4 / 5,
            ),
            "true".to_owned(),
        ),
        (
            "UNION ALL",
            format!(
                "SELECT count(*) FROM ({})",
                chain("", " UNION ALL ", "SELECT 1", terms)
            ),
            n.clone(),
        ),
        (
            "||",
            format!("SELECT length({})", chain("", " || ", "'a'", terms)),
            n,
        ),
    ]
}

/// The first value of a CSV answer's first row.
fn first_value(csv: &str) -> &str {
    csv.lines()
        .nth(1)
        .unwrap_or_default()
        .split(',')
        .next()
        .unwrap_or_default()
}

#[test]
fn deep_statements_are_answered_or_refused_and_the_server_lives() {
    let dir = tempfile::tempdir().unwrap();
    let archive = archive_lan_hour(dir.path());
    let server = Server::start(
        dir.path(),
        &format!(
            "archive = {:?}\n[api]\nmax_body_bytes = 4194304\n",
            archive.to_str().unwrap()
        ),
    );
    for (shape, sql, expected) in deep_statements(1000) {
        let body = json!({"sql": sql, "format": "csv"}).to_string();
        let answer = post_with(&server, "/api/v1/sql", body.as_bytes(), None);
        assert_eq!(answer.status, 200, "{shape} x 1000: {}", answer.text());
        assert_eq!(first_value(&answer.text()), expected, "{shape} x 1000");
        let cli = hindsight_with_input(
            &[
                "sql",
                "-",
                "--archive",
                archive.to_str().unwrap(),
                "-F",
                "csv",
            ],
            sql.as_bytes(),
        );
        assert!(
            cli.status.success(),
            "{shape} x 1000 on the command line: {cli:?}"
        );
        assert_eq!(
            first_value(&String::from_utf8_lossy(&cli.stdout)),
            expected,
            "{shape} x 1000 on the command line"
        );
    }
    for (shape, sql, _) in deep_statements(100_000) {
        let body = json!({"sql": sql}).to_string();
        let answer = post_with(&server, "/api/v1/sql", body.as_bytes(), None);
        answer.error(400, "operators, joins and set operations");
        let cli = hindsight_with_input(
            &["sql", "-", "--archive", archive.to_str().unwrap()],
            sql.as_bytes(),
        );
        assert_eq!(cli.status.code(), Some(1), "{shape} x 100000: {cli:?}");
        assert!(
            String::from_utf8_lossy(&cli.stderr).contains("at most 2048 are taken"),
            "{shape} x 100000: {}",
            String::from_utf8_lossy(&cli.stderr)
        );
        assert_eq!(
            get(&server, "/api/v1/health", None).status,
            200,
            "after {shape}"
        );
    }
}

/// A raw request over a new connection: the status line, or what the read
/// ended with.
fn raw(address: &str, request: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer).into_owned()
}

#[test]
fn a_foreign_host_is_refused_without_a_token_and_loopback_names_answer() {
    let dir = tempfile::tempdir().unwrap();
    let archive = archive_lan_hour(dir.path());
    let server = Server::start(
        dir.path(),
        &format!(
            "archive = {:?}\n[api]\nallowed_hosts = [\"recorder.lab.example\"]\n",
            archive.to_str().unwrap()
        ),
    );
    let address = server.base.trim_start_matches("http://").to_owned();
    let port = address.rsplit_once(':').unwrap().1;
    let ask = |host: &str| {
        raw(
            &address,
            &format!(
                "GET /api/v1/query?filter=tcp&limit=1&format=jsonl HTTP/1.1\r\nHost: {host}\r\n\
                 Connection: close\r\n\r\n"
            ),
        )
    };
    // What DNS rebinding sends: the attacker's own name, resolved to 127.0.0.1.
    for host in [
        "attacker.example",
        &format!("attacker.example:{port}"),
        "127.0.0.1.nip.io",
    ] {
        let answer = ask(host);
        assert!(answer.starts_with("HTTP/1.1 403"), "{host}: {answer}");
        assert!(answer.contains("allowed_hosts"), "{host}: {answer}");
    }
    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        "LOCALHOST".to_owned(),
        format!("[::1]:{port}"),
        "recorder.lab.example".to_owned(),
        "ui.localhost".to_owned(),
    ] {
        let answer = ask(&host);
        assert!(answer.starts_with("HTTP/1.1 200"), "{host}: {answer}");
    }
}

#[test]
fn slow_connections_are_capped_and_timed_out_and_the_server_answers_after() {
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().unwrap();
    let archive = archive_lan_hour(dir.path());
    let server = Server::start(
        dir.path(),
        &format!(
            "archive = {:?}\n[api]\nmax_connections_per_client = 32\nheader_timeout_secs = 2\n",
            archive.to_str().unwrap()
        ),
    );
    let address = server.base.trim_start_matches("http://").to_owned();
    // 200 connections that start a request head and never finish it.
    let mut slow = Vec::new();
    for _ in 0..200 {
        let mut stream = std::net::TcpStream::connect(&address).unwrap();
        let _ = stream.write_all(b"GET /api/v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n");
        slow.push(stream);
    }
    // Each ends: refused at once past the cap (503), or closed by the server
    // once the header timeout passes. None stays open.
    let (mut refused, mut closed) = (0, 0);
    for mut stream in slow {
        stream
            .set_read_timeout(Some(std::time::Duration::from_secs(120)))
            .unwrap();
        let mut answer = Vec::new();
        match stream.read_to_end(&mut answer) {
            Ok(_) | Err(_) if answer.starts_with(b"HTTP/1.1 503") => refused += 1,
            Ok(_) => closed += 1,
            Err(error) if error.kind() == std::io::ErrorKind::ConnectionReset => closed += 1,
            Err(error) => panic!("a slow connection stayed open: {error}"),
        }
    }
    assert_eq!(refused + closed, 200);
    // The server still answers, and counted what it refused (a refused
    // connection may be reset before its client reads the 503).
    assert_eq!(get(&server, "/api/v1/health", None).status, 200);
    let refused_metric = metric(&server, "hindsight_http_connections_refused_client_total");
    assert!(
        refused_metric >= 200 - 32,
        "{refused_metric} refused, {closed} closed"
    );
    assert!(refused_metric >= refused);
}

#[test]
fn a_function_that_would_make_gigabytes_is_refused_under_the_memory_bound() {
    let dir = tempfile::tempdir().unwrap();
    let archive = archive_lan_hour(dir.path());
    let server = Server::start(
        dir.path(),
        &format!(
            "archive = {:?}\n[api]\nmax_memory_mib = 64\n",
            archive.to_str().unwrap()
        ),
    );
    for sql in [
        "SELECT length(repeat('a', 2147483647))",
        "SELECT length(lpad('a', 2147483647))",
        "SELECT max(length(repeat(ip_str(src_addr), 10000000))) FROM packets",
    ] {
        let body = json!({ "sql": sql }).to_string();
        let answer = post_with(&server, "/api/v1/sql", body.as_bytes(), None);
        answer.error(400, "one call may make at most");
    }
    // Every statement's operators reserve from one budget, by default
    // max_memory_mib times max_scans + 1 (2 + 1), shown in the metrics.
    assert_eq!(
        metric(&server, "hindsight_sql_memory_limit_bytes"),
        (3 * 64) << 20
    );
    // A body past max_body_bytes is refused unread, and the answer closes the
    // connection (a client that keeps connections would send its next
    // request down one the server has closed).
    let big = format!("{{\"sql\": \"SELECT '{}'\"}}", "x".repeat(70_000));
    let answer = raw(
        server.base.trim_start_matches("http://"),
        &format!(
            "POST /api/v1/sql HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n{big}",
            big.len()
        ),
    )
    .to_ascii_lowercase();
    assert!(answer.starts_with("http/1.1 413"), "{answer}");
    assert!(answer.contains("connection: close"), "{answer}");
    let body = json!({"sql": "SELECT length(repeat('ab', 1000)) AS n", "format": "csv"});
    let answer = post_with(&server, "/api/v1/sql", body.to_string().as_bytes(), None);
    assert_eq!(answer.text(), "n\n2000\n");
}

#[test]
fn a_server_past_its_resident_bound_cancels_its_statements_and_answers_after() {
    let dir = tempfile::tempdir().unwrap();
    let archive = archive_lan_hour(dir.path());
    // The operators may reserve gigabytes, the process may hold 256 MiB: a
    // sort of 50 million values passes the second bound alone. The bound of
    // what runs in the server's own process: statements there (without
    // workers, as here) and watches' windows.
    let server = Server::start(
        dir.path(),
        &format!(
            "archive = {:?}\n[api]\nmax_memory_mib = 4096\nmax_resident_mib = 256\n\
             statement_workers = false\n",
            archive.to_str().unwrap()
        ),
    );
    let body = json!({"sql": "SELECT v FROM generate_series(1, 200000000) t(v) ORDER BY v DESC"});
    let answer = post_with(&server, "/api/v1/sql", body.to_string().as_bytes(), None);
    answer.error(503, "max_resident_mib");
    assert_eq!(metric(&server, "hindsight_resident_limit_bytes"), 256 << 20);
    assert!(metric(&server, "hindsight_sql_cancelled_for_memory_total") >= 1);
    assert!(metric(&server, "hindsight_resident_peak_bytes") > (224 << 20));
    // Once what the cancelled statement held is given back (its sort ends at
    // its next yield), questions are answered again; until then they get 503
    // with Retry-After, as the first did.
    let body = json!({"sql": "SELECT count(*) AS n FROM packets", "format": "csv"});
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let answer = post_with(&server, "/api/v1/sql", body.to_string().as_bytes(), None);
        if answer.status == 200 {
            assert_eq!(answer.text(), "n\n62781\n");
            break;
        }
        answer.error(503, "max_resident_mib");
        assert!(
            std::time::Instant::now() < deadline,
            "still past the bound after 120 s: {}",
            get(&server, "/metrics", None).text()
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

#[test]
fn statements_given_up_on_that_still_plan_are_bounded_and_refuse_new_ones_meanwhile() {
    let dir = tempfile::tempdir().unwrap();
    let archive = archive_lan_hour(dir.path());
    let server = Server::start(
        dir.path(),
        &format!(
            "archive = {:?}\n[api]\ntimeout_secs = 1\nmax_body_bytes = 1048576\n\
             statement_workers = false\n",
            archive.to_str().unwrap()
        ),
    );
    // In the server's own process (statements in workers end with their
    // worker, see the next test). Planning is quadratic in a chain's length and cannot be interrupted: a
    // thousand arms plan for seconds, far past the 1 s deadline.
    let slow = json!({"sql": format!(
        "SELECT count(*) FROM ({})",
        chain("", " UNION ALL ", "SELECT 1 AS x", 1000)
    )})
    .to_string();
    std::thread::scope(|scope| {
        let given_up: Vec<_> = (0..2)
            .map(|_| scope.spawn(|| post_with(&server, "/api/v1/sql", slow.as_bytes(), None)))
            .collect();
        for answer in given_up {
            answer.join().unwrap().error(504, "timeout_secs");
        }
    });
    // Both still plan: a third statement is refused, not piled on them.
    assert_eq!(metric(&server, "hindsight_sql_abandoned"), 2);
    let quick = json!({"sql": "SELECT count(*) AS n FROM packets", "format": "csv"}).to_string();
    post_with(&server, "/api/v1/sql", quick.as_bytes(), None).error(503, "given up on");
    assert!(metric(&server, "hindsight_sql_refused_busy_total") >= 1);
    // Once they are done, none is counted and statements are answered again.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(600);
    while metric(&server, "hindsight_sql_abandoned") > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "statements given up on still compute after 600 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    let answer = post_with(&server, "/api/v1/sql", quick.as_bytes(), None);
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert_eq!(answer.text(), "n\n62781\n");
}

#[test]
fn a_statement_past_its_workers_memory_is_refused_and_the_server_lives() {
    let dir = tempfile::tempdir().unwrap();
    let archive = archive_lan_hour(dir.path());
    let server = Server::start(
        dir.path(),
        &format!(
            "archive = {:?}\n[api]\nmax_memory_mib = 64\nworker_memory_mib = 600\n",
            archive.to_str().unwrap()
        ),
    );
    // In the server's process it grew the server to 14.9 GB; in a worker
    // the kernel refuses it.
    let body = json!({ "sql": common::wide_projection("") }).to_string();
    let answer = post_with(&server, "/api/v1/sql", body.as_bytes(), None);
    answer.error(400, "worker_memory_mib = 600");
    assert!(metric(&server, "hindsight_statement_workers_died_total") >= 1);
    assert_eq!(
        metric(&server, "hindsight_statement_worker_limit_bytes"),
        600 << 20
    );
    // The server's own memory never held it.
    let peak = metric(&server, "hindsight_resident_peak_bytes");
    assert!(peak < 400 << 20, "the server's resident peak {peak}");
    // The next statement gets a new worker.
    let quick = json!({"sql": "SELECT count(*) AS n FROM packets", "format": "csv"}).to_string();
    let answer = post_with(&server, "/api/v1/sql", quick.as_bytes(), None);
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert_eq!(answer.text(), "n\n62781\n");
    drop(server);
    // A statement past its deadline ends with its worker: planning a
    // thousand arms takes seconds and cannot be interrupted, yet nothing
    // computes on, and the next statement is answered at once.
    let server = Server::start(
        dir.path(),
        &format!(
            "archive = {:?}\n[api]\ntimeout_secs = 1\nmax_body_bytes = 1048576\n",
            archive.to_str().unwrap()
        ),
    );
    let slow = json!({"sql": format!(
        "SELECT count(*) FROM ({})",
        chain("", " UNION ALL ", "SELECT 1 AS x", 1000)
    )})
    .to_string();
    for _ in 0..3 {
        post_with(&server, "/api/v1/sql", slow.as_bytes(), None).error(504, "timeout_secs");
        let answer = post_with(&server, "/api/v1/sql", quick.as_bytes(), None);
        assert_eq!(answer.status, 200, "{}", answer.text());
    }
    assert_eq!(metric(&server, "hindsight_sql_abandoned"), 0);
    assert_eq!(metric(&server, "hindsight_sql_refused_busy_total"), 0);
}

#[test]
fn what_a_statement_freed_is_given_back_to_the_system_at_rest() {
    let dir = tempfile::tempdir().unwrap();
    let archive = archive_lan_hour(dir.path());
    let server = Server::start(
        dir.path(),
        &format!(
            "archive = {:?}\n[api]\nmax_memory_mib = 512\nstatement_workers = false\n",
            archive.to_str().unwrap()
        ),
    );
    // In the server's own process. A sort that holds hundreds of MiB, then frees them (refused by its
    // own pool or answered, either way it ends).
    let body = json!({"sql": "SELECT max(x) FROM (SELECT v AS x FROM generate_series(1, 30000000) \
                              t(v) ORDER BY v DESC LIMIT 20000000)"});
    let answer = post_with(&server, "/api/v1/sql", body.to_string().as_bytes(), None);
    assert!(matches!(answer.status, 200 | 400), "{}", answer.text());
    let resident = || metric(&server, "hindsight_resident_bytes");
    let peak = metric(&server, "hindsight_resident_peak_bytes");
    assert!(peak > 200 << 20, "the sort held {peak} bytes at most");
    // glibc keeps what was freed in its arenas; the watchdog gives it back
    // once no statement runs.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while resident() > 128 << 20 {
        assert!(
            std::time::Instant::now() < deadline,
            "{} bytes still resident at rest after 60 s",
            resident()
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// A counter or gauge of `server`'s `/metrics`, which must have it.
fn metric(server: &Server, name: &str) -> u64 {
    let metrics = get(server, "/metrics", None).text();
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("{name} in {metrics}"))
}

const CLUSTER_TOKEN: &str = "hostile-cluster-token-0123456789";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port()
}

/// `[cluster]` for node `name` of `nodes` (name, port), with `index` the
/// index node.
fn cluster_config(archive: &Path, name: &str, nodes: &[(&str, u16)], index: &str) -> String {
    let mut text = format!(
        "archive = {:?}\n[cluster]\nname = \"{name}\"\ntoken = \"{CLUSTER_TOKEN}\"\n\
         node_token = \"{}\"\nindex = [\"{index}\"]\nsync_secs = 1\ndeadline_secs = 20\n",
        archive.to_str().unwrap(),
        node_token(name)
    );
    for (name, port) in nodes {
        text.push_str(&format!(
            "[[cluster.node]]\nname = \"{name}\"\nurl = \"http://127.0.0.1:{port}\"\n\
             token_sha256 = \"{}\"\n",
            hindsight_cluster::config::token_sha256(&node_token(name))
        ));
    }
    text
}

/// Node `name`'s own token.
fn node_token(name: &str) -> String {
    format!("{name}-node-token-0123456789")
}

/// An Arrow IPC stream whose first record batch declares a body of 2^50
/// bytes (what once made the asking node abort on the allocation).
fn lying_arrow_stream() -> Vec<u8> {
    use arrow::array::Int64Array;
    use arrow::datatypes::{DataType, Field, Schema};
    use arrow::ipc::writer::StreamWriter;
    use arrow::record_batch::RecordBatch;
    let schema = std::sync::Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, false)]));
    let batch = RecordBatch::try_new(
        std::sync::Arc::clone(&schema),
        vec![std::sync::Arc::new(Int64Array::from(vec![1, 2, 3]))],
    )
    .unwrap();
    let mut bytes = Vec::new();
    let mut writer = StreamWriter::try_new(&mut bytes, &schema).unwrap();
    writer.write(&batch).unwrap();
    writer.finish().unwrap();
    drop(writer);
    let message_len =
        |at: usize| i32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as usize;
    let batch_at = 8 + message_len(0);
    let meta = batch_at + 8..batch_at + 8 + message_len(batch_at);
    let body = arrow::ipc::root_as_message(&bytes[meta.clone()])
        .unwrap()
        .bodyLength();
    let place = bytes[meta.clone()]
        .windows(8)
        .position(|w| w == body.to_le_bytes())
        .expect("the body length is in the metadata");
    let at = meta.start + place;
    bytes[at..at + 8].copy_from_slice(&(1i64 << 50).to_le_bytes());
    bytes
}

#[test]
fn a_peer_that_lies_in_its_answer_is_named_missing_and_the_node_lives() {
    let dir = tempfile::tempdir().unwrap();
    let archive = archive_lan_hour(dir.path());
    let lie = lying_arrow_stream();
    let evil = FakePeer::start(move |_, path| match path {
        "/api/v1/cluster/fragment" => (200, "application/vnd.apache.arrow.stream", lie.clone()),
        _ => (404, "application/json", b"{}".to_vec()),
    });
    let port = free_port();
    let server = Server::start_at(
        dir.path(),
        &cluster_config(&archive, "a", &[("a", port), ("evil", evil.port)], "a"),
        &format!("127.0.0.1:{port}"),
    );
    let body =
        json!({"sql": "SELECT count(*) AS n FROM packets", "cluster": true, "format": "csv"});
    let answer = common::agent()
        .post(server.url("/api/v1/sql"))
        .header("Authorization", format!("Bearer {CLUSTER_TOKEN}"))
        .header("Content-Type", "application/json")
        .send(body.to_string().as_bytes())
        .unwrap();
    let partial = answer
        .headers()
        .get("hindsight-partial")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let answer = common::server::answer(answer);
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert!(
        partial.contains("evil") && partial.contains("1125899906842624"),
        "{partial:?}"
    );
    // Node a's own rows are whole: lan-hour's packets.
    let local = json!({"sql": "SELECT count(*) AS n FROM packets", "format": "csv"});
    let whole = post_with(
        &server,
        "/api/v1/sql",
        local.to_string().as_bytes(),
        Some(CLUSTER_TOKEN),
    );
    assert_eq!(answer.text(), whole.text());
    assert!(
        evil.heads()
            .iter()
            .any(|head| head.starts_with("POST /api/v1/cluster/fragment")),
        "{:?}",
        evil.heads()
    );
    assert_eq!(get(&server, "/api/v1/health", None).status, 200);
}

#[test]
fn a_route_answer_cannot_send_the_cluster_token_to_a_url_of_its_choosing() {
    let dir = tempfile::tempdir().unwrap();
    let archive = archive_lan_hour(dir.path());
    // Where a lying index node would have the token sent.
    let elsewhere = FakePeer::start(|_, _| (200, "application/json", b"{}".to_vec()));
    let port = free_port();
    let route = json!({
        "index": "idx",
        "ask": [{"node": "a", "url": format!("http://127.0.0.1:{}", elsewhere.port),
                 "reason": "lies", "segments": 1},
                {"node": "stranger", "url": format!("http://127.0.0.1:{}", elsewhere.port),
                 "reason": "lies", "segments": 1}],
        "skip": []
    })
    .to_string();
    let index = FakePeer::start(move |_, path| {
        if path.starts_with("/api/v1/cluster/route") {
            (200, "application/json", route.clone().into_bytes())
        } else if path.starts_with("/api/v1/cluster/sync") {
            (200, "application/json", br#"{"missing": []}"#.to_vec())
        } else {
            (404, "application/json", b"{}".to_vec())
        }
    });
    let server = Server::start_at(
        dir.path(),
        &cluster_config(&archive, "a", &[("a", port), ("idx", index.port)], "idx"),
        &format!("127.0.0.1:{port}"),
    );
    let answer = common::agent()
        .get(server.url("/api/v1/query"))
        .query("filter", "host 10.64.94.199")
        .query("cluster", "true")
        .query("format", "jsonl")
        .header("Authorization", format!("Bearer {CLUSTER_TOKEN}"))
        .call()
        .unwrap();
    let answer = common::server::answer(answer);
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert!(
        answer.text().lines().count() > 0,
        "node a's packets of the host"
    );
    assert!(
        index
            .heads()
            .iter()
            .any(|head| head.starts_with("GET /api/v1/cluster/route")),
        "{:?}",
        index.heads()
    );
    assert!(
        elsewhere.heads().is_empty(),
        "the token went to {:?}",
        elsewhere.heads()
    );
}

/// A pcap of `hosts` UDP packets from as many distinct IPv4 addresses, one
/// second apart: one segment whose summary holds that many addresses.
fn busy_capture(path: &Path, hosts: u32) {
    let mut bytes = Vec::new();
    bytes.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    bytes.extend_from_slice(&2u16.to_le_bytes());
    bytes.extend_from_slice(&4u16.to_le_bytes());
    bytes.extend_from_slice(&[0; 8]);
    bytes.extend_from_slice(&65_535u32.to_le_bytes());
    bytes.extend_from_slice(&1u32.to_le_bytes());
    for i in 0..hosts {
        let mut frame = vec![0u8; 14 + 20 + 8];
        frame[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
        frame[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
        frame[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        let ip = &mut frame[14..34];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&28u16.to_be_bytes());
        ip[8] = 64;
        ip[9] = 17;
        ip[12..16].copy_from_slice(&(0x0a00_0000 | i).to_be_bytes());
        ip[16..20].copy_from_slice(&[192, 0, 2, 1]);
        let mut sum = 0u32;
        for pair in ip.chunks(2) {
            sum += u32::from(u16::from_be_bytes([pair[0], pair[1]]));
        }
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        ip[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
        let udp = &mut frame[34..42];
        udp[0..2].copy_from_slice(&40_000u16.to_be_bytes());
        udp[2..4].copy_from_slice(&53u16.to_be_bytes());
        udp[4..6].copy_from_slice(&8u16.to_be_bytes());
        let seconds = 1_354_000_000 + i / 100;
        bytes.extend_from_slice(&seconds.to_le_bytes());
        bytes.extend_from_slice(&((i % 100) * 10_000).to_le_bytes());
        bytes.extend_from_slice(&(frame.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&(frame.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&frame);
    }
    std::fs::write(path, bytes).unwrap();
}

/// Node a (the index node) over `archive_a` in `dir_a` and node b over
/// `archive_b` in `dir_b`, and what starts b again on its port.
fn two_nodes<'a>(
    dir_a: &Path,
    archive_a: &Path,
    dir_b: &'a Path,
    archive_b: &'a Path,
) -> (Server, Server, impl Fn() -> Server + 'a) {
    let (port_a, port_b) = (free_port(), free_port());
    let nodes = [("a", port_a), ("b", port_b)];
    let index = Server::start_at(
        dir_a,
        &cluster_config(archive_a, "a", &nodes, "a"),
        &format!("127.0.0.1:{port_a}"),
    );
    let start_b = move || {
        Server::start_at(
            dir_b,
            &cluster_config(archive_b, "b", &nodes, "a"),
            &format!("127.0.0.1:{port_b}"),
        )
    };
    let b = start_b();
    (index, b, start_b)
}

#[test]
fn a_node_syncs_a_segment_of_sixty_thousand_addresses() {
    let dir = tempfile::tempdir().unwrap();
    let (dir_a, dir_b) = (dir.path().join("a"), dir.path().join("b"));
    std::fs::create_dir_all(&dir_a).unwrap();
    std::fs::create_dir_all(&dir_b).unwrap();
    let archive_a = archive_lan_hour(&dir_a);
    let capture = dir.path().join("busy.pcap");
    busy_capture(&capture, 60_000);
    let archive_b = dir_b.join("archive");
    common::ingest(&capture, &archive_b);
    let (index, _b, _) = two_nodes(&dir_a, &archive_a, &dir_b, &archive_b);
    // The index node learns b's segment (its summary, about 100 kB, is more
    // than the API's body bound, within the summaries' own).
    let mut seen = serde_json::Value::Null;
    for _ in 0..600 {
        let status = common::agent()
            .get(index.url("/api/v1/cluster/status"))
            .header("Authorization", format!("Bearer {CLUSTER_TOKEN}"))
            .call()
            .unwrap();
        seen = common::server::answer(status).json();
        let b = seen["nodes"]
            .as_array()
            .and_then(|nodes| nodes.iter().find(|node| node["node"] == "b"))
            .cloned()
            .unwrap_or_default();
        if b["health"] == "ok" && b["segments"].as_u64().unwrap_or(0) > 0 {
            assert!(b["summary_bytes"].as_u64().unwrap() > 65_536, "{b}");
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    panic!("the index node never learned b's segments: {seen}");
}

/// Node `node`'s status as the index node at `index` sees it.
fn node_status(index: &Server, node: &str) -> serde_json::Value {
    let status = common::agent()
        .get(index.url("/api/v1/cluster/status"))
        .header("Authorization", format!("Bearer {CLUSTER_TOKEN}"))
        .call()
        .unwrap();
    common::server::answer(status).json()["nodes"]
        .as_array()
        .and_then(|nodes| nodes.iter().find(|n| n["node"] == node))
        .cloned()
        .unwrap_or_default()
}

/// Waits until the index node at `index` holds node `node`'s summaries whole
/// and `also` holds of its status.
fn wait_for_node(index: &Server, node: &str, also: impl Fn(&serde_json::Value) -> bool) {
    let mut seen = serde_json::Value::Null;
    for _ in 0..600 {
        seen = node_status(index, node);
        if seen["health"] == "ok" && seen["segments"].as_u64().unwrap_or(0) > 0 && also(&seen) {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("node {node} never became current: {seen}");
}

/// The nodes the index node at `index` would ask for packets of `address`.
fn asked(index: &Server, address: &str) -> Vec<String> {
    let route = common::agent()
        .get(index.url("/api/v1/cluster/route"))
        .query("addresses", address)
        .header("Authorization", format!("Bearer {CLUSTER_TOKEN}"))
        .call()
        .unwrap();
    common::server::answer(route).json()["ask"]
        .as_array()
        .unwrap()
        .iter()
        .map(|choice| choice["node"].as_str().unwrap().to_owned())
        .collect()
}

/// The summaries of every segment of the archive at `root`, as JSON.
fn summaries_of(root: &Path) -> Vec<serde_json::Value> {
    let archive = hindsight_store::Archive::open_reader(root).unwrap();
    archive
        .catalog()
        .entries()
        .map(|entry| {
            let summary = hindsight_cluster::summary::SegmentSummary::build(root, entry).unwrap();
            serde_json::to_value(summary).unwrap()
        })
        .collect()
}

#[test]
fn only_a_node_speaks_for_itself_and_stale_summaries_make_the_index_ask_it() {
    let dir = tempfile::tempdir().unwrap();
    let (dir_a, dir_b) = (dir.path().join("a"), dir.path().join("b"));
    std::fs::create_dir_all(&dir_a).unwrap();
    std::fs::create_dir_all(&dir_b).unwrap();
    // Node a (the index node) holds 10.0.0.0/24 talking to 192.0.2.1; node b
    // holds lan-hour, and later an archive of 10.0.1.0/24 whose segment ids
    // are lan-hour's first.
    let capture = dir.path().join("busy.pcap");
    busy_capture(&capture, 200);
    let archive_a = dir_a.join("archive");
    common::ingest(&capture, &archive_a);
    let archive_b = archive_lan_hour(&dir_b);
    let (index, b, restart_b) = two_nodes(&dir_a, &archive_a, &dir_b, &archive_b);
    wait_for_node(&index, "a", |_| true);
    wait_for_node(&index, "b", |_| true);
    const LAN: &str = "10.64.94.199";
    assert_eq!(asked(&index, LAN), ["b"]);

    // What once poisoned the index: an all-zero summary "as b" and an empty
    // sync "as b", sent with the cluster's token, or with a's own.
    let mut lie = summaries_of(&archive_b)[0].clone();
    lie["addresses"] =
        serde_json::to_value(hindsight_cluster::signature::AddressSignature::of(Vec::<
            hindsight_model::Addr16,
        >::new(
        )))
        .unwrap();
    let upload = json!({"node": "b", "summaries": [lie]}).to_string();
    let sync = json!({"node": "b", "ids": [], "capturing": false, "now_ns": 0,
                      "digest": "0".repeat(64)})
    .to_string();
    for (route, body) in [
        ("/api/v1/cluster/summaries", &upload),
        ("/api/v1/cluster/sync", &sync),
    ] {
        post_with(&index, route, body.as_bytes(), Some(CLUSTER_TOKEN))
            .error(401, "takes a node's own token");
        post_with(&index, route, body.as_bytes(), None).error(401, "takes a node's own token");
        post_with(&index, route, body.as_bytes(), Some(&node_token("a"))).error(
            403,
            "the token is node a's, and a node speaks only for itself",
        );
    }
    assert_eq!(asked(&index, LAN), ["b"]);
    let question = |address: &str| {
        let answer = common::agent()
            .get(index.url("/api/v1/query"))
            .query("filter", format!("host {address}"))
            .query("cluster", "true")
            .query("format", "jsonl")
            .header("Authorization", format!("Bearer {CLUSTER_TOKEN}"))
            .call()
            .unwrap();
        assert!(answer.headers().get("hindsight-partial").is_none());
        let answer = common::server::answer(answer);
        assert_eq!(answer.status, 200, "{}", answer.text());
        answer.text().lines().count()
    };
    let lan_packets = question(LAN);
    assert!(lan_packets > 0);

    // An old upload of b's, replayed with b's own token (who holds it may
    // replay, but not make the index skip b): its summaries no longer add up
    // to b's catalog, so b is asked.
    let replaced = dir.path().join("replaced.pcap");
    busy_capture(&replaced, 300);
    let archive_other = dir.path().join("other");
    common::ingest(&replaced, &archive_other);
    let old = json!({"node": "b", "summaries": summaries_of(&archive_other)}).to_string();
    let taken = post_with(
        &index,
        "/api/v1/cluster/summaries",
        old.as_bytes(),
        Some(&node_token("b")),
    );
    assert_eq!(taken.status, 200, "{}", taken.text());
    assert_eq!(asked(&index, LAN), ["b"]);
    wait_for_node(&index, "b", |b| b["mismatches"] == 1);
    assert_eq!(asked(&index, LAN), ["b"]);

    // b's archive replaced by one whose ids collide with lan-hour's first:
    // the old summaries are not left in force.
    drop(b);
    std::fs::rename(&archive_b, dir_b.join("lan-hour")).unwrap();
    std::fs::rename(&archive_other, &archive_b).unwrap();
    let _b = restart_b();
    // 10.0.0.250-299 are b's alone now (a holds 10.0.0.0-199).
    const OTHER: &str = "10.0.1.10";
    let mut packets = 0;
    for _ in 0..600 {
        packets = question(OTHER);
        if packets > 0 && node_status(&index, "b")["mismatches"] == 2 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(packets, 1, "the packet of {OTHER} on b's new archive");
    wait_for_node(&index, "b", |b| b["mismatches"] == 2);
    assert_eq!(question(OTHER), 1);
    assert_eq!(asked(&index, OTHER), ["b"]);
    assert_eq!(asked(&index, LAN), Vec::<String>::new());
    assert_eq!(question(LAN), 0);
}

#[test]
fn cluster_token_makes_a_new_node_token_and_the_line_of_its_digest() {
    let value = |text: &str, key: &str| -> String {
        text.lines()
            .find_map(|line| line.strip_prefix(&format!("{key} = \"")))
            .and_then(|rest| rest.strip_suffix('"'))
            .unwrap_or_else(|| panic!("no {key} in {text}"))
            .to_owned()
    };
    let first = common::ok(&common::hindsight(&["cluster", "token"]));
    let token = value(&first, "node_token");
    assert_eq!(token.len(), 64, "{first}");
    assert!(token.bytes().all(|b| b.is_ascii_hexdigit()), "{first}");
    assert_eq!(
        value(&first, "token_sha256"),
        hindsight_cluster::config::token_sha256(&token)
    );
    let second = common::ok(&common::hindsight(&["cluster", "token"]));
    assert_ne!(value(&second, "node_token"), token);
    // status still needs its cluster file.
    let status = common::hindsight(&["cluster", "status"]);
    assert!(!status.status.success());
    assert!(String::from_utf8_lossy(&status.stderr).contains("--cluster"));
}
