//! `hindsight serve` through the real server on 127.0.0.1: the HTTP API (answers
//! compared with the command line and with tcpdump, bad requests refused with
//! JSON errors, the bearer token), and the web UI driven in headless Chromium
//! through chromedriver (search, timeline, table, pcap download).

mod common;

use common::browser::Browser;
use common::server::{Answer, Server, answer, get, get_with, post_with};
use common::{agent, hindsight, lan_hour, ok, read_frames, require_tool};

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

const TOKEN: &str = "s3cret-token-0123456789";
const RARE: &str = "172.30.100.1";

fn post(server: &Server, path: &str, body: &[u8]) -> Answer {
    post_with(server, path, body, Some(TOKEN))
}

/// lan-hour archived whole (snap length 0), so exported pcaps compare byte for byte.
fn archive_lan_hour(dir: &Path) -> PathBuf {
    let archive = dir.join("archive");
    common::ingest_whole(&lan_hour(), &archive, &[]);
    archive
}

/// What `tcpdump -r lan-hour FILTER` selects.
fn tcpdump_frames(dir: &Path, filter: &str) -> Vec<common::PacketKey> {
    let out = dir.join("tcpdump.pcap");
    let status = Command::new("tcpdump")
        .args([
            "-r",
            lan_hour().to_str().unwrap(),
            "-w",
            out.to_str().unwrap(),
        ])
        .arg(filter)
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    read_frames(&out)
}

fn frames_of(dir: &Path, bytes: &[u8]) -> Vec<common::PacketKey> {
    let path = dir.join("answer.pcap");
    std::fs::write(&path, bytes).unwrap();
    read_frames(&path)
}

