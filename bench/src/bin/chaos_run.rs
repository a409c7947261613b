//! The chaos run (issue 65, acceptance 3): a capturing `hindsight serve`
//! under attack while it records. Two network namespaces of this run's own
//! joined by a veth pair; tcpreplay sends a real capture (lan-hour by
//! default) from one end for `--seconds`, and on the other end:
//!
//! - node a: `serve` capturing the veth with a SQL watch and a port-scan
//!   watch that dump, the index node of a cluster of three;
//! - node b: `serve` over an archive of the capture, SIGKILLed a third of the
//!   way through and started again;
//! - node "evil": a peer that lies (a fragment answer declaring a 2 GiB
//!   message, packet answers that are not packets, and summaries "as b");
//! - tcpdump on the same interface, the reference of what arrived;
//! - clients (`--clients` threads, this program run inside the namespace)
//!   mixing normal questions (packets, connections, SQL, cluster questions,
//!   triggers, metrics) with hostile ones (statements of 100,000 terms,
//!   gigabyte `repeat()`, a wrong token, a huge body, a poisoned summary, a
//!   watch whose window never ends, removed at once, a bad filter), and a
//!   flood of idle connections past the per-client cap.
//!
//! At the end node a is stopped with SIGTERM (timed) and its archive is read
//! back with `hindsight query`: every frame tcpdump saw must be in it, and
//! nothing else. Prints packets sent, captured and archived, requests by kind
//! and outcome (and any outcome that is not the one the bound promises), the
//! nodes' peak RSS and the shutdown time; exits 1 if a node died, a frame was
//! lost or a bound did not hold.
//!
//! Needs root (namespaces, capture).
//!
//! `cargo build --release -p hindsight -p hindsight-bench --bin hindsight --bin chaos_run && target/release/chaos_run [--seconds 120] [--pps 3000] [--clients 4] [--capture PCAP] [--work DIR]`

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use hindsight_bench::netns::{Link, is_root};
use hindsight_bench::{default_source, hindsight_binary, read_frames};

const RX: &str = "hs-chaos-rx";
const TX: &str = "hs-chaos-tx";
const PORT_A: u16 = 18_081;
const PORT_B: u16 = 18_082;
const PORT_EVIL: u16 = 18_083;
const API_TOKEN: &str = "chaos-api-token-0123456789";
const CLUSTER_TOKEN: &str = "chaos-cluster-token-0123456789";
/// The bound on one statement's memory, MiB.
const MEMORY_MIB: u64 = 256;
/// The ring node a captures into, MiB.
const RING_MIB: u64 = 64;
/// The nodes' resident bound (`max_resident_mib`): the statements' budget
/// (three times `MEMORY_MIB`), the ring, the default 256 MiB tail and 448 MiB
/// for the caches, writers and watches. A peak RSS past it (less the pages of
/// the binary and libraries, which it does not count) fails the run.
const RESIDENT_MIB: u64 = 1536;
/// The nodes' statement workers' memory limit (`worker_memory_mib`).
const WORKER_MIB: u64 = 1024;
/// The bytes of each packet an archive keeps (`ingest`'s and `serve`'s
/// default; the ring and its dumps keep whole packets).
const KEPT: usize = 128;
/// A host of lan-hour that talks all hour.
const HOST: &str = "10.64.94.199";

fn node_token(name: &str) -> String {
    format!("chaos-{name}-node-token-0123456789")
}

#[derive(Parser)]
struct Args {
    #[arg(long, default_value_t = 120, value_parser = clap::value_parser!(u64).range(10..))]
    seconds: u64,
    #[arg(long, default_value_t = 3000, value_parser = clap::value_parser!(u64).range(1..))]
    pps: u64,
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..))]
    clients: u64,
    #[arg(long, default_value_os_t = default_source())]
    capture: PathBuf,
    #[arg(long)]
    work: Option<PathBuf>,
}

/// Node `name`'s configuration.
fn config(name: &str, archive: &Path, capturing: bool) -> String {
    let mut text = format!("archive = {:?}\n", archive.to_str().expect("a UTF-8 path"));
    if capturing {
        text.push_str(&format!(
            "[capture]\ninterface = \"la\"\nseal_secs = 2\nring_mib = {RING_MIB}\n\
             [[watch]]\nname = \"talkers\"\nwindow = \"5s\"\n\
             sql = \"SELECT ip_str(src_addr) AS src, count(*) AS n FROM live_packets GROUP BY src_addr HAVING count(*) > 800\"\n\
             dump = \"host $src\"\n\
             [[watch]]\nname = \"scans\"\nanalysis = \"portscan\"\nwindow = \"5s\"\n\
             params = {{ min_fanout = 50 }}\ndump = \"host $src\"\n\
             [watches]\nwindow_timeout_secs = 5\n"
        ));
    }
    let port = if name == "a" { PORT_A } else { PORT_B };
    text.push_str(&format!(
        "[api]\nlisten = \"127.0.0.1:{port}\"\ntoken = \"{API_TOKEN}\"\n\
         max_memory_mib = {MEMORY_MIB}\nmax_resident_mib = {RESIDENT_MIB}\ntimeout_secs = 10\n\
         worker_memory_mib = {WORKER_MIB}\n\
         max_body_bytes = 1048576\n\
         [cluster]\nname = \"{name}\"\ntoken = \"{CLUSTER_TOKEN}\"\nnode_token = \"{}\"\n\
         index = [\"a\"]\nsync_secs = 1\ndeadline_secs = 10\n",
        node_token(name)
    ));
    for (node, port) in [("a", PORT_A), ("b", PORT_B), ("evil", PORT_EVIL)] {
        text.push_str(&format!(
            "[[cluster.node]]\nname = \"{node}\"\nurl = \"http://127.0.0.1:{port}\"\n\
             token_sha256 = \"{}\"\n",
            hindsight_cluster::config::token_sha256(&node_token(node))
        ));
    }
    text
}

/// A `serve` in the receiving namespace; its standard error is kept.
struct Node {
    child: Child,
    log: std::thread::JoinHandle<String>,
}