#[test]
fn the_api_answers_like_the_command_line_and_refuses_bad_requests() {
    require_tool("tcpdump");
    let dir = tempfile::tempdir().unwrap();
    let archive = archive_lan_hour(dir.path());
    let server = Server::start(
        dir.path(),
        &format!(
            "archive = {:?}\n[api]\ntoken = \"{TOKEN}\"\nmax_rows = 50000\nmax_body_bytes = 4096\n",
            archive.to_str().unwrap()
        ),
    );
    let t = Some(TOKEN);

    // Health needs no token; everything else does.
    let health = get(&server, "/api/v1/health", None);
    assert_eq!(health.status, 200);
    assert_eq!(health.json()["status"], "ok");
    assert_eq!(health.json()["limits"]["max_rows"], 50_000);
    get(&server, "/api/v1/stats", None).error(401, "Authorization: Bearer");
    get(&server, "/api/v1/stats", Some("wrong")).error(401, "Bearer");
    let lower_case_scheme = agent()
        .get(server.url("/api/v1/stats"))
        .header("Authorization", format!("bearer {TOKEN}"))
        .call()
        .unwrap();
    assert_eq!(lower_case_scheme.status(), 200);
    let stats = get(&server, "/api/v1/stats", t).json();
    assert_eq!(stats["packets"], 62_781);

    // Query: JSON lines equal to `hindsight query -F jsonl`.
    let filter = format!("host {RARE}");
    let jsonl = get_with(
        &server,
        "/api/v1/query",
        &[("filter", &filter), ("format", "jsonl")],
        t,
    );
    assert_eq!(jsonl.status, 200);
    assert_eq!(jsonl.content_type, "application/x-ndjson");
    let cli = ok(&hindsight(&[
        "query",
        &filter,
        "--archive",
        archive.to_str().unwrap(),
        "-F",
        "jsonl",
    ]));
    assert!(!cli.is_empty());
    assert_eq!(jsonl.text(), cli);
    // The same, gzip-compressed for a client that asks.
    let mut compressed = agent()
        .get(server.url("/api/v1/query"))
        .query("filter", &filter)
        .header("Authorization", format!("Bearer {TOKEN}"))
        .header("Accept-Encoding", "gzip")
        .call()
        .unwrap();
    assert_eq!(compressed.headers()["content-encoding"], "gzip");
    let gzipped = compressed.body_mut().read_to_vec().unwrap();
    let mut unzipped = String::new();
    std::io::Read::read_to_string(
        &mut flate2::read::GzDecoder::new(gzipped.as_slice()),
        &mut unzipped,
    )
    .unwrap();
    assert_eq!(unzipped, cli);

    // Query as pcap: exactly what tcpdump selects from the capture.
    for filter in [
        format!("host {RARE}"),
        "tcp.port == 139 && tcp.flags.syn == 1".to_owned(),
    ] {
        let pcap = get_with(
            &server,
            "/api/v1/query",
            &[("filter", &filter), ("format", "pcap")],
            t,
        );
        assert_eq!(pcap.status, 200, "{}", pcap.text());
        let bpf = if filter.starts_with("host") {
            filter.clone()
        } else {
            "tcp port 139 and tcp[tcpflags] & tcp-syn != 0".to_owned()
        };
        let expected = tcpdump_frames(dir.path(), &bpf);
        assert!(!expected.is_empty());
        assert_eq!(frames_of(dir.path(), &pcap.body), expected, "{filter}");
    }
    // A limit cuts the result; without one, a result past max_rows (50,000
    // here) breaks off the transfer instead of looking whole.
    let limited = get(&server, "/api/v1/query?filter=tcp&limit=7&format=jsonl", t);
    assert_eq!(limited.text().lines().count(), 7);
    let mut too_long = agent()
        .get(server.url("/api/v1/query?format=jsonl"))
        .header("Authorization", format!("Bearer {TOKEN}"))
        .call()
        .unwrap();
    assert_eq!(too_long.status(), 200);
    let mut partial = Vec::new();
    let read = std::io::Read::read_to_end(
        &mut too_long.body_mut().with_config().limit(1 << 30).reader(),
        &mut partial,
    );
    assert!(
        read.is_err(),
        "a 62,781-row answer past max_rows ended cleanly"
    );
    let lines = String::from_utf8_lossy(&partial).lines().count();
    assert!(lines <= 50_000, "{lines} rows before the break");

    // Histogram total = the command line's count; SQL; flows.
    let count: u64 = ok(&hindsight(&[
        "query",
        "tcp",
        "--archive",
        archive.to_str().unwrap(),
        "--count",
    ]))
    .trim()
    .parse()
    .unwrap();
    let histogram = get(&server, "/api/v1/histogram?filter=tcp&buckets=60", t).json();
    assert_eq!(histogram["total"], count);
    let buckets: u64 = histogram["counts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_u64().unwrap())
        .sum();
    assert_eq!(buckets, count);
    let sql = post(
        &server,
        "/api/v1/sql",
        json!({"sql": "SELECT count(*) AS n FROM packets WHERE ip_proto = 6"})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(sql.status, 200, "{}", sql.text());
    assert_eq!(sql.json()["n"], count);
    let flows = get(&server, &format!("/api/v1/flows?ip={RARE}"), t).json();
    let connections = flows["connections"].as_array().unwrap();
    assert!(!connections.is_empty());
    for connection in connections {
        assert!(connection["orig_addr"] == RARE || connection["resp_addr"] == RARE);
    }
    // A filter with no address scans the flows segments: what SQL finds.
    let scanned = get(
        &server,
        "/api/v1/flows?filter=udp%20port%2053&limit=50000",
        t,
    )
    .json();
    let sql = post(
        &server,
        "/api/v1/sql",
        json!({"sql": "SELECT count(*) AS n FROM flows \
                       WHERE ip_proto = 17 AND (src_port = 53 OR dst_port = 53)"})
        .to_string()
        .as_bytes(),
    );
    let dns = scanned["connections"].as_array().unwrap();
    assert!(dns.len() > 50, "{}", dns.len());
    assert_eq!(sql.json()["n"], dns.len());
    assert!(scanned["next"].is_null());
    // No filter at all: every connection, a page at a time.
    let all = get(&server, "/api/v1/flows", t).json();
    assert_eq!(all["connections"].as_array().unwrap().len(), 1000);
    assert!(all["next"].is_string(), "{all}");

    // Metrics, dumps, the contract.
    let metrics = get(&server, "/metrics", t);
    assert_eq!(metrics.status, 200);
    assert!(
        metrics
            .text()
            .contains("hindsight_segment_rows{table=\"packets\"} 62781")
    );
    common::assert_prometheus_text(&metrics.text());
    assert_eq!(get(&server, "/api/v1/dumps", t).json()["dumps"], json!([]));
    // Watches run on live traffic: this server captures none.
    let watches = get(&server, "/api/v1/watches", t).json();
    assert_eq!(watches["capturing"], json!(false));
    assert_eq!(watches["watches"], json!([]));
    post(
        &server,
        "/api/v1/watches",
        b"{\"name\": \"w\", \"sql\": \"SELECT 1\"}",
    )
    .error(409, "does not capture");
    let spec = get(&server, "/api/openapi.yaml", None);
    assert_eq!(spec.status, 200);
    for path in spec.text().lines().filter_map(|l| l.strip_prefix("  /")) {
        let path = format!("/{}", path.trim_end_matches(':'));
        let path = match path.as_str() {
            "/api/v1/query" => "/api/v1/query?limit=1".to_owned(),
            _ => path.replace("{name}", "dump-1-x.pcap"),
        };
        let routed = get(&server, &path, t);
        assert!(!routed.text().contains("no such route"), "{path}");
    }

    // Bad requests: 4xx with a JSON error that says what is wrong.
    get(&server, "/api/v1/query?filter=ip.addr%20%3D%3D%20", t).error(400, "^");
    get(&server, "/api/v1/query?filter=tcp.port%20%3D%3D%2070000", t).error(400, "invalid filter");
    get(&server, "/api/v1/query?filtr=tcp", t).error(400, "unknown field `filtr`");
    get(&server, "/api/v1/query?format=xml", t).error(400, "format \"xml\"");
    get(&server, "/api/v1/query?limit=50001", t).error(400, "max_rows");
    get(&server, "/api/v1/query?limit=-1", t).error(400, "limit");
    get(&server, "/api/v1/query?since=yesterday-ish", t).error(400, "cannot read");
    get(&server, "/api/v1/histogram?buckets=0", t).error(400, "buckets");
    get(&server, "/api/v1/flows?ip=10.0.0.300", t).error(400, "10.0.0.300");
    get(&server, "/api/v1/dumps/..%2Fconfig.toml", t).error(400, "not a dump name");
    get(&server, "/api/v1/dumps/dump-1-x.pcap", t).error(404, "no dump named");
    get(&server, "/api/v1/nothing", t).error(404, "no such route");
    post(&server, "/api/v1/sql", b"{\"sql\": \"SELEC 1\"}").error(400, "SELEC");
    post(
        &server,
        "/api/v1/sql",
        b"{\"sql\": \"SELECT 1\", \"rows\": 5}",
    )
    .error(422, "unknown field `rows`");
    post(&server, "/api/v1/sql", b"{\"sql\": ").error(400, "bad request body");
    post(
        &server,
        "/api/v1/sql",
        json!({"sql": "SELECT * FROM packets", "max_rows": 10})
            .to_string()
            .as_bytes(),
    )
    .error(400, "more than 10 rows");
    let huge = format!("{{\"sql\": \"{}\"}}", "x".repeat(100_000));
    post(&server, "/api/v1/sql", huge.as_bytes()).error(413, "max_body_bytes");
    post(&server, "/api/v1/triggers", b"{\"filter\": \"tcp\"}").error(409, "does not capture");
    let wrong_method = answer(
        agent()
            .delete(server.url("/api/v1/stats"))
            .header("Authorization", format!("Bearer {TOKEN}"))
            .call()
            .unwrap(),
    );
    wrong_method.error(405, "method not allowed");
    // The server is still well after all that.
    assert_eq!(get(&server, "/api/v1/stats", t).json()["packets"], 62_781);
    // A scrape reads what the reader holds: it opens no file of the archive
    // (while listing the dumps, under the archive, does: the trace sees opens).
    let opened = files_opened_during(&server, &archive, || {
        assert_eq!(get(&server, "/api/v1/dumps", t).status, 200);
    });
    assert!(!opened.is_empty(), "strace saw no open");
    let opened = files_opened_during(&server, &archive, || {
        assert_eq!(get(&server, "/metrics", t).status, 200);
    });
    assert_eq!(
        opened,
        Vec::<String>::new(),
        "a /metrics scrape opened these"
    );
    drop(server);

    // The time bound: a statement past `timeout_secs` gets a 504 (and is
    // aborted where DataFusion next yields), and the server goes on answering.
    let hurried_dir = dir.path().join("hurried");
    std::fs::create_dir_all(&hurried_dir).unwrap();
    let hurried = Server::start(
        &hurried_dir,
        &format!(
            "archive = {:?}\n[api]\ntimeout_secs = 1\n",
            archive.to_str().unwrap()
        ),
    );
    let endless =
        json!({"sql": "SELECT sum(a.wire_len * b.wire_len) FROM packets a CROSS JOIN packets b"})
            .to_string();
    let response = agent()
        .post(hurried.url("/api/v1/sql"))
        .header("Content-Type", "application/json")
        .send(endless.as_bytes())
        .unwrap();
    answer(response).error(504, "timeout_secs");
    assert_eq!(
        get(&hurried, "/api/v1/stats", None).json()["packets"],
        62_781
    );

    // Another writer seals segments into the archive: the server's reader
    // reloads and the next answers count them.
    let more = dir.path().join("more.pcap");
    let status = Command::new("editcap")
        .arg("-r")
        .arg(common::lan_hour())
        .arg(&more)
        .arg("1-1000")
        .status()
        .unwrap();
    assert!(status.success());
    ok(&hindsight(&[
        "ingest",
        "-q",
        more.to_str().unwrap(),
        "--archive",
        archive.to_str().unwrap(),
    ]));
    assert_eq!(
        get(&hurried, "/api/v1/stats", None).json()["packets"],
        63_781
    );
    let count = |server: &Server| {
        let sql = post(
            server,
            "/api/v1/sql",
            json!({"sql": "SELECT count(*) AS n FROM packets"})
                .to_string()
                .as_bytes(),
        );
        assert_eq!(sql.status, 200, "{}", sql.text());
        sql.json()["n"].as_u64().unwrap()
    };
    assert_eq!(count(&hurried), 63_781);
}

/// The files under `archive` that `server` opens while `work` runs, as strace
/// sees them (scripts/setup installs strace).
fn files_opened_during(server: &Server, archive: &Path, work: impl FnOnce()) -> Vec<String> {
    let trace = archive.parent().unwrap().join("metrics.strace");
    let mut strace = Command::new("strace")
        .args(["-f", "-e", "trace=open,openat,openat2", "-o"])
        .arg(&trace)
        .args(["-p", &server.child.id().to_string()])
        .stderr(Stdio::piped())
        .spawn()
        .expect("run strace (scripts/setup installs it)");
    // Attached once it says so.
    let mut attached = String::new();
    BufReader::new(strace.stderr.take().unwrap())
        .read_line(&mut attached)
        .unwrap();
    assert!(attached.contains("attached"), "strace: {attached}");
    std::thread::sleep(Duration::from_millis(200));
    work();
    std::thread::sleep(Duration::from_millis(200));
    // SIGINT detaches.
    let status = Command::new("kill")
        .args(["-INT", &strace.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let _ = strace.wait();
    let text = std::fs::read_to_string(&trace).unwrap();
    let root = archive.to_str().unwrap();
    text.lines()
        .filter(|line| line.contains(root))
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_web_ui_searches_and_downloads_a_pcap_in_headless_chromium() {
    require_tool("chromedriver");
    require_tool("tcpdump");
    let dir = tempfile::tempdir().unwrap();
    let archive = archive_lan_hour(dir.path());
    let server = Server::start(
        dir.path(),
        &format!(
            "archive = {:?}\n[api]\nmax_rows = 1000\n",
            archive.to_str().unwrap()
        ),
    );
    let downloads = dir.path().join("downloads");
    std::fs::create_dir_all(&downloads).unwrap();
    let browser = Browser::start(&downloads, &dir.path().join("profile"));
    browser.open(&server.url("/"));
    browser.wait_for("return document.title === 'hindsight'");

    // A bad filter shows the server's error, caret and all.
    browser.type_into("#filter", "ip.addr == ");
    browser.click("#search");
    let error = browser.wait_for("return document.getElementById('error').textContent");
    assert!(error.as_str().unwrap().contains('^'), "{error}");

    // A search fills the status line, the timeline and the table.
    let filter = format!("host {RARE}");
    let expected = tcpdump_frames(dir.path(), &filter);
    browser.type_into("#filter", &filter);
    browser.click("#search");
    let status = browser.wait_for(
        "const s = document.getElementById('status').textContent; \
         return s.includes('matching') ? s : ''",
    );
    assert!(
        status
            .as_str()
            .unwrap()
            .starts_with(&format!("{} matching packets", expected.len())),
        "{status}"
    );
    assert_eq!(
        browser.script("return document.getElementById('error').textContent"),
        ""
    );
    let rows = browser.script("return document.querySelectorAll('#results tbody tr').length");
    assert_eq!(rows, expected.len());
    let cells = browser.script(
        "return [...document.querySelectorAll('#results tbody tr')].every(r => \
         r.cells[2].textContent === arguments[0] || r.cells[4].textContent === arguments[0])"
            .replace("arguments[0]", &format!("'{RARE}'"))
            .as_str(),
    );
    assert_eq!(cells, true);
    let bars = browser.script("return document.querySelectorAll('#timeline rect.bar').length");
    assert!(bars.as_u64().unwrap() >= 1, "{bars}");

    // The download button saves what tcpdump selects.
    browser.click("#download");
    let saved = downloaded(&downloads, "hindsight.pcap", &expected);
    assert_eq!(read_frames(&saved), expected);

    // Past the server's max_rows (1,000 here) the button asks for the first
    // max_rows packets and says so.
    browser.type_into("#filter", "");
    browser.click("#search");
    browser.wait_for(
        "return document.getElementById('status').textContent.startsWith('62781 matching')",
    );
    let button = browser.script("return document.getElementById('download').textContent");
    assert_eq!(button, "Download first 1000 (pcap)");
    let href = browser.script("return document.getElementById('download').getAttribute('href')");
    assert!(href.as_str().unwrap().contains("limit=1000"), "{href}");
}

/// The live page: a watch of the traffic on loopback (lan-hour replayed onto
/// it) shows its rows, with links to their packets, and a chart that grows
/// without a reload, while the replay runs.
#[test]
fn the_live_page_shows_a_watch_s_rows_and_chart_while_a_replay_runs() {
    require_tool("chromedriver");
    require_tool("tcpreplay");
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("archive");
    let server = Server::start(
        dir.path(),
        &format!(
            "archive = {:?}\n[capture]\ninterface = \"lo\"\nring_mib = 16\n\
             [[watch]]\nname = \"talkers\"\nwindow = \"1s\"\n\
             sql = \"SELECT ip_str(src_addr) AS src, count(*) AS packets FROM live_packets \
             WHERE ip_in(src_addr, '10.0.0.0/8') GROUP BY src_addr \
             ORDER BY packets DESC, src LIMIT 3\"\n",
            archive.to_str().unwrap()
        ),
    );
    // lan-hour onto loopback, 3,000 packets a second for 10 s (nothing on
    // loopback answers its 10.x addresses).
    let mut replay = Command::new("tcpreplay")
        .args(["-i", "lo", "--pps", "3000", "-L", "30000"])
        .arg(common::lan_hour())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("run tcpreplay");
    let browser = Browser::start(&dir.path().join("downloads"), &dir.path().join("profile"));
    browser.open(&server.url("/live"));
    let section = r#"document.querySelector('section.watch[data-name="talkers"]')"#;
    let rows = browser.wait_for(&format!(
        "const s = {section}; return s ? s.querySelectorAll('tbody tr').length : 0"
    ));
    assert!(rows.as_u64().unwrap() >= 1, "{rows}");
    let bars = |browser: &Browser| {
        browser
            .script(&format!(
                "const s = {section}; return s ? s.querySelectorAll('rect.bar').length : 0"
            ))
            .as_u64()
            .unwrap()
    };
    let first = bars(&browser);
    assert!(first >= 1);
    // The chart grows as windows close, without a reload.
    let started = Instant::now();
    while bars(&browser) <= first {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the chart did not grow past {first} bars"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        replay.try_wait().unwrap().is_none(),
        "the replay ended before the page showed the watch"
    );
    // Each row links to its packets: its addresses in its window.
    let link = browser.script(&format!(
        "return {section}.querySelector('tbody tr a.packets').getAttribute('href')"
    ));
    let link = link.as_str().unwrap();
    assert!(link.starts_with("/?filter=host+10."), "{link}");
    assert!(link.contains("since=") && link.contains("until="), "{link}");
    let src = browser.script(&format!(
        "return {section}.querySelector('tbody tr td:nth-child(2)').textContent"
    ));
    assert!(src.as_str().unwrap().starts_with("10."), "{src}");
    let _ = replay.kill();
    let _ = replay.wait();
}

/// SQL through the API and the command line only reads: statements that write,
/// create, drop, set options or name files are refused and touch no file; the
/// command line runs them only when asked (`--allow-writes`); and serve refuses
/// to listen beyond loopback without a token.
#[test]
fn sql_only_reads_and_serve_listens_beyond_loopback_only_with_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("archive");
    common::ingest(&lan_hour(), &archive);
    let server = Server::start(
        dir.path(),
        &format!(
            "archive = {:?}\n[api]\ntoken = \"{TOKEN}\"\n",
            archive.to_str().unwrap()
        ),
    );
    let secret = dir.path().join("secret.csv");
    std::fs::write(&secret, "user,hash\nroot,x\n").unwrap();
    let written = dir.path().join("written.csv");
    let (secret_path, written_path) = (secret.to_str().unwrap(), written.to_str().unwrap());
    let refused = [
        (
            format!("COPY (SELECT 42 AS x) TO '{written_path}' STORED AS CSV"),
            "COPY",
        ),
        (
            format!("CREATE EXTERNAL TABLE s STORED AS CSV LOCATION '{secret_path}'"),
            "CREATE EXTERNAL TABLE",
        ),
        (
            "INSERT INTO packets SELECT * FROM packets".to_owned(),
            "INSERT",
        ),
        ("CREATE VIEW v AS SELECT 1".to_owned(), "CREATE VIEW"),
        ("CREATE TABLE t AS SELECT 1".to_owned(), "CREATE TABLE"),
        ("SET datafusion.execution.batch_size = 1".to_owned(), "SET"),
        ("DROP TABLE packets".to_owned(), "DROP TABLE"),
        (
            format!("EXPLAIN ANALYZE COPY (SELECT 1) TO '{written_path}' STORED AS CSV"),
            "COPY",
        ),
        ("SELECT 1 AS x INTO t2".to_owned(), "not supported"),
    ];
    for (statement, needle) in &refused {
        let answer = post(
            &server,
            "/api/v1/sql",
            json!({ "sql": statement }).to_string().as_bytes(),
        );
        assert!(
            answer.status == 403 || answer.status == 400,
            "{statement}: {} {}",
            answer.status,
            answer.text()
        );
        answer.error(answer.status, needle);
        let cli = hindsight(&["sql", statement, "--archive", archive.to_str().unwrap()]);
        assert!(!cli.status.success(), "{statement} ran on the command line");
        let stderr = String::from_utf8_lossy(&cli.stderr);
        assert!(stderr.contains(needle), "{statement}: {stderr}");
        assert!(!written.exists(), "{statement} wrote a file");
    }
    // A file path is no table: nothing outside the archive is read.
    let named = post(
        &server,
        "/api/v1/sql",
        json!({ "sql": format!("SELECT * FROM '{secret_path}'") })
            .to_string()
            .as_bytes(),
    );
    assert_eq!(named.status, 400, "{}", named.text());
    assert!(!named.text().contains("root"), "{}", named.text());
    // Nothing was dropped or changed: the archive still answers.
    let count = post(
        &server,
        "/api/v1/sql",
        br#"{"sql": "SELECT count(*) AS n FROM packets"}"#,
    );
    assert_eq!(count.status, 200, "{}", count.text());
    assert_eq!(count.json()["n"], 62_781);
    // SHOW and DESCRIBE read.
    let tables = post(&server, "/api/v1/sql", br#"{"sql": "SHOW TABLES"}"#);
    assert_eq!(tables.status, 200, "{}", tables.text());
    assert!(tables.text().contains("packets"), "{}", tables.text());
    // A refused statement with -o leaves no file.
    let out_file = dir.path().join("refused.csv");
    let cli = hindsight(&[
        "sql",
        "DROP TABLE packets",
        "--archive",
        archive.to_str().unwrap(),
        "-o",
        out_file.to_str().unwrap(),
    ]);
    assert!(!cli.status.success());
    assert!(!out_file.exists());

    // Writes on the command line when asked, with the user's own rights.
    ok(&hindsight(&[
        "sql",
        "--allow-writes",
        &format!("COPY (SELECT 42 AS x) TO '{written_path}' STORED AS CSV"),
        "--archive",
        archive.to_str().unwrap(),
    ]));
    assert!(std::fs::read_to_string(&written).unwrap().contains("42"));
    // Exports by the file's extension: CSV and Parquet.
    let csv = dir.path().join("top.csv");
    let parquet = dir.path().join("top.parquet");
    for out in [&csv, &parquet] {
        ok(&hindsight(&[
            "sql",
            "SELECT ip_proto, count(*) AS n FROM packets GROUP BY ip_proto ORDER BY ip_proto",
            "--archive",
            archive.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ]));
    }
    let csv_text = std::fs::read_to_string(&csv).unwrap();
    assert!(csv_text.starts_with("ip_proto,n\n"), "{csv_text}");
    assert!(std::fs::read(&parquet).unwrap().starts_with(b"PAR1"));

    // Beyond loopback: refused without a token, and says why.
    for listen in ["0.0.0.0:0", "[::]:0"] {
        let refused = Command::new(env!("CARGO_BIN_EXE_hindsight"))
            .args([
                "serve",
                "--archive",
                archive.to_str().unwrap(),
                "--listen",
                listen,
            ])
            .env_remove("HINDSIGHT_API_TOKEN")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(!refused.status.success(), "serve listened on {listen}");
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(stderr.contains("without a token"), "{stderr}");
    }
}

/// Waits until `downloads` holds `name` whole and at least the size of a pcap
/// of `frames` (its file header, then a record header each); returns its path. Chromium reserves the name with an empty file and writes
/// into a `.crdownload` beside it, renamed over the name at the end: the
/// download is whole once no `.crdownload` is left.
fn downloaded(downloads: &Path, name: &str, frames: &[common::PacketKey]) -> PathBuf {
    let size = 24
        + frames
            .iter()
            .map(|(_, _, data)| 16 + data.len() as u64)
            .sum::<u64>();
    let saved = downloads.join(name);
    let in_progress = || {
        std::fs::read_dir(downloads).unwrap().any(|e| {
            e.unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".crdownload")
        })
    };
    let whole = || saved.metadata().is_ok_and(|m| m.len() >= size) && !in_progress();
    let started = Instant::now();
    while !whole() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no download {name} of {size} bytes in {}: {:?}",
            downloads.display(),
            std::fs::read_dir(downloads)
                .unwrap()
                .map(|e| e.unwrap())
                .map(|e| (e.file_name(), e.metadata().map(|m| m.len()).ok()))
                .collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    saved
}

/// The sessions view: a search by SNI lists the connection with its fields,
/// the top-values panel shows the name, the row's pcap equals what `tcpdump -r`
/// selects for the connection's 5-tuple, its Community ID is tshark's, and the
/// link to a host's other sessions lists them.
#[test]
fn the_sessions_view_finds_a_connection_by_sni_and_downloads_its_packets_in_headless_chromium() {
    require_tool("chromedriver");
    require_tool("tcpdump");
    require_tool("tshark");
    let dir = tempfile::tempdir().unwrap();
    let capture = common::fixtures_dir().join("ndpi/facebook.pcap");
    assert!(capture.exists(), "run scripts/fetch-fixtures");
    let archive = dir.path().join("archive");
    common::ingest_whole(&capture, &archive, &[]);
    let server = Server::start(
        dir.path(),
        &format!("archive = {:?}\n", archive.to_str().unwrap()),
    );
    let downloads = dir.path().join("downloads");
    std::fs::create_dir_all(&downloads).unwrap();
    let browser = Browser::start(&downloads, &dir.path().join("profile"));
    browser.open(&server.url("/sessions"));
    browser.wait_for("return document.title === 'hindsight sessions'");

    // The connection, as tshark sees it.
    let (client, client_port, server_addr) = ("192.168.43.18", 44614, "31.13.86.36");
    let tshark = Command::new("tshark")
        .args(["-n", "--enable-protocol", "communityid", "-r"])
        .arg(&capture)
        .args([
            "-Y",
            &format!("tcp.srcport == {client_port} && tls.handshake.type == 1"),
            "-T",
            "fields",
            "-e",
            "communityid",
        ])
        .stderr(Stdio::null())
        .output()
        .unwrap();
    let community_id = String::from_utf8_lossy(&tshark.stdout).trim().to_owned();
    assert!(community_id.starts_with("1:"), "{community_id}");

    browser.type_into(
        "#filter",
        "tls.handshake.extensions_server_name == \"www.facebook.com\"",
    );
    browser.click("#search");
    let status = browser.wait_for(
        "const s = document.getElementById('status').textContent; \
         return s.includes('sessions') ? s : ''",
    );
    assert_eq!(status, "1 sessions.");
    assert_eq!(
        browser.script("return document.getElementById('error').textContent"),
        ""
    );
    let row = browser.script(
        "return [...document.querySelector('#sessions tbody tr').cells].map(c => c.textContent)",
    );
    let row: Vec<&str> = row
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert_eq!(
        (row[2], row[3], row[4], row[5], row[6]),
        ("TCP", client, "44614", server_addr, "443"),
        "{row:?}"
    );
    assert_eq!((row[10], row[11]), ("ssl", "www.facebook.com"), "{row:?}");
    assert!(row[12].starts_with("t1"), "a JA4: {row:?}");
    assert_eq!(row[13], community_id);

    // The top-values panel names it.
    let top = browser.script("return document.getElementById('top-tls_sni').textContent");
    assert!(top.as_str().unwrap().contains("www.facebook.com"), "{top}");

    // Its pcap is what tcpdump selects for its 5-tuple (the capture is one
    // connection's time on that 5-tuple).
    let out = dir.path().join("tcpdump.pcap");
    let status = Command::new("tcpdump")
        .arg("-r")
        .arg(&capture)
        .arg("-w")
        .arg(&out)
        .arg(format!(
            "host {client} and host {server_addr} and tcp port {client_port} and tcp port 443"
        ))
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let expected = read_frames(&out);
    assert!(expected.len() > 5, "{}", expected.len());
    // The link is in a column that a narrow window scrolls to: clicked from a
    // script, as WebDriver would not click what is out of view.
    browser.script("document.querySelector('#sessions tbody tr td:nth-child(15) a').click()");
    // The server names the file (Content-Disposition).
    let saved = downloaded(&downloads, "hindsight.pcap", &expected);
    assert_eq!(read_frames(&saved), expected);

    // The client's other sessions: every connection of the capture it has.
    let listed = ok(&hindsight(&[
        "flows",
        &format!("host {client}"),
        "--format",
        "csv",
        "--archive",
        archive.to_str().unwrap(),
    ]));
    let count = listed.lines().count() - 1;
    assert!(count >= 2, "{listed}");
    let href = browser
        .script("return document.querySelector('#sessions tbody tr td:nth-child(16) a').href");
    browser.open(href.as_str().unwrap());
    browser.wait_for(&format!(
        "return document.getElementById('status').textContent === '{count} sessions.'"
    ));
    assert_eq!(
        browser.script("return document.getElementById('filter').value"),
        format!("host {client}")
    );
    let rows = browser.script("return document.querySelectorAll('#sessions tbody tr').length");
    assert_eq!(rows, count);

    // Sorted by a column, both ways.
    browser.click("#sessions th[data-key='resp_port']");
    let ports = "return [...document.querySelectorAll('#sessions tbody tr')].map(r => Number(r.cells[6].textContent))";
    let ascending: Vec<u64> = serde_json::from_value(browser.script(ports)).unwrap();
    assert!(ascending.windows(2).all(|w| w[0] <= w[1]), "{ascending:?}");
    browser.click("#sessions th[data-key='resp_port']");
    let descending: Vec<u64> = serde_json::from_value(browser.script(ports)).unwrap();
    assert!(
        descending.windows(2).all(|w| w[0] >= w[1]),
        "{descending:?}"
    );

    // A filter that names no address or name: the flows segments scanned,
    // the sessions SQL finds.
    let sql = ok(&hindsight(&[
        "sql",
        "--archive",
        archive.to_str().unwrap(),
        "--format",
        "csv",
        "SELECT count(*) AS n FROM flows WHERE ip_proto = 6 AND (src_port = 443 OR dst_port = 443)",
    ]));
    let expected: usize = sql.lines().nth(1).unwrap().parse().unwrap();
    assert!(expected > 1, "{expected}");
    browser.type_into("#filter", "tcp port 443");
    browser.click("#search");
    let status = browser.wait_for(&format!(
        "const s = document.getElementById('status').textContent; \
         return s.includes('{expected} sessions') ? s : ''"
    ));
    assert_eq!(status, format!("{expected} sessions."));
}

/// A metric's value in `/metrics` (its sample with exactly `labels`).
fn metric(server: &Server, name: &str, labels: &str) -> f64 {
    let text = get(server, "/metrics", None).text();
    let key = format!("{name}{{{labels}}} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&key))
        .unwrap_or_else(|| panic!("no {key:?} in the metrics"))
        .trim()
        .parse()
        .unwrap()
}

/// Waits (bounded in polls, not timed as a result) until `metric` reads `value`.
fn await_metric(server: &Server, name: &str, labels: &str, value: f64) {
    for _ in 0..600 {
        if metric(server, name, labels) == value {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{name}{{{labels}}} never became {value}");
}

#[test]
fn cheap_questions_are_answered_while_scans_hold_every_scan_slot_and_a_refused_scan_says_when_to_retry()
 {
    use std::io::Write;
    require_tool("tcpdump");
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("archive");
    // Twice, so that a whole-archive answer (about 30 MB of JSON lines) is
    // larger than the socket buffers between a client that does not read and
    // the server: its search waits, holding its slot.
    for _ in 0..2 {
        common::ingest_whole(&lan_hour(), &archive, &[]);
    }
    let server = Server::start(
        dir.path(),
        &format!(
            "archive = {:?}\n[api]\nmax_concurrent = 2\nmax_scans = 1\nmax_queued = 1\ncheap_rows = 20000\ntimeout_secs = 120\n",
            archive.to_str().unwrap()
        ),
    );
    assert_eq!(
        get(&server, "/api/v1/health", None).json()["limits"]["max_scans"],
        1
    );

    // A scan whose client never reads holds the one scan slot.
    let address = server.base.trim_start_matches("http://").to_owned();
    let mut holder = std::net::TcpStream::connect(&address).unwrap();
    write!(
        holder,
        "GET /api/v1/query?filter=ip&format=jsonl HTTP/1.1\r\nHost: {address}\r\n\r\n"
    )
    .unwrap();
    await_metric(&server, "hindsight_api_running", "class=\"scan\"", 1.0);

    // A second scan waits in the queue...
    let base = server.base.clone();
    let queued = std::thread::spawn(move || {
        let response = agent()
            .get(format!("{base}/api/v1/histogram"))
            .query("filter", "tcp")
            .call()
            .unwrap();
        answer(response)
    });
    await_metric(&server, "hindsight_api_queued", "class=\"scan\"", 1.0);
    // ...and a third finds the queue full: 503, with when to retry.
    let refused = agent()
        .post(server.url("/api/v1/sql"))
        .header("Content-Type", "application/json")
        .send(br#"{"sql": "SELECT count(*) FROM packets"}"#.as_slice())
        .unwrap();
    let retry_after: u64 = refused
        .headers()
        .get("retry-after")
        .expect("a refusal carries Retry-After")
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(retry_after >= 1);
    answer(refused).error(503, "max_scans");

    // Cheap questions have slots of their own: a rare address, a connection
    // lookup, a one-second window.
    let filter = format!("host {RARE}");
    let rare = get_with(
        &server,
        "/api/v1/query",
        &[("filter", &filter), ("format", "pcap")],
        None,
    );
    assert_eq!(rare.status, 200, "{}", rare.text());
    let mut expected = tcpdump_frames(dir.path(), &filter);
    expected.extend(expected.clone());
    expected.sort();
    let mut got = frames_of(dir.path(), &rare.body);
    got.sort();
    assert_eq!(got, expected);
    let flows = get_with(&server, "/api/v1/flows", &[("ip", RARE)], None);
    assert_eq!(flows.status, 200, "{}", flows.text());
    assert!(!flows.json()["connections"].as_array().unwrap().is_empty());
    let window = get_with(
        &server,
        "/api/v1/histogram",
        &[
            ("filter", "tcp"),
            ("since", "2012-11-23T17:10:00Z"),
            ("until", "2012-11-23T17:10:00.05Z"),
        ],
        None,
    );
    assert_eq!(window.status, 200, "{}", window.text());
    assert_eq!(
        metric(&server, "hindsight_api_refused_total", "class=\"cheap\""),
        0.0
    );
    assert_eq!(
        metric(&server, "hindsight_api_refused_total", "class=\"scan\""),
        1.0
    );

    // The holder goes away: its search stops, and the queued scan runs.
    drop(holder);
    let histogram = queued.join().unwrap();
    assert_eq!(histogram.status, 200, "{}", histogram.text());
    assert_eq!(
        histogram.json()["total"],
        2 * tcpdump_frames(dir.path(), "tcp").len()
    );
    await_metric(&server, "hindsight_api_running", "class=\"scan\"", 0.0);
}

/// `--log-format json`: every line serve says is one JSON object; and a
/// SIGHUP of a server that does not capture takes new request bounds, names
/// what takes a restart, and refuses a file that does not parse.
#[test]
fn a_json_log_is_one_object_a_line_and_sighup_takes_new_request_bounds() {
    let dir = tempfile::tempdir().unwrap();
    let archive = archive_lan_hour(dir.path());
    let config = dir.path().join("hindsight.toml");
    let write = |text: &str| std::fs::write(&config, text).unwrap();
    let file = |max_rows: u64, listen: &str| {
        format!(
            "archive = {:?}\n[api]\nlisten = \"{listen}\"\nmax_rows = {max_rows}\n",
            archive.to_str().unwrap()
        )
    };
    write(&file(5, "127.0.0.1:0"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_hindsight"))
        .args(["serve", "--log-format", "json", "--config"])
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (lines, said) = std::sync::mpsc::channel::<serde_json::Value>();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let value: serde_json::Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"));
            let _ = lines.send(value);
        }
    });
    let next = |containing: &str| -> serde_json::Value {
        loop {
            let line = said
                .recv_timeout(Duration::from_secs(60))
                .unwrap_or_else(|_| panic!("serve did not say {containing:?}"));
            assert!(
                line["ts"].as_str().is_some_and(|ts| ts.ends_with('Z'))
                    && line["target"]
                        .as_str()
                        .is_some_and(|t| t.starts_with("hindsight_serve")),
                "{line}"
            );
            if line["message"].as_str().unwrap().contains(containing) {
                return line;
            }
        }
    };
    let listening = next("listening on http://");
    assert_eq!(listening["level"], "info");
    let base = listening["message"]
        .as_str()
        .unwrap()
        .split("listening on ")
        .nth(1)
        .unwrap()
        .to_owned();
    let max_rows = || -> serde_json::Value {
        let health: serde_json::Value = agent()
            .get(&format!("{base}/api/v1/health"))
            .call()
            .unwrap()
            .body_mut()
            .read_json()
            .unwrap();
        health["limits"]["max_rows"].clone()
    };
    let hangup = || {
        let status = Command::new("kill")
            .args(["-HUP", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    };
    assert_eq!(max_rows(), 5);

    write(&file(7, "127.0.0.1:1"));
    hangup();
    assert_eq!(next("SIGHUP: [api] max_rows 7")["level"], "info");
    let restart = next("takes a restart");
    assert!(
        restart["message"]
            .as_str()
            .unwrap()
            .ends_with(": api.listen"),
        "{restart}"
    );
    assert_eq!(max_rows(), 7);

    write("[api\n");
    hangup();
    let refused = next("SIGHUP: refused, the configuration in use is kept");
    assert_eq!(refused["level"], "warn");
    assert!(
        !refused["message"].as_str().unwrap().contains('\n'),
        "{refused}"
    );
    assert_eq!(max_rows(), 7);

    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    assert!(child.wait().unwrap().success());
    next("SIGTERM: stopping");
}