impl Node {
    fn start(hindsight: &Path, config: &Path) -> Self {
        let mut child = Link::exec(RX, hindsight)
            .args(["serve", "--config"])
            .arg(config)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start hindsight serve");
        let stderr = child.stderr.take().expect("stderr");
        let (ready, is_ready) = std::sync::mpsc::channel();
        let log = std::thread::spawn(move || {
            let mut log = String::new();
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains("listening on http://") {
                    let _ = ready.send(());
                }
                log.push_str(&line);
                log.push('\n');
            }
            log
        });
        if is_ready.recv_timeout(Duration::from_secs(120)).is_err() {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "serve ({}) did not start listening: {}",
                config.display(),
                log.join().unwrap_or_default()
            );
        }
        Self { child, log }
    }

    /// The peak RSS and the pages of files in it (the binary, libraries), MiB.
    fn peak_rss_mib(&self) -> (u64, u64) {
        let pid = self.child.id();
        (
            hindsight_bench::peak_rss_kib(pid) >> 10,
            hindsight_bench::file_rss_kib(pid) >> 10,
        )
    }

    fn signal(&self, signal: i32) {
        // SAFETY: kill has no memory preconditions; the pid is our child's.
        unsafe {
            libc::kill(self.child.id() as i32, signal);
        }
    }

    /// Stops it with `signal`; its exit status, how long it took and its log.
    fn stop(mut self, signal: i32) -> (std::process::ExitStatus, Duration, String) {
        let started = Instant::now();
        self.signal(signal);
        let status = self.child.wait().expect("wait for serve");
        let took = started.elapsed();
        (status, took, self.log.join().unwrap_or_default())
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--clients") {
        clients(&args[2..]);
        return;
    }
    let Args {
        seconds,
        pps,
        clients: threads,
        capture,
        work,
    } = Args::parse();
    if !is_root() {
        eprintln!("chaos_run: needs root (it makes network namespaces and captures)");
        std::process::exit(2);
    }
    let hindsight = hindsight_binary();
    let temp = tempfile::tempdir().expect("a work directory");
    let dir = work.unwrap_or_else(|| temp.path().to_path_buf());
    std::fs::create_dir_all(&dir).expect("the work directory");
    let (archive_a, archive_b) = (dir.join("a"), dir.join("b"));
    let _ = std::fs::remove_dir_all(&archive_a);
    // The analyses of the watches need the home network.
    std::fs::create_dir_all(&archive_a).expect("node a's archive");
    std::fs::write(
        archive_a.join("config.toml"),
        "[network]\nhome = [\"10.64.0.0/16\"]\n",
    )
    .expect("node a's archive settings");
    if !archive_b.exists() {
        hindsight_bench::run_quiet(
            Command::new(&hindsight)
                .args(["ingest", "--quiet", "--archive"])
                .arg(&archive_b)
                .arg(&capture),
        );
    }
    let (config_a, config_b) = (dir.join("a.toml"), dir.join("b.toml"));
    std::fs::write(&config_a, config("a", &archive_a, true)).expect("write a.toml");
    std::fs::write(&config_b, config("b", &archive_b, false)).expect("write b.toml");
    let in_capture = read_frames(&capture).len() as u64;
    let loops = (seconds * pps).div_ceil(in_capture).max(1);

    let link = Link::new(RX, TX);
    let reference = dir.join("tcpdump.pcap");
    let mut tcpdump = Link::exec(RX, "tcpdump")
        .args(["-i", "la", "-n", "-s", "0", "-B", "65536", "-w"])
        .arg(&reference)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start tcpdump");
    // tcpdump says "listening on" once its socket is open.
    let mut tcpdump_err = BufReader::new(tcpdump.stderr.take().expect("stderr"));
    let mut line = String::new();
    while tcpdump_err.read_line(&mut line).unwrap_or(0) > 0 && !line.contains("listening on") {
        line.clear();
    }
    let tcpdump_log = std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = tcpdump_err.read_to_string(&mut rest);
        rest
    });
    let node_a = Node::start(&hindsight, &config_a);
    let mut node_b = Node::start(&hindsight, &config_b);
    let workers_peak =
        hindsight_bench::ChildrenPeak::start(&[node_a.child.id(), node_b.child.id()]);

    let started = Instant::now();
    let mut client_run = Link::exec(RX, std::env::current_exe().expect("this program"))
        .args(["--clients", &seconds.to_string(), &threads.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the clients");
    let replay = {
        let capture = capture.clone();
        std::thread::spawn(move || {
            hindsight_bench::netns::tcpreplay(TX, "lb", &capture, pps, loops)
        })
    };
    // A third of the way: node b killed, and started again 3 s later.
    std::thread::sleep(Duration::from_secs(seconds / 3));
    let (b_status, _, b_log) = node_b.stop(libc::SIGKILL);
    std::thread::sleep(Duration::from_secs(3));
    node_b = Node::start(&hindsight, &config_b);
    workers_peak.add(node_b.child.id());
    let mut clients_out = String::new();
    client_run
        .stdout
        .take()
        .expect("stdout")
        .read_to_string(&mut clients_out)
        .expect("the clients' report");
    let clients_ok = client_run.wait().expect("wait for the clients").success();
    let (sent, rate) = replay.join().expect("the replay");
    let run_secs = started.elapsed().as_secs_f64();
    // The last packets seal within seal_secs; then node a is stopped.
    std::thread::sleep(Duration::from_secs(3));
    let (peak_a, peak_b) = (node_a.peak_rss_mib(), node_b.peak_rss_mib());
    let worker_peak = workers_peak.peak_mib();
    let a_alive = node_a.child.id();
    let (a_status, a_stop, a_log) = node_a.stop(libc::SIGTERM);
    let (_, _, b_log_2) = node_b.stop(libc::SIGTERM);
    // SAFETY: as in Node::signal.
    unsafe {
        libc::kill(tcpdump.id() as i32, libc::SIGINT);
    }
    let _ = tcpdump.wait();
    let tcpdump_said = tcpdump_log.join().unwrap_or_default();

    // The namespaces go now: the exit below skips destructors.
    drop(link);
    // What arrived (tcpdump) against what node a archived.
    let archived = dir.join("archived.pcap");
    let query = Command::new(&hindsight)
        .args(["query", "--archive"])
        .arg(&archive_a)
        .args(["-o"])
        .arg(&archived)
        .arg("")
        .output()
        .expect("run hindsight query");
    assert!(
        query.status.success() || query.status.code() == Some(3),
        "hindsight query: {}",
        String::from_utf8_lossy(&query.stderr)
    );
    let mut seen: BTreeMap<(i64, u32, Vec<u8>), i64> = BTreeMap::new();
    let reference_frames = read_frames(&reference);
    // Compared at microseconds (tcpdump's precision), by length on the wire
    // and the bytes the archive keeps of each packet (its first 128).
    let key = |(ts, wire, data): &(i64, u32, Vec<u8>)| {
        (ts / 1000, *wire, data[..data.len().min(KEPT)].to_vec())
    };
    for frame in &reference_frames {
        *seen.entry(key(frame)).or_default() += 1;
    }
    let archived_frames = read_frames(&archived);
    for frame in &archived_frames {
        *seen.entry(key(frame)).or_default() -= 1;
    }
    let lost: i64 = seen.values().filter(|n| **n > 0).sum();
    let extra: i64 = -seen.values().filter(|n| **n < 0).sum::<i64>();

    println!(
        "# chaos_run: {seconds} s of {} at {pps} packets/s ({loops} loops), {threads} clients",
        capture.display()
    );
    println!(
        "packets: sent {sent} (tcpreplay, {rate:.0}/s), arrived {} (tcpdump), archived {} (node a), lost {lost}, extra {extra}",
        reference_frames.len(),
        archived_frames.len()
    );
    println!("tcpdump: {}", tcpdump_said.trim().replace('\n', "; "));
    print!("{clients_out}");
    println!(
        "node a: peak RSS {} MiB, {} of them file pages (ring {RING_MIB} MiB; max_memory_mib {MEMORY_MIB} per statement, {} for every statement at once; max_resident_mib {RESIDENT_MIB}), SIGTERM to exit {:.2} s, {a_status}",
        peak_a.0,
        peak_a.1,
        MEMORY_MIB * 3,
        a_stop.as_secs_f64()
    );
    println!(
        "node b: peak RSS {} MiB, {} of them file pages, after its restart; SIGKILLed once ({b_status})",
        peak_b.0, peak_b.1
    );
    println!(
        "statement workers: highest peak RSS {worker_peak} MiB less file pages (worker_memory_mib {WORKER_MIB})"
    );
    println!("run: {run_secs:.0} s");
    let crashed = |log: &str| {
        log.lines()
            .filter(|l| {
                l.contains("panicked")
                    || l.contains("fatal runtime error")
                    || l.contains("overflowed")
            })
            // A statement worker refused memory past its bound: the bound held.
            .filter(|l| !(l.contains("statement worker") && l.contains("memory allocation of")))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    let mut failures = Vec::new();
    for (name, log) in [("a", &a_log), ("b", &b_log), ("b again", &b_log_2)] {
        let lines = crashed(log);
        if !lines.is_empty() {
            failures.push(format!("node {name} logged {lines:?}"));
        }
    }
    if !a_status.success() {
        failures.push(format!(
            "node a (pid {a_alive}) exited {a_status} on SIGTERM"
        ));
    }
    if lost != 0 || extra != 0 {
        failures.push(format!("{lost} frames tcpdump saw are not in the archive, {extra} are there that it did not see"));
    }
    for (name, (peak, file)) in [("a", peak_a), ("b", peak_b)] {
        if peak.saturating_sub(file) > RESIDENT_MIB {
            failures.push(format!(
                "node {name}'s peak RSS {peak} MiB less {file} MiB of file pages passed max_resident_mib {RESIDENT_MIB}"
            ));
        }
    }
    if worker_peak > WORKER_MIB {
        failures.push(format!(
            "a statement worker's peak RSS less its file pages, {worker_peak} MiB, passed worker_memory_mib {WORKER_MIB}"
        ));
    }
    if !clients_ok {
        failures.push("a bound did not hold (see the clients' report)".to_owned());
    }
    std::fs::write(dir.join("a.log"), &a_log).ok();
    if failures.is_empty() {
        println!("every packet that arrived is in the archive; no node crashed; every bound held");
    } else {
        for failure in &failures {
            println!("FAILED: {failure}");
        }
        std::process::exit(1);
    }
}

/// The status a probe reports when the server closed the connection before
/// it had sent its whole body: a body bound refusing without reading on.
const CLOSED_WHILE_SENDING: u16 = 0;
/// What a question may get besides its answer when the server is loaded:
/// 503 (its queue is full, `Retry-After`) or 504 (past `timeout_secs`).
const ANSWER_OR_BUSY: &[u16] = &[200, 503, 504];

/// A probe's outcome: the status and a note (the `hindsight-partial`
/// header, a time), or why no answer came.
type Outcome = Result<(u16, Option<String>), String>;

/// One kind of request, what it sends, and the statuses its bound promises.
struct Probe {
    kind: &'static str,
    hostile: bool,
    send: fn(&ureq::Agent) -> Outcome,
    expect: &'static [u16],
}

fn base() -> String {
    format!("http://127.0.0.1:{PORT_A}")
}

fn get(agent: &ureq::Agent, path: &str, query: &[(&str, &str)], token: &str) -> Outcome {
    let mut request = agent
        .get(format!("{}{path}", base()))
        .header("Authorization", format!("Bearer {token}"));
    for (k, v) in query {
        request = request.query(*k, *v);
    }
    finish(request.call())
}

fn post(agent: &ureq::Agent, path: &str, body: &[u8], token: &str) -> Outcome {
    let sent = agent
        .post(format!("{}{path}", base()))
        .header("Authorization", format!("Bearer {token}"))
        .header("Content-Type", "application/json")
        .send(body);
    match sent {
        Err(ureq::Error::Io(e))
            if matches!(
                e.kind(),
                std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
            ) && body.len() > 65_536 =>
        {
            Ok((CLOSED_WHILE_SENDING, None))
        }
        sent => finish(sent),
    }
}

/// The status, and the `hindsight-partial` header if there is one (as
/// `partial: ...`).
fn finish(result: Result<ureq::http::Response<ureq::Body>, ureq::Error>) -> Outcome {
    let mut response = result.map_err(|e| e.to_string())?;
    let partial = response
        .headers()
        .get("hindsight-partial")
        .map(|v| format!("partial: {}", v.to_str().unwrap_or("?")));
    let status = response.status().as_u16();
    let mut sink = Vec::new();
    response
        .body_mut()
        .as_reader()
        .take(256 << 20)
        .read_to_end(&mut sink)
        .map_err(|e| format!("reading the answer: {e}"))?;
    if status >= 400 && !sink.starts_with(b"{\"error\"") {
        return Err(format!(
            "{status} without a JSON error: {}",
            String::from_utf8_lossy(&sink[..sink.len().min(200)])
        ));
    }
    Ok((status, partial))
}

fn sql(agent: &ureq::Agent, sql: &str, cluster: bool) -> Outcome {
    let body = serde_json::json!({"sql": sql, "cluster": cluster, "max_rows": 1000}).to_string();
    post(agent, "/api/v1/sql", body.as_bytes(), API_TOKEN)
}

fn probes() -> Vec<Probe> {
    vec![
        Probe {
            kind: "packets of a host",
            hostile: false,
            expect: ANSWER_OR_BUSY,
            send: |a| {
                get(
                    a,
                    "/api/v1/query",
                    &[
                        ("filter", &format!("host {HOST}")),
                        ("format", "pcap"),
                        ("since", "60s"),
                    ],
                    API_TOKEN,
                )
            },
        },
        Probe {
            kind: "connections of a host",
            hostile: false,
            expect: ANSWER_OR_BUSY,
            send: |a| get(a, "/api/v1/flows", &[("ip", HOST)], API_TOKEN),
        },
        Probe {
            kind: "SQL top talkers",
            hostile: false,
            expect: ANSWER_OR_BUSY,
            send: |a| {
                sql(
                    a,
                    "SELECT ip_str(src_addr) AS src, count(*) AS n FROM packets GROUP BY src_addr ORDER BY n DESC LIMIT 5",
                    false,
                )
            },
        },
        Probe {
            kind: "cluster packets (evil lies)",
            hostile: false,
            expect: ANSWER_OR_BUSY,
            send: |a| {
                get(
                    a,
                    "/api/v1/query",
                    &[
                        ("filter", &format!("host {HOST}")),
                        ("cluster", "true"),
                        ("format", "jsonl"),
                        ("since", "30s"),
                    ],
                    API_TOKEN,
                )
            },
        },
        Probe {
            kind: "cluster SQL (evil lies)",
            hostile: false,
            expect: ANSWER_OR_BUSY,
            send: |a| sql(a, "SELECT count(*) AS n FROM packets", true),
        },
        Probe {
            kind: "stats and metrics",
            hostile: false,
            expect: ANSWER_OR_BUSY,
            send: |a| {
                get(a, "/api/v1/stats", &[], API_TOKEN)?;
                get(a, "/metrics", &[], API_TOKEN)
            },
        },
        Probe {
            kind: "trigger",
            hostile: false,
            expect: &[202, 429, 503],
            send: |a| {
                post(
                    a,
                    "/api/v1/triggers",
                    format!(r#"{{"filter": "host {HOST}", "before_secs": 5}}"#).as_bytes(),
                    API_TOKEN,
                )
            },
        },
        Probe {
            kind: "statement of 100,000 terms",
            hostile: true,
            expect: &[400, 413, 503, CLOSED_WHILE_SENDING],
            send: |a| {
                let mut text = String::from("SELECT 1");
                for _ in 1..100_000 {
                    text.push_str("+1");
                }
                sql(a, &text, false)
            },
        },
        Probe {
            kind: "repeat() of 2 GiB",
            hostile: true,
            expect: &[400, 503],
            send: |a| sql(a, "SELECT length(repeat('a', 2147483647))", false),
        },
        Probe {
            kind: "cluster GROUP BY past the memory bound",
            hostile: true,
            expect: &[200, 400, 503, 504],
            send: |a| {
                sql(
                    a,
                    "SELECT string_agg(ip_str(src_addr) || repeat('x', 5000), ',') AS s FROM packets",
                    true,
                )
            },
        },
        Probe {
            kind: "wrong token",
            hostile: true,
            expect: &[401],
            send: |a| {
                get(
                    a,
                    "/api/v1/query",
                    &[("filter", "tcp")],
                    "not-the-token-0123456789",
                )
            },
        },
        Probe {
            kind: "body of 4 MiB",
            hostile: true,
            expect: &[413, CLOSED_WHILE_SENDING],
            send: |a| {
                let body = format!(r#"{{"sql": "SELECT '{}'"}}"#, "x".repeat(4 << 20));
                post(a, "/api/v1/sql", body.as_bytes(), API_TOKEN)
            },
        },
        Probe {
            kind: "summary as b with the cluster token",
            hostile: true,
            expect: &[401],
            send: |a| {
                post(
                    a,
                    "/api/v1/cluster/summaries",
                    br#"{"node": "b", "summaries": []}"#,
                    CLUSTER_TOKEN,
                )
            },
        },
        Probe {
            kind: "sync as b with evil's own token",
            hostile: true,
            expect: &[403],
            send: |a| {
                let body = serde_json::json!({"node": "b", "ids": [], "capturing": false, "now_ns": 0, "digest": "0".repeat(64)}).to_string();
                post(
                    a,
                    "/api/v1/cluster/sync",
                    body.as_bytes(),
                    &node_token("evil"),
                )
            },
        },
        Probe {
            kind: "bad filter",
            hostile: true,
            expect: &[400],
            send: |a| {
                get(
                    a,
                    "/api/v1/query",
                    &[("filter", &"(".repeat(10_000))],
                    API_TOKEN,
                )
            },
        },
        Probe {
            kind: "endless watch, removed",
            hostile: true,
            expect: &[204],
            send: |a| {
                static WATCHES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
                let name = format!("endless{}", WATCHES.fetch_add(1, Ordering::Relaxed));
                let body = serde_json::json!({
                "name": name,
                "sql": "SELECT count(*) AS n FROM live_packets a JOIN live_packets b ON a.ip_proto = b.ip_proto JOIN live_packets c ON b.ip_proto = c.ip_proto",
                "window": "2s",
            }).to_string();
                let (status, _) = post(a, "/api/v1/watches", body.as_bytes(), API_TOKEN)?;
                if status != 201 {
                    return Ok((status, None));
                }
                std::thread::sleep(Duration::from_secs(3));
                let asked = Instant::now();
                let (status, _) = finish(
                    a.delete(format!("{}/api/v1/watches/{name}", base()))
                        .header("Authorization", format!("Bearer {API_TOKEN}"))
                        .call(),
                )?;
                let took = asked.elapsed().as_secs_f64();
                let within = if took < 1.0 {
                    "under 1 s"
                } else {
                    "1 s or more"
                };
                Ok((status, Some(format!("removed in {within}"))))
            },
        },
    ]
}

/// `text` cut to 100 characters, its numbers folded to N (to count kinds).
fn fold(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars().take(100) {
        if c.is_ascii_digit() {
            if !out.ends_with('N') {
                out.push('N');
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The lying peer: answers fragments with an Arrow stream whose first
/// message declares 2 GiB of metadata, and everything else with a body that
/// is not what was asked.
fn evil_peer(stop: Arc<AtomicBool>) {
    let listener =
        std::net::TcpListener::bind(("127.0.0.1", PORT_EVIL)).expect("bind the evil peer");
    listener.set_nonblocking(true).expect("nonblocking");
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((mut stream, _)) => {
                std::thread::spawn(move || {
                    let _ = stream.set_nonblocking(false);
                    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
                    let mut head = Vec::new();
                    let mut byte = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") && head.len() < 65_536 {
                        if stream.read(&mut byte).unwrap_or(0) == 0 {
                            return;
                        }
                        head.push(byte[0]);
                    }
                    let head = String::from_utf8_lossy(&head).into_owned();
                    let body: Vec<u8> = if head.contains("/cluster/fragment") {
                        let mut lie = vec![0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f];
                        lie.extend_from_slice(&[0x41; 4096]);
                        lie
                    } else {
                        b"HSR1 these are not rows".repeat(100)
                    };
                    let _ = write!(
                        stream,
                        "HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = stream.write_all(&body);
                });
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// A connection to 127.0.0.1:`port` from the local address `from` (another
/// client, as the server counts them, than the question threads).
fn connect_from(from: [u8; 4], port: u16) -> Option<TcpStream> {
    use std::os::fd::FromRawFd;
    let address = |ip: [u8; 4], port: u16| libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from_ne_bytes(ip),
        },
        sin_zero: [0; 8],
    };
    let size = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: a new socket, bound and connected with addresses that live
    // across the calls; the descriptor is owned by the TcpStream made of it
    // or closed here.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return None;
        }
        let local = address(from, 0);
        let remote = address([127, 0, 0, 1], port);
        if libc::bind(fd, (&raw const local).cast(), size) != 0
            || libc::connect(fd, (&raw const remote).cast(), size) != 0
        {
            libc::close(fd);
            return None;
        }
        Some(TcpStream::from_raw_fd(fd))
    }
}

/// Connections that send half a request head and wait: the server must close
/// them (header timeout) and refuse those past the per-client cap (503).
fn idle_flood(count: usize) -> (u64, u64, u64) {
    let mut streams = Vec::new();
    for _ in 0..count {
        if let Some(mut stream) = connect_from([127, 0, 0, 2], PORT_A) {
            let _ = stream.write_all(b"GET /api/v1/stats HTTP/1.1\r\nHost: 127.0.0.1\r\n");
            let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
            streams.push(stream);
        }
    }
    let (mut refused, mut closed, mut held) = (0, 0, 0);
    for mut stream in streams {
        let mut answer = Vec::new();
        match stream.read_to_end(&mut answer) {
            Ok(_) if answer.starts_with(b"HTTP/1.1 503") => refused += 1,
            Ok(_) => closed += 1,
            Err(_) => held += 1,
        }
    }
    (refused, closed, held)
}

/// The clients, run inside the receiving namespace as
/// `chaos_run --clients SECONDS THREADS`: prints their tally; exits 1 if an
/// outcome broke its bound.
fn clients(args: &[String]) {
    let seconds: u64 = args.first().and_then(|s| s.parse().ok()).unwrap_or(60);
    let threads: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(4);
    let stop = Arc::new(AtomicBool::new(false));
    let evil = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || evil_peer(stop))
    };
    let tally: Arc<Mutex<BTreeMap<(String, String), u64>>> = Arc::default();
    let broken: Arc<Mutex<Vec<String>>> = Arc::default();
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut workers = Vec::new();
    for t in 0..threads {
        let (tally, broken) = (Arc::clone(&tally), Arc::clone(&broken));
        workers.push(std::thread::spawn(move || {
            let agent: ureq::Agent = ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_global(Some(Duration::from_secs(60)))
                .build()
                .into();
            let probes = probes();
            let mut i = t as usize;
            while Instant::now() < deadline {
                let probe = &probes[i % probes.len()];
                i += 1;
                // Even threads ask mostly normal questions, odd ones mostly hostile.
                if probe.hostile == t.is_multiple_of(2) && !i.is_multiple_of(4) {
                    continue;
                }
                let outcome = (probe.send)(&agent);
                let label = match &outcome {
                    Ok((status, Some(note))) => format!("{status}, {}", fold(note)),
                    Ok((CLOSED_WHILE_SENDING, None)) => {
                        "closed before the whole body was sent".to_owned()
                    }
                    Ok((status, None)) => status.to_string(),
                    Err(why) => format!("error: {}", why.chars().take(60).collect::<String>()),
                };
                let held = matches!(&outcome, Ok((status, _)) if probe.expect.contains(status));
                if !held {
                    broken
                        .lock()
                        .expect("lock")
                        .push(format!("{}: {label}", probe.kind));
                }
                *tally
                    .lock()
                    .expect("lock")
                    .entry((probe.kind.to_owned(), label))
                    .or_default() += 1;
            }
        }));
    }
    // Twice during the run: 200 idle connections at once.
    let mut floods = Vec::new();
    for _ in 0..2 {
        std::thread::sleep(Duration::from_secs(seconds / 3));
        floods.push(idle_flood(200));
    }
    for worker in workers {
        let _ = worker.join();
    }
    stop.store(true, Ordering::Relaxed);
    let _ = evil.join();
    let tally = tally.lock().expect("lock");
    let broken = broken.lock().expect("lock");
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let json = |path: &str| -> serde_json::Value {
        agent
            .get(format!("{}{path}", base()))
            .header("Authorization", format!("Bearer {API_TOKEN}"))
            .call()
            .ok()
            .and_then(|mut r| r.body_mut().read_to_string().ok())
            .and_then(|text| serde_json::from_str(&text).ok())
            .unwrap_or_default()
    };
    let watches = json("/api/v1/watches");
    for watch in watches["watches"].as_array().into_iter().flatten() {
        let stats = if watch["stats"].is_object() {
            &watch["stats"]
        } else {
            watch
        };
        println!(
            "watch {}: {} windows, {} rows, {} errors, {} dumps",
            watch["name"].as_str().unwrap_or("?"),
            stats["windows"],
            stats["rows"],
            stats["errors"],
            stats["dumps"]
        );
    }
    let dumps = json("/api/v1/dumps");
    println!(
        "dumps listed: {}",
        dumps["dumps"].as_array().map_or(0, Vec::len)
    );
    println!("requests by kind and outcome:");
    let mut total = 0;
    for ((kind, label), n) in tally.iter() {
        total += n;
        println!("  {n:>6}  {kind}: {label}");
    }
    println!("  {total:>6}  in all");
    for (i, (refused, closed, held)) in floods.iter().enumerate() {
        println!(
            "idle flood {} (from 127.0.0.2): 200 half-sent request heads: {refused} refused at once (503, past max_connections_per_client), {closed} closed by the header timeout, {held} still open after 30 s",
            i + 1
        );
    }
    let mut failed = !broken.is_empty();
    for (refused, closed, held) in &floods {
        failed |= *held > 0 || refused + closed != 200 || *refused == 0;
    }
    if !broken.is_empty() {
        let mut kinds: BTreeMap<&str, u64> = BTreeMap::new();
        for line in broken.iter() {
            *kinds.entry(line.as_str()).or_default() += 1;
        }
        println!("outcomes outside their bound:");
        for (line, n) in kinds {
            println!("  {n:>6}  {line}");
        }
    }
    std::process::exit(i32::from(failed));
}
