//! Live capture without external network: two network namespaces of our own
//! joined by a veth pair; tcpreplay sends the real lan-hour capture from one
//! end, `hindsight record` and tcpdump capture on the other. The archive must
//! hold exactly what tcpdump saw, and the dump of a trigger exactly what
//! `tcpdump -r` selects from tcpdump's recording for the same window and filter.
//!
//! Needs root or password-less sudo (namespaces, raw capture); `scripts/setup` installs tcpreplay,
//! tcpdump and iproute2. Set `HINDSIGHT_SKIP_LIVE=1` to skip on a machine where
//! namespaces cannot be made.

mod common;

use common::{
    PacketKey, hindsight, lan_hour, lan_hour_shifted, ok, read_frames as read_capture, require_tool,
};

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// `program` run as root: directly when we are root, else through `sudo -n`.
fn privileged(program: &str) -> Command {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc_geteuid() } == 0 {
        Command::new(program)
    } else {
        let mut command = Command::new("sudo");
        command.args(["-n", program]);
        command
    }
}

fn run(command: &mut Command) {
    let output = command.output().expect("run command");
    assert!(
        output.status.success(),
        "{command:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Two namespaces joined by a veth pair; removed when dropped.
struct Namespaces {
    receiver: String,
    sender: String,
}

/// The live tests run one at a time: two replays at once on a 2-core machine
/// would make the capture, not hindsight, the thing under test.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Namespaces made by this process so far, to name the next ones.
static MADE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

impl Namespaces {
    fn new() -> Self {
        let n = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let id = format!("{}-{n}", std::process::id());
        let this = Self {
            receiver: format!("hs-rec-{id}"),
            sender: format!("hs-send-{id}"),
        };
        for ns in [&this.receiver, &this.sender] {
            run(privileged("ip").args(["netns", "add", ns]));
        }
        run(privileged("ip").args([
            "link",
            "add",
            "hs-a",
            "netns",
            &this.receiver,
            "type",
            "veth",
            "peer",
            "name",
            "hs-b",
            "netns",
            &this.sender,
        ]));
        // No IPv6 on either end: no neighbour discovery beside the replayed traffic.
        for (ns, link) in [(&this.receiver, "hs-a"), (&this.sender, "hs-b")] {
            run(privileged("ip").args([
                "netns",
                "exec",
                ns,
                "sysctl",
                "-q",
                &format!("net.ipv6.conf.{link}.disable_ipv6=1"),
            ]));
            run(privileged("ip").args(["-n", ns, "link", "set", link, "up"]));
        }
        this
    }

    fn exec(&self, ns: &str, program: &str) -> Command {
        let mut command = privileged("ip");
        command.args(["netns", "exec", ns, program]);
        command
    }

    /// Starts replaying lan-hour from the sender at `pps` packets a second.
    fn start_replay(&self, pps: u32) -> Reaped {
        Reaped(
            self.exec(&self.sender, "tcpreplay")
                .args(["-i", "hs-b", "--pps", &pps.to_string()])
                .arg(lan_hour())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        )
    }

    /// Replays lan-hour at 20,000 packets a second (3.1 s), running `then`
    /// meanwhile.
    fn replay(&self, then: &mut dyn FnMut()) {
        let mut tcpreplay = self.start_replay(20_000);
        then();
        assert!(tcpreplay.wait().unwrap().success());
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for ns in [&self.receiver, &self.sender] {
            let _ = privileged("ip").args(["netns", "del", ns]).status();
        }
    }
}

/// Waits until the child's standard error has printed a line containing `text`,
/// and keeps draining it in the background; returns what it printed in the end.
fn wait_for_stderr(child: &mut Child, text: &str) -> std::thread::JoinHandle<String> {
    wait_for_line(child, text).0
}

/// A child process killed when dropped if it still runs (a test that fails
/// half-way leaves no server behind).
struct Reaped(Child);

impl std::ops::Deref for Reaped {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Reaped {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Starts `hindsight serve --config CONFIG` in the receiving namespace and
/// waits until it listens: the process, its stderr and its address.
fn start_serve(
    ns: &Namespaces,
    config: &Path,
) -> (Reaped, std::thread::JoinHandle<String>, String) {
    let mut child = ns
        .exec(&ns.receiver, env!("CARGO_BIN_EXE_hindsight"))
        .args(["serve", "--config"])
        .arg(config)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (stderr, line) = wait_for_line(&mut child, "listening on http://");
    let address = line
        .split("listening on http://")
        .nth(1)
        .unwrap()
        .to_owned();
    (Reaped(child), stderr, address)
}

/// As [`wait_for_stderr`], and also returns the line that contained `text`.
fn wait_for_line(child: &mut Child, text: &str) -> (std::thread::JoinHandle<String>, String) {
    let stderr = child.stderr.take().expect("piped stderr");
    let (ready, is_ready) = std::sync::mpsc::channel();
    let text = text.to_owned();
    let reader = std::thread::spawn(move || {
        let mut all = String::new();
        let mut sent = false;
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if !sent && line.contains(&text) {
                let _ = ready.send(line.clone());
                sent = true;
            }
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    let line = is_ready
        .recv_timeout(Duration::from_secs(60))
        .expect("the capture did not start");
    (reader, line)
}

fn interrupt(child: &Child) {
    signal(child, "INT");
}

fn signal(child: &Child, name: &str) {
    run(privileged("kill").args([&format!("-{name}"), &child.id().to_string()]));
}

/// tcpdump recording everything on the receiving end, as the oracle.
struct Tcpdump {
    child: Reaped,
    stderr: std::thread::JoinHandle<String>,
}

impl Tcpdump {
    fn start(ns: &Namespaces, reference: &Path) -> Self {
        let mut child = ns
            .exec(&ns.receiver, "tcpdump")
            .args([
                "-i",
                "hs-a",
                "-s",
                "0",
                "-U",
                "--time-stamp-precision=nano",
                "-w",
            ])
            .arg(reference)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = wait_for_stderr(&mut child, "listening on");
        Self {
            child: Reaped(child),
            stderr,
        }
    }

    /// Stops it; it must have dropped nothing.
    fn stop(mut self) {
        interrupt(&self.child);
        self.child.wait().unwrap();
        let stderr = self.stderr.join().unwrap();
        assert!(
            stderr.contains("\n0 packets dropped by kernel"),
            "tcpdump dropped packets: {stderr}"
        );
    }
}

/// The archive holds every packet of tcpdump's recording `reference` (and no
/// other from its time on): same times, wire lengths and bytes (the archive
/// keeps 128 bytes of each).
fn assert_archive_holds(archive: &Path, reference: &Path, log: &str) {
    let seen = read_capture(reference);
    let replayed = read_capture(&lan_hour()).len();
    assert!(
        seen.len() >= replayed,
        "tcpdump saw {} of {replayed}",
        seen.len()
    );
    let since = seen.iter().map(|p| p.0).min().unwrap();
    let exported = archive.with_extension("export.pcap");
    ok(&hindsight(&[
        "query",
        "",
        "--archive",
        archive.to_str().unwrap(),
        "--since",
        &format!("{}.{:09}", since / 1_000_000_000, since % 1_000_000_000),
        "-o",
        exported.to_str().unwrap(),
    ]));
    let mut archived = read_capture(&exported);
    archived.sort();
    let mut expected: Vec<PacketKey> = seen
        .iter()
        .map(|(ts, len, data)| (*ts, *len, data[..data.len().min(128)].to_vec()))
        .collect();
    expected.sort();
    assert_eq!(archived.len(), expected.len(), "{log}");
    assert!(archived == expected, "archive and tcpdump differ");
}

/// What `tcpdump -r reference FILTER` selects, within `window` (ns).
fn tcpdump_select(
    reference: &Path,
    filter: &str,
    window: &std::ops::RangeInclusive<i64>,
) -> Vec<PacketKey> {
    let selected = reference.with_extension("selected.pcap");
    run(Command::new("tcpdump")
        .args(["--time-stamp-precision=nano", "-r"])
        .arg(reference)
        .arg("-w")
        .arg(&selected)
        .arg(filter));
    read_capture(&selected)
        .into_iter()
        .filter(|(ts, _, _)| window.contains(ts))
        .collect()
}

/// False (the test returns) when HINDSIGHT_SKIP_LIVE is set; fails the test if
/// it cannot make namespaces or lacks a tool.
fn live_tests_enabled() -> bool {
    if std::env::var_os("HINDSIGHT_SKIP_LIVE").is_some() {
        eprintln!("HINDSIGHT_SKIP_LIVE is set: live test skipped");
        return false;
    }
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc_geteuid() } == 0;
    assert!(
        root,
        "the live test needs root; set HINDSIGHT_SKIP_LIVE=1 to skip it"
    );
    for tool in ["ip", "tcpdump", "tcpreplay", "curl"] {
        require_tool(tool);
    }
    true
}

#[test]
fn live_capture_archives_what_tcpdump_sees_and_a_trigger_dumps_its_window() {
    if !live_tests_enabled() {
        return;
    }
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let work = tempfile::tempdir().unwrap();
    let archive = work.path().join("archive");
    let reference = work.path().join("tcpdump.pcap");
    let ns = Namespaces::new();

    let tcpdump = Tcpdump::start(&ns, &reference);
    let (before, after) = ("1", "1");
    let mut recorder = ns
        .exec(&ns.receiver, env!("CARGO_BIN_EXE_hindsight"))
        // Two capture threads in an AF_PACKET fanout group: two producers of the ring.
        .args(["record", "-i", "hs-a", "--fanout", "2", "--archive"])
        .arg(&archive)
        .args([
            "--trigger",
            "ip.addr == 172.30.100.1",
            "--dump",
            "host $src",
            "--before",
            before,
            "--after",
            after,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let recorder_err = wait_for_stderr(&mut recorder, "recording on");

    let replay = ns
        .exec(&ns.sender, "tcpreplay")
        .args(["-i", "hs-b", "--pps", "20000"])
        .arg(lan_hour())
        .output()
        .unwrap();
    assert!(
        replay.status.success(),
        "{}",
        String::from_utf8_lossy(&replay.stderr)
    );
    // Whatever the kernel still holds reaches both readers within their poll times.
    std::thread::sleep(Duration::from_millis(500));
    interrupt(&recorder);
    let status = recorder.wait().unwrap();
    let recorder_err = recorder_err.join().unwrap();
    assert!(status.success(), "hindsight record failed: {recorder_err}");
    // Both sockets of the fanout group received a share of the traffic.
    let shares: Vec<u64> = recorder_err
        .lines()
        .find_map(|line| line.strip_prefix("capture threads (fanout): "))
        .unwrap_or_else(|| panic!("no fanout summary: {recorder_err}"))
        .split(" + ")
        .map(|n| n.parse().unwrap())
        .collect();
    assert_eq!(shares.len(), 2);
    assert!(shares.iter().all(|&n| n > 0), "{shares:?}");
    eprintln!("fanout: {shares:?} packets per capture thread");
    tcpdump.stop();

    // The archive holds every packet tcpdump saw.
    assert_archive_holds(&archive, &reference, &recorder_err);

    // The first trigger is the first packet of 172.30.100.1 tcpdump saw; its dump
    // is what tcpdump -r selects from tcpdump's recording for `host $src` and
    // the window.
    let mut dumps: Vec<_> = std::fs::read_dir(archive.join("dumps"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    dumps.sort();
    assert!(!dumps.is_empty(), "no dump: {recorder_err}");
    let first_rare = tcpdump_select(&reference, "host 172.30.100.1", &(i64::MIN..=i64::MAX))[0].0;
    let name = dumps[0].file_stem().unwrap().to_str().unwrap().to_owned();
    // `dump-<ns>-<n>-<src>`, the address's dots made `_` by the dumper.
    let mut parts = name.splitn(4, '-').skip(1);
    let at: i64 = parts.next().unwrap().parse().unwrap();
    let src = parts.nth(1).unwrap().replace('_', ".");
    assert_eq!(at, first_rare, "the trigger packet");
    let window = (at - 1_000_000_000)..=(at + 1_000_000_000);
    let oracle = tcpdump_select(&reference, &format!("host {src}"), &window);
    let dumped = read_capture(&dumps[0]);
    assert!(oracle.len() > 10, "{} packets in the window", oracle.len());
    assert!(!recorder_err.contains("incomplete"), "{recorder_err}");
    assert_eq!(dumped.len(), oracle.len());
    assert!(dumped == oracle, "dump and tcpdump's selection differ");
}

/// A catalogued segment: id, file, rows, bytes, CRC-32.
type Sealed = (u64, String, u64, u64, u32);

/// The catalog of `archive`, from `hindsight stats --json --segments`.
fn catalog(archive: &Path) -> Vec<Sealed> {
    let stats: serde_json::Value = serde_json::from_str(&ok(&hindsight(&[
        "stats",
        "--json",
        "--segments",
        "--archive",
        archive.to_str().unwrap(),
    ])))
    .unwrap();
    stats["segment_list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["id"].as_u64().unwrap(),
                s["file"].as_str().unwrap().to_owned(),
                s["rows"].as_u64().unwrap(),
                s["size_bytes"].as_u64().unwrap(),
                u32::try_from(s["crc32"].as_u64().unwrap()).unwrap(),
            )
        })
        .collect()
}

/// Every catalogued segment's file has the catalogued size and checksum.
fn assert_intact(archive: &Path, segments: &[Sealed]) {
    for (id, file, _, size, crc) in segments {
        let (actual_size, actual_crc) =
            hindsight_store::archive::checksum_file(&archive.join(file)).unwrap();
        assert_eq!(
            (actual_size, actual_crc),
            (*size, *crc),
            "segment {id} ({file})"
        );
    }
}

/// Packets the archive answers for the empty filter.
fn count_packets(archive: &Path) -> u64 {
    ok(&hindsight(&[
        "query",
        "",
        "--count",
        "--archive",
        archive.to_str().unwrap(),
    ]))
    .trim()
    .parse()
    .unwrap()
}

/// `hindsight serve` capturing in a namespace: a SIGKILL mid-replay leaves every
/// sealed segment intact and no partial one visible; the restarted server
/// recovers, archives a second replay exactly as tcpdump sees it, dumps a
/// window on `POST /api/v1/triggers` equal to tcpdump's selection, and on
/// SIGTERM drains the ring, seals, and exits 0.
#[test]
fn serve_survives_sigkill_and_seals_everything_on_sigterm() {
    if !live_tests_enabled() {
        return;
    }
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let work = tempfile::tempdir().unwrap();
    let archive = work.path().join("archive");
    let config = work.path().join("hindsight.toml");
    std::fs::write(
        &config,
        format!(
            "archive = {:?}\n[capture]\ninterface = \"hs-a\"\nseal_secs = 1\n\
             [api]\nlisten = \"127.0.0.1:0\"\n",
            archive.to_str().unwrap()
        ),
    )
    .unwrap();
    let ns = Namespaces::new();
    run(privileged("ip").args(["-n", &ns.receiver, "link", "set", "lo", "up"]));
    let serve = || start_serve(&ns, &config);
    let replay = |then: &mut dyn FnMut()| ns.replay(then);

    // 1. SIGKILL 2.5 s into a 3.1 s replay, after about two seals.
    let (mut first, first_err, _) = serve();
    replay(&mut || {
        std::thread::sleep(Duration::from_millis(2500));
        signal(&first, "KILL");
    });
    first.wait().unwrap();
    let first_err = first_err.join().unwrap();
    let sealed = catalog(&archive);
    let packets_sealed: u64 = sealed
        .iter()
        .filter(|s| s.1.starts_with("packets/"))
        .map(|s| s.2)
        .sum();
    assert!(
        packets_sealed > 0,
        "nothing sealed before the kill: {first_err}"
    );
    eprintln!(
        "killed: {} segment(s) sealed, {packets_sealed} packets",
        sealed.len()
    );
    assert_intact(&archive, &sealed);
    // Readers see exactly the sealed segments, whatever the kill left unsealed.
    assert_eq!(count_packets(&archive), packets_sealed);

    // 2. Restart: recovery keeps every sealed segment.
    let reference = work.path().join("tcpdump.pcap");
    let tcpdump = Tcpdump::start(&ns, &reference);
    let (second, second_err, address) = serve();
    let curl = |path: &str, extra: &[&str]| -> Vec<u8> {
        let output = ns
            .exec(&ns.receiver, "curl")
            .args(["-sS", "--fail-with-body"])
            .args(extra)
            .arg(format!("http://{address}{path}"))
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "curl {path}: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        output.stdout
    };
    // POSTs `body` as JSON: "STATUS BODY".
    let curl_status = |path: &str, body: &str| -> String {
        let output = ns
            .exec(&ns.receiver, "curl")
            .args([
                "-sS",
                "-H",
                "Content-Type: application/json",
                "--data-binary",
                body,
            ])
            .args(["-w", "\n%{http_code}"])
            .arg(format!("http://{address}{path}"))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        let (answer, status) = text.rsplit_once('\n').unwrap_or(("", &text));
        format!("{status} {answer}")
    };
    let health: serde_json::Value = serde_json::from_slice(&curl("/api/v1/health", &[])).unwrap();
    assert_eq!(health["capture"]["running"], true);
    let mut accepted = serde_json::Value::Null;
    replay(&mut || {
        std::thread::sleep(Duration::from_millis(1500));
        let body = r#"{"filter": "udp port 53", "before_secs": 30, "after_secs": 1}"#;
        accepted = serde_json::from_slice(&curl(
            "/api/v1/triggers",
            &[
                "-H",
                "Content-Type: application/json",
                "--data-binary",
                body,
            ],
        ))
        .unwrap();
    });
    std::thread::sleep(Duration::from_millis(1000));
    let name = accepted["dump"].as_str().unwrap().to_owned();
    let at = accepted["at_ns"].as_i64().unwrap();
    let listed: serde_json::Value = serde_json::from_slice(&curl("/api/v1/dumps", &[])).unwrap();
    assert_eq!(listed["dumps"][0]["name"], name.as_str(), "{listed}");
    // A dump holds captured packets: only the recorder's user reads it, and
    // the archive directory lets no one else in.
    use std::os::unix::fs::PermissionsExt;
    let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode(&archive.join("dumps").join(&name)), 0o600, "{name}");
    assert_eq!(mode(&archive), 0o700);
    // Before 1970 no dump name can hold the time: refused, not written.
    let before_1970 = curl_status(
        "/api/v1/triggers",
        r#"{"filter": "udp", "at": "1969-12-31T23:59:50Z"}"#,
    );
    assert!(
        before_1970.starts_with("400 ") && before_1970.contains("1970"),
        "{before_1970}"
    );
    let downloaded = work.path().join("downloaded.pcap");
    curl(
        &format!("/api/v1/dumps/{name}"),
        &["-o", downloaded.to_str().unwrap()],
    );
    let metrics = String::from_utf8(curl("/metrics", &[])).unwrap();
    common::assert_prometheus_text(&metrics);
    assert!(
        metrics.contains("hindsight_capture_kernel_drops_total{interface=\"hs-a\"} 0"),
        "{metrics}"
    );
    assert!(
        metrics.contains("hindsight_dumps_written_total 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("hindsight_ring_drops_archive_chunks_total 0"),
        "{metrics}"
    );

    // 3. SIGTERM drains the ring and seals; the server exits 0.
    signal(&second, "TERM");
    let mut second = second;
    let status = second.wait().unwrap();
    let second_err = second_err.join().unwrap();
    assert!(status.success(), "serve failed: {second_err}");
    eprintln!("{second_err}");
    assert!(second_err.contains("archive sealed"), "{second_err}");
    tcpdump.stop();

    // Every segment sealed before the kill is still there, unchanged.
    let now = catalog(&archive);
    for segment in &sealed {
        assert!(
            now.contains(segment),
            "segment {} lost or changed",
            segment.0
        );
    }
    assert_intact(&archive, &now);
    // The second replay is archived exactly as tcpdump saw it.
    assert_archive_holds(&archive, &reference, &second_err);

    // The requested dump: tcpdump's selection for the filter and the window.
    let window = (at - 30_000_000_000)..=(at + 1_000_000_000);
    let oracle = tcpdump_select(&reference, "udp port 53", &window);
    assert!(oracle.len() > 10, "{} packets in the window", oracle.len());
    assert_eq!(read_capture(&downloaded), oracle);
    assert_eq!(read_capture(&archive.join("dumps").join(&name)), oracle);
}

/// Fresh to the second: while `serve` captures a replay (seal_secs = 60, a tail
/// of 1 MiB so that segments seal early many times meanwhile), the API and the
/// command line are asked every 500 ms for every packet up to 2 s before the
/// question; each answer is exactly tcpdump's recording of the same interface up
/// to that instant, in time order, whatever was sealed and what was still in
/// memory.
#[test]
fn serve_answers_from_the_unsealed_tail_within_two_seconds() {
    if !live_tests_enabled() {
        return;
    }
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let work = tempfile::tempdir().unwrap();
    let archive = work.path().join("archive");
    let config = work.path().join("hindsight.toml");
    std::fs::write(
        &config,
        format!(
            "archive = {:?}\n[capture]\ninterface = \"hs-a\"\nseal_secs = 60\ntail_mib = 1\n\
             [api]\nlisten = \"127.0.0.1:0\"\n",
            archive.to_str().unwrap()
        ),
    )
    .unwrap();
    let ns = Namespaces::new();
    run(privileged("ip").args(["-n", &ns.receiver, "link", "set", "lo", "up"]));
    let reference = work.path().join("tcpdump.pcap");
    let tcpdump = Tcpdump::start(&ns, &reference);
    let (mut serve, serve_err, address) = start_serve(&ns, &config);
    let ask = |until: i64, out: &Path| {
        let url = format!(
            "http://{address}/api/v1/query?format=pcap&until={}.{:09}",
            until / 1_000_000_000,
            until % 1_000_000_000
        );
        let output = ns
            .exec(&ns.receiver, "curl")
            .args(["-sS", "--fail-with-body", "-o"])
            .arg(out)
            .arg(&url)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "curl {url}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    };
    let mut tcpreplay = ns.start_replay(5000);
    // Questions every 500 ms during the replay (12.6 s) and a little after.
    let mut answers = Vec::new();
    let started = std::time::Instant::now();
    while started.elapsed() < Duration::from_secs(15) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap();
        let until = i64::try_from(now.as_nanos()).unwrap() - 2_000_000_000;
        let out = work.path().join(format!("answer-{}.pcap", answers.len()));
        ask(until, &out);
        answers.push((until, out));
        // The command line finds the serving process and asks it.
        let out = work
            .path()
            .join(format!("answer-{}-cli.pcap", answers.len()));
        let output = ns
            .exec(&ns.receiver, env!("CARGO_BIN_EXE_hindsight"))
            .args(["query", "", "--archive"])
            .arg(&archive)
            .args([
                "--until",
                &format!("{}.{:09}", until / 1_000_000_000, until % 1_000_000_000),
                "-o",
            ])
            .arg(&out)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{stderr}");
        assert!(
            stderr.contains("answered by the serving process"),
            "{stderr}"
        );
        answers.push((until, out));
        std::thread::sleep(Duration::from_millis(500));
    }
    // SQL and connections on the command line are the serving process's too:
    // every packet of the last answer is counted, and more.
    let cli = |args: &[&str]| {
        let output = ns
            .exec(&ns.receiver, env!("CARGO_BIN_EXE_hindsight"))
            .args(args)
            .args(["--archive", archive.to_str().unwrap()])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(output.status.success(), "{args:?}: {stderr}");
        assert!(
            stderr.contains("answered by the serving process"),
            "{args:?}: {stderr}"
        );
        String::from_utf8(output.stdout).unwrap()
    };
    let counted: usize = cli(&["sql", "SELECT count(*) AS n FROM packets", "-F", "csv"])
        .lines()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let last = read_capture(&answers.last().unwrap().1).len();
    assert!(
        counted >= last,
        "SQL counted {counted}, the last answer held {last}"
    );
    let connections = cli(&["flows", "--ip", "0.0.0.0/0", "-F", "jsonl", "-n", "100000"]);
    assert!(connections.lines().count() > 0, "no connections");
    assert!(tcpreplay.wait().unwrap().success());
    signal(&serve, "TERM");
    assert!(serve.wait().unwrap().success());
    let serve_err = serve_err.join().unwrap();
    tcpdump.stop();

    let seen = read_capture(&reference);
    assert!(seen.len() >= read_capture(&lan_hour()).len());
    let seals = catalog(&archive)
        .iter()
        .filter(|s| s.1.starts_with("packets/"))
        .count();
    assert!(
        seals >= 3,
        "{seals} packet segments: too few seals during the replay"
    );
    let mut partial = 0;
    for (until, answer) in &answers {
        let got = read_capture(answer);
        assert!(
            got.windows(2).all(|pair| pair[0].0 <= pair[1].0),
            "the answer up to {until} is not in time order"
        );
        let mut got = got;
        got.sort();
        let mut expected: Vec<PacketKey> = seen
            .iter()
            .filter(|(ts, _, _)| ts < until)
            .map(|(ts, len, data)| (*ts, *len, data[..data.len().min(128)].to_vec()))
            .collect();
        expected.sort();
        assert_eq!(
            got.len(),
            expected.len(),
            "the answer up to {until} has {} packets, tcpdump saw {}\n{serve_err}",
            got.len(),
            expected.len()
        );
        assert!(
            got == expected,
            "the answer up to {until} differs from tcpdump's"
        );
        partial += usize::from(!got.is_empty() && got.len() < seen.len());
    }
    // Questions came while packets flowed and segments sealed: answers that
    // held some of the replay and not all of it. A count, not a share of the
    // questions: on a loaded machine each question takes longer, and more
    // of them come before the first packet or after the last.
    assert!(
        partial >= 4,
        "{partial} of {} answers were asked while packets flowed",
        answers.len()
    );
    eprintln!(
        "{} answers, {partial} asked while packets flowed, all equal to tcpdump's; {seals} packet segments sealed",
        answers.len()
    );
}

/// A pcap of `ports` TCP SYNs from `src` to `dst`, one port each, as a
/// scanner sends them (checksums left zero: nothing answers them).
fn syn_scan(path: &Path, src: [u8; 4], dst: [u8; 4], ports: std::ops::Range<u16>) {
    let file = std::fs::File::create(path).unwrap();
    let mut writer = hindsight_capture::PcapWriter::new(
        std::io::BufWriter::new(file),
        hindsight_model::LinkType::ETHERNET,
        262_144,
        hindsight_capture::TimestampPrecision::Micros,
    )
    .unwrap();
    for (i, port) in ports.enumerate() {
        let mut frame = Vec::with_capacity(54);
        frame.extend([0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01, 0x08, 0x00]);
        frame.extend([0x45, 0, 0, 40, 0x12, 0x34, 0x40, 0, 64, 6, 0, 0]);
        frame.extend(src);
        frame.extend(dst);
        frame.extend(40_000u16.to_be_bytes());
        frame.extend(port.to_be_bytes());
        frame.extend(0x0100_0000u32.to_be_bytes());
        frame.extend([0, 0, 0, 0, 0x50, 0x02, 0x04, 0x00, 0, 0, 0, 0]);
        let ts = 1_700_000_000_000_000_000 + i as i64 * 1_000_000;
        writer.write_frame(ts, frame.len() as u32, &frame).unwrap();
    }
    writer.flush().unwrap();
}

/// A request to the API of a server in `ns`: its status and body.
fn api(ns: &Namespaces, address: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut command = ns.exec(&ns.receiver, "curl");
    command.args(["-sS", "-X", method, "-w", "\n%{http_code}"]);
    if !body.is_empty() {
        command.args([
            "-H",
            "content-type: application/json",
            "--data-binary",
            body,
        ]);
    }
    let output = command
        .arg(format!("http://{address}{path}"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let (body, status) = text.rsplit_once('\n').unwrap_or(("", &text));
    (status.trim().parse().unwrap_or(0), body.to_owned())
}

#[test]
fn a_portscan_watch_reports_a_scan_and_dumps_its_packets() {
    if !live_tests_enabled() {
        return;
    }
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let work = tempfile::tempdir().unwrap();
    let archive = work.path().join("archive");
    std::fs::create_dir_all(&archive).unwrap();
    std::fs::write(
        archive.join("config.toml"),
        "[network]\nhome = [\"10.64.0.0/16\"]\n",
    )
    .unwrap();
    let config = work.path().join("hindsight.toml");
    let alert_log = work.path().join("alerts.jsonl");
    let hooked = work.path().join("webhook.jsonl");
    let hook_port = 18_080;
    std::fs::write(
        &config,
        format!(
            "archive = {:?}\n[capture]\ninterface = \"hs-a\"\n\
             [[watch]]\nname = \"scans\"\nanalysis = \"portscan\"\nwindow = \"2s\"\n\
             params = {{ min_fanout = 100 }}\ndump = \"host $src\"\ndump_before = \"6s\"\n\
             alert_log = {:?}\nwebhook = \"http://127.0.0.1:{hook_port}/alerts\"\n\
             [api]\nlisten = \"127.0.0.1:0\"\n",
            archive.to_str().unwrap(),
            alert_log.to_str().unwrap(),
        ),
    )
    .unwrap();
    let scan = work.path().join("scan.pcap");
    syn_scan(&scan, [203, 0, 113, 7], [10, 64, 88, 105], 1..401);
    let ns = Namespaces::new();
    run(privileged("ip").args(["-n", &ns.receiver, "link", "set", "lo", "up"]));
    let reference = work.path().join("tcpdump.pcap");
    let tcpdump = Tcpdump::start(&ns, &reference);
    // The webhook's receiver, in the server's namespace: each POSTed body a line.
    let receiver_script = format!(
        "import http.server\n\
         class H(http.server.BaseHTTPRequestHandler):\n\
         \x20   def do_POST(self):\n\
         \x20       body = self.rfile.read(int(self.headers['content-length']))\n\
         \x20       open({:?}, 'ab').write(body + b'\\n')\n\
         \x20       self.send_response(204)\n\
         \x20       self.end_headers()\n\
         http.server.HTTPServer(('127.0.0.1', {hook_port}), H).serve_forever()\n",
        hooked.to_str().unwrap()
    );
    let mut hook = Reaped(
        ns.exec(&ns.receiver, "python3")
            .args(["-c", &receiver_script])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let (mut serve, serve_err, address) = start_serve(&ns, &config);

    // The API refuses what it cannot run, clearly, and goes on.
    for (body, status, expected) in [
        (r#"{"name":"bad","sql":"SELEC 1"}"#, 400, "SELEC"),
        (
            r#"{"name":"bad","analysis":"portscans"}"#,
            400,
            "no analysis is named",
        ),
        (
            r#"{"name":"bad","sql":"COPY (SELECT 1) TO '/tmp/x.csv'"}"#,
            403,
            "refused",
        ),
        (
            r#"{"name":"big","sql":"SELECT 1","max_window_rows":999999999}"#,
            400,
            "above this server's bound",
        ),
        (
            r#"{"name":"hook","sql":"SELECT 1","webhook":"http://x"}"#,
            403,
            "webhook and alert_log are refused",
        ),
        (r#"{"name":"scans","sql":"SELECT 1"}"#, 409, "already named"),
    ] {
        let (got, text) = api(&ns, &address, "POST", "/api/v1/watches", body);
        assert_eq!(got, status, "{body}: {text}");
        assert!(text.contains(expected), "{body}: {text}");
    }
    // A watch made through the API runs beside the configured one.
    let (got, text) = api(
        &ns,
        &address,
        "POST",
        "/api/v1/watches",
        r#"{"name":"syns","sql":"SELECT count(*) AS syns FROM live_packets WHERE tcp_flags = 2","window":"1s"}"#,
    );
    assert_eq!(got, 201, "{text}");

    // The rows of the portscan watch as they come, stamped when they arrive.
    let mut follow = Reaped(
        ns.exec(&ns.receiver, "curl")
            .args(["-sN"])
            .arg(format!(
                "http://{address}/api/v1/watches/scans/results?follow=true"
            ))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let stdout = follow.stdout.take().unwrap();
    let arrivals = std::thread::spawn(move || {
        let mut rows = Vec::new();
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(data) = line.strip_prefix("data:") {
                let at = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap();
                let row: serde_json::Value = serde_json::from_str(data.trim()).unwrap();
                rows.push((i64::try_from(at.as_nanos()).unwrap(), row));
            }
        }
        rows
    });

    // Background traffic (lan-hour) and, in the middle of it, the scan.
    let mut background = ns.start_replay(5000);
    std::thread::sleep(Duration::from_secs(3));
    let replay = ns
        .exec(&ns.sender, "tcpreplay")
        .args(["-i", "hs-b", "--pps", "2000"])
        .arg(&scan)
        .output()
        .unwrap();
    assert!(replay.status.success());
    assert!(background.wait().unwrap().success());
    std::thread::sleep(Duration::from_secs(3));

    let (_, listed) = api(&ns, &address, "GET", "/api/v1/watches", "");
    let (got, _) = api(&ns, &address, "DELETE", "/api/v1/watches/syns", "");
    assert_eq!(got, 204);
    let (_, metrics) = api(&ns, &address, "GET", "/metrics", "");
    let _ = privileged("kill").arg(follow.id().to_string()).status();
    let _ = follow.wait();
    let rows = arrivals.join().unwrap();
    signal(&serve, "TERM");
    assert!(serve.wait().unwrap().success());
    let serve_err = serve_err.join().unwrap();
    let _ = privileged("kill").arg(hook.id().to_string()).status();
    let _ = hook.wait();
    tcpdump.stop();

    // Each row of the watch went to the alert log and to the webhook.
    let logged = std::fs::read_to_string(&alert_log).unwrap_or_default();
    let posted = std::fs::read_to_string(&hooked).unwrap_or_default();
    let scanner_lines = |text: &str| {
        let mut lines: Vec<String> = text
            .lines()
            .filter(|l| l.contains("203.0.113.7"))
            .map(str::to_owned)
            .collect();
        lines.sort();
        lines
    };
    assert!(
        !scanner_lines(&logged).is_empty(),
        "alert log: {logged:?}\n{serve_err}"
    );
    assert_eq!(
        scanner_lines(&logged),
        scanner_lines(&posted),
        "{serve_err}"
    );

    // The scanner is reported while the traffic runs. How soon after its
    // window is printed, not asserted: the machine is shared (the watch's
    // delay is a figure for a benchmark, not a test).
    let scans: Vec<&(i64, serde_json::Value)> = rows
        .iter()
        .filter(|(_, row)| row["src"] == "203.0.113.7")
        .collect();
    assert!(!scans.is_empty(), "no scan reported: {rows:?}\n{serve_err}");
    let parse_time = |text: &serde_json::Value| -> i64 {
        let time: jiff::Timestamp = text.as_str().unwrap().parse().unwrap();
        i64::try_from(time.as_nanosecond()).unwrap()
    };
    for (arrived, row) in &scans {
        let end = parse_time(&row["window_end"]);
        let delay = arrived - end;
        eprintln!(
            "scan row {row} arrived {:.3} s after its window ended",
            delay as f64 / 1e9
        );
        assert!(row["fanout"].as_u64().unwrap() >= 100, "{row}");
    }
    // Its dump: what tcpdump -r selects from tcpdump's recording for the
    // scanner and the window before the alert.
    let (_, first) = scans[0];
    let at = parse_time(&first["window_end"]);
    // `dump-<window end>-<n>-<watch>-<value>.pcap`, the value's dots made `_`.
    let dumps_dir = archive.join("dumps");
    let dump = std::fs::read_dir(&dumps_dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .find(|path| {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            name.starts_with(&format!("dump-{at}-")) && name.ends_with("-scans-203_0_113_7.pcap")
        })
        .unwrap_or_else(|| panic!("no dump of {at} in {}: {serve_err}", dumps_dir.display()));
    let window = (at - 6_000_000_000)..=at;
    let oracle = tcpdump_select(&reference, "host 203.0.113.7", &window);
    let dumped = read_capture(&dump);
    assert!(oracle.len() >= 100, "{} packets", oracle.len());
    assert_eq!(dumped.len(), oracle.len());
    assert!(dumped == oracle, "dump and tcpdump's selection differ");
    // The API listed both watches and the metrics count their windows.
    assert!(
        listed.contains(r#""name":"scans""#) && listed.contains(r#""name":"syns""#),
        "{listed}"
    );
    assert!(
        metrics.contains(r#"hindsight_watch_windows_total{watch="scans"}"#),
        "{metrics}"
    );
}

/// A counter or gauge of a `/metrics` text (0 when it is not there).
fn metric(metrics: &str, name: &str) -> u64 {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or(0)
}

#[test]
fn an_endless_or_hungry_watch_is_removed_at_once_and_shutdown_does_not_wait_on_it() {
    if !live_tests_enabled() {
        return;
    }
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let work = tempfile::tempdir().unwrap();
    let archive = work.path().join("archive");
    let config = work.path().join("hindsight.toml");
    // A window's own deadline is ten minutes: what ends these windows sooner
    // is the DELETE and the stop, not the deadline.
    std::fs::write(
        &config,
        format!(
            "archive = {:?}\n[capture]\ninterface = \"hs-a\"\nseal_secs = 1\n\
             [watches]\nwindow_timeout_secs = 600\n\
             [[watch]]\nname = \"count\"\nwindow = \"1s\"\n\
             sql = \"SELECT count(*) AS n FROM live_packets\"\n\
             [api]\nlisten = \"127.0.0.1:0\"\nworker_memory_mib = 600\n",
            archive.to_str().unwrap()
        ),
    )
    .unwrap();
    let ns = Namespaces::new();
    run(privileged("ip").args(["-n", &ns.receiver, "link", "set", "lo", "up"]));
    let reference = work.path().join("tcpdump.pcap");
    let tcpdump = Tcpdump::start(&ns, &reference);
    let (mut serve, serve_err, address) = start_serve(&ns, &config);
    let mut replay = ns.start_replay(5000);
    // A statement that computes for hours over each window's packets.
    let endless = |name: &str| {
        serde_json::json!({
            "name": name,
            "window": "1s",
            "sql": "SELECT count(*) AS n FROM live_packets, generate_series(1, 100000000000) \
                    AS s(v) WHERE wire_len + v = 7",
        })
        .to_string()
    };
    std::thread::sleep(Duration::from_secs(2));
    // A window whose statement makes 1.2 GB in one projection, past its
    // worker's 600 MiB: the kernel refuses it in the worker, the window's
    // answer says so, and the recorder goes on.
    let hungry = serde_json::json!({
        "name": "hungry",
        "window": "1s",
        "sql": common::wide_projection("FROM live_packets LIMIT 1"),
    })
    .to_string();
    let (got, text) = api(&ns, &address, "POST", "/api/v1/watches", &hungry);
    assert_eq!(got, 201, "{text}");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let (_, watch) = api(&ns, &address, "GET", "/api/v1/watches/hungry", "");
        if watch.contains("worker_memory_mib = 600") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{watch}");
        std::thread::sleep(Duration::from_millis(500));
    }
    let (_, metrics) = api(&ns, &address, "GET", "/metrics", "");
    assert!(metric(&metrics, "hindsight_statement_workers_died_total") >= 1);
    let peak = metric(&metrics, "hindsight_resident_peak_bytes");
    assert!(peak < 1 << 30, "the recorder's resident peak {peak}");
    let (got, text) = api(&ns, &address, "DELETE", "/api/v1/watches/hungry", "");
    assert_eq!(got, 204, "{text}");
    let (got, text) = api(
        &ns,
        &address,
        "POST",
        "/api/v1/watches",
        &endless("endless"),
    );
    assert_eq!(got, 201, "{text}");
    // Let its first window start and run.
    std::thread::sleep(Duration::from_secs(3));
    let (_, metrics) = api(&ns, &address, "GET", "/metrics", "");
    let counted_before = metric(&metrics, r#"hindsight_watch_windows_total{watch="count"}"#);
    let removing = std::time::Instant::now();
    let (got, text) = api(&ns, &address, "DELETE", "/api/v1/watches/endless", "");
    let removed_in = removing.elapsed();
    assert_eq!(got, 204, "{text}");
    let (_, listed) = api(&ns, &address, "GET", "/api/v1/watches", "");
    assert!(!listed.contains(r#""name":"endless""#), "{listed}");
    // A second one is running when the server is told to stop.
    let (got, text) = api(
        &ns,
        &address,
        "POST",
        "/api/v1/watches",
        &endless("at_exit"),
    );
    assert_eq!(got, 201, "{text}");
    assert!(replay.wait().unwrap().success());
    std::thread::sleep(Duration::from_secs(3));
    let (_, metrics) = api(&ns, &address, "GET", "/metrics", "");
    let counted_after = metric(&metrics, r#"hindsight_watch_windows_total{watch="count"}"#);
    let stopping = std::time::Instant::now();
    signal(&serve, "TERM");
    let status = serve.wait().unwrap();
    let stopped_in = stopping.elapsed();
    let serve_err = serve_err.join().unwrap();
    tcpdump.stop();
    eprintln!(
        "endless watch removed in {:.3} s; stop with an endless window running took {:.2} s",
        removed_in.as_secs_f64(),
        stopped_in.as_secs_f64()
    );
    assert!(status.success(), "{serve_err}");
    // Stopping cancelled the running window after its grace: it did not wait
    // for the window's ten-minute deadline, let alone its end.
    assert!(
        stopped_in < Duration::from_secs(600),
        "the stop waited {stopped_in:?}: {serve_err}"
    );
    // The other watch answered its windows beside the endless ones.
    assert!(
        counted_after > counted_before && counted_before > 0,
        "count's windows: {counted_before} then {counted_after}\n{serve_err}"
    );
    // And the capture kept every packet tcpdump saw.
    assert_archive_holds(&archive, &reference, &serve_err);
}

unsafe extern "C" {
    #[link_name = "geteuid"]
    fn libc_geteuid() -> u32;
}

/// A tmpfs of `mib` MiB mounted on a directory of its own; unmounted when dropped.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    fn new(mib: u32) -> Self {
        let dir = tempfile::tempdir().unwrap();
        run(privileged("mount").args([
            "-t",
            "tmpfs",
            "-o",
            &format!("size={mib}m"),
            "hindsight-test",
            dir.path().to_str().unwrap(),
        ]));
        Self { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Remounts it `mib` MiB large (an operator freeing space).
    fn grow(&self, mib: u32) {
        run(privileged("mount").args([
            "-o",
            &format!("remount,size={mib}m"),
            self.dir.path().to_str().unwrap(),
        ]));
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = privileged("umount").arg(self.dir.path()).status();
    }
}

fn ingest_into(archive: &Path, capture: &Path) -> std::process::Output {
    hindsight(&[
        "ingest",
        "-q",
        "--segment-packets",
        "8192",
        capture.to_str().unwrap(),
        "--archive",
        archive.to_str().unwrap(),
    ])
}

/// `hindsight stats` as JSON.
fn stats_json(archive: &Path) -> serde_json::Value {
    serde_json::from_str(&ok(&hindsight(&[
        "stats",
        "--json",
        "--archive",
        archive.to_str().unwrap(),
    ])))
    .unwrap()
}

/// Packets `hindsight query` finds between two instants.
fn packets_between(archive: &Path, start: &str, end: &str) -> usize {
    let out = archive.parent().unwrap().join("between.pcap");
    ok(&hindsight(&[
        "query",
        "",
        "--between",
        start,
        end,
        "-o",
        out.to_str().unwrap(),
        "--archive",
        archive.to_str().unwrap(),
    ]));
    read_capture(&out).len()
}

/// A new archive with `config` on a 24 MiB tmpfs, filled with `captures` by
/// `ingest` until a run fails: the disk, the archive, its catalog before the
/// failed run, and the failed run's message, which must name the filesystem
/// and contain `needles`.
fn fill_until_stopped(
    captures: &[std::path::PathBuf],
    config: &str,
    needles: &[&str],
) -> (SmallDisk, std::path::PathBuf, Vec<Sealed>) {
    let disk = SmallDisk::new(24);
    let archive = disk.path().join("archive");
    std::fs::create_dir_all(&archive).unwrap();
    std::fs::write(archive.join("config.toml"), config).unwrap();
    let mut before = Vec::new();
    for capture in captures {
        let output = ingest_into(&archive, capture);
        if !output.status.success() {
            let message = String::from_utf8_lossy(&output.stderr);
            let mount = disk.path().canonicalize().unwrap();
            let named = format!("filesystem at {}", mount.display());
            for needle in needles.iter().copied().chain([named.as_str()]) {
                assert!(message.contains(needle), "{needle:?} not in {message}");
            }
            return (disk, archive, before);
        }
        before = catalog(&archive);
    }
    panic!(
        "24 MiB hold fewer than {} copies of lan-hour",
        captures.len()
    );
}

/// Every segment of `before` is still catalogued and whole, after it what the
/// failed run sealed; returns the packets of the sealed segments.
fn assert_sealed_kept(archive: &Path, before: &[Sealed]) -> u64 {
    let after = catalog(archive);
    assert!(after.len() >= before.len());
    assert_eq!(after[..before.len()], before[..]);
    assert_intact(archive, &after);
    after
        .iter()
        .filter(|s| s.1.starts_with("packets/"))
        .map(|s| s.2)
        .sum()
}

#[test]
fn a_full_disk_stops_ingest_cleanly_or_expires_the_oldest_keeping_every_sealed_segment() {
    if !live_tests_enabled() {
        return;
    }
    require_tool("editcap");
    let work = tempfile::tempdir().unwrap();
    let captures: Vec<_> = (0..8).map(|h| lan_hour_shifted(work.path(), h)).collect();

    // An archive that keeps everything stops at its floor, with a message
    // that names the filesystem and its free bytes; every segment sealed
    // before survives whole, with what the failed run sealed, and the archive
    // opens, checks clean and answers.
    let (disk, archive, before) = fill_until_stopped(
        &captures,
        "[packets]\nmin_free_bytes = 8388608\n",
        &[
            "bytes free",
            "min_free_bytes (8388608)",
            "sets no [packets] max_bytes",
            "every sealed segment is kept",
        ],
    );
    let sealed_rows = assert_sealed_kept(&archive, &before);
    ok(&hindsight(&[
        "check",
        "--archive",
        archive.to_str().unwrap(),
    ]));
    assert_eq!(count_packets(&archive), sealed_rows);
    assert_eq!(stats_json(&archive)["packets"], sealed_rows);
    drop(disk);

    // An archive with a retention bound expires its oldest segments instead,
    // and keeps the newest hour whole.
    let disk = SmallDisk::new(24);
    let archive = disk.path().join("archive");
    std::fs::create_dir_all(&archive).unwrap();
    std::fs::write(
        archive.join("config.toml"),
        "[packets]\nmax_bytes = 1073741824\nmin_free_bytes = 8388608\n",
    )
    .unwrap();
    for capture in &captures {
        ok(&ingest_into(&archive, capture));
    }
    // lan-hour spans 17:00:39 to 18:00:38.42; copy h is h hours later.
    let oldest = packets_between(&archive, "2012-11-23T17:00:00Z", "2012-11-23T18:00:38.5Z");
    assert!(oldest < 62_781, "the oldest hour was not expired");
    let newest = packets_between(&archive, "2012-11-24T00:00:38.5Z", "2012-11-24T02:00:00Z");
    assert_eq!(newest, 62_781);
    ok(&hindsight(&[
        "check",
        "--archive",
        archive.to_str().unwrap(),
    ]));
    let free = df_available(disk.path());
    assert!(free > 4 << 20, "{free} bytes free");
    drop(disk);

    // Without a floor the disk fills (ENOSPC, here in the address index's
    // log): the write stops with the device's error named, and nothing sealed
    // is lost.
    let (disk, archive, before) = fill_until_stopped(
        &captures,
        "[packets]\nmin_free_bytes = 0\n",
        &["No space left on device", "every sealed segment is kept"],
    );
    let sealed_rows = assert_sealed_kept(&archive, &before);
    // The full disk answers (a segment whose postings the full log refused is
    // read whole)...
    assert_eq!(count_packets(&archive), sealed_rows);
    // ...and once there is room again, `check --repair` indexes what the
    // disk refused and the archive checks clean.
    disk.grow(48);
    ok(&hindsight(&[
        "check",
        "--repair",
        "--archive",
        archive.to_str().unwrap(),
    ]));
    ok(&hindsight(&[
        "check",
        "--archive",
        archive.to_str().unwrap(),
    ]));
    assert_eq!(count_packets(&archive), sealed_rows);
}

/// Free bytes of the filesystem at `path`, as df counts them (not as hindsight does).
fn df_available(path: &Path) -> u64 {
    let out = Command::new("df")
        .args(["--output=avail", "-B1"])
        .arg(path)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .nth(1)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn a_full_disk_stops_record_cleanly_with_every_sealed_segment_kept() {
    if !live_tests_enabled() {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let ns = Namespaces::new();
    let disk = SmallDisk::new(40);
    let archive = disk.path().join("archive");
    std::fs::create_dir_all(&archive).unwrap();
    std::fs::write(
        archive.join("config.toml"),
        "[packets]\nmin_free_bytes = 16777216\n",
    )
    .unwrap();
    let mut recorder = Reaped(
        ns.exec(&ns.receiver, env!("CARGO_BIN_EXE_hindsight"))
            .args(["record", "-i", "hs-a", "--seal-secs", "1", "--archive"])
            .arg(&archive)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let recorder_err = wait_for_stderr(&mut recorder, "recording on");
    // A new archive takes about 8 MiB (the indexes' logs); then about 3 MB a
    // loop, until the 16 MiB above the floor are gone. Replays go on until the
    // recorder stops (bounded): on a busy machine capture may drop packets,
    // and the floor is then reached later, not never.
    for _ in 0..12 {
        let replay = ns
            .exec(&ns.sender, "tcpreplay")
            .args(["-i", "hs-b", "--pps", "100000", "--loop", "5"])
            .arg(lan_hour())
            .output()
            .unwrap();
        assert!(replay.status.success());
        if recorder.try_wait().unwrap().is_some() {
            break;
        }
    }
    // The recorder stops by itself: the disk, not a signal, ended it.
    let mut status = None;
    for _ in 0..2400 {
        if let Some(exit) = recorder.try_wait().unwrap() {
            status = Some(exit);
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let status = status.expect("record went on past its floor");
    let log = recorder_err.join().unwrap();
    assert!(!status.success(), "{log}");
    let mount = disk.path().canonicalize().unwrap();
    for needle in [
        format!("filesystem at {}", mount.display()).as_str(),
        "bytes free",
        "min_free_bytes (16777216)",
        "every sealed segment is kept",
    ] {
        assert!(log.contains(needle), "{needle:?} not in {log}");
    }
    let sealed_rows = assert_sealed_kept(&archive, &[]);
    assert!(sealed_rows > 0, "{log}");
    ok(&hindsight(&[
        "check",
        "--archive",
        archive.to_str().unwrap(),
    ]));
    assert_eq!(count_packets(&archive), sealed_rows);
}

/// SIGHUP while `serve` captures a replay: its file now names another watch
/// and a lower `[api] max_rows`, and the archive's config.toml a bound on
/// the packets' bytes; all three are taken without stopping the capture
/// (tcpdump's recording of the replay is archived whole), and a file that
/// does not parse is refused with the configuration in use kept.
#[test]
fn sighup_takes_a_watch_an_api_limit_and_a_retention_bound_while_capturing() {
    if !live_tests_enabled() {
        return;
    }
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let work = tempfile::tempdir().unwrap();
    let archive = work.path().join("archive");
    let config = work.path().join("hindsight.toml");
    let write_config = |watch: &str, sql: &str, max_rows: u64| {
        std::fs::write(
            &config,
            format!(
                "archive = {:?}\n[capture]\ninterface = \"hs-a\"\nseal_secs = 1\n\
                 [api]\nlisten = \"127.0.0.1:0\"\nmax_rows = {max_rows}\n\
                 [[watch]]\nname = \"{watch}\"\nsql = \"{sql}\"\nwindow = \"1s\"\n",
                archive.to_str().unwrap()
            ),
        )
        .unwrap();
    };
    write_config(
        "syns",
        "SELECT count(*) AS syns FROM live_packets WHERE tcp_flags = 2",
        1_000_000,
    );
    let ns = Namespaces::new();
    run(privileged("ip").args(["-n", &ns.receiver, "link", "set", "lo", "up"]));
    let (serve, serve_err, address) = start_serve(&ns, &config);
    let replay = |then: &mut dyn FnMut()| {
        ns.replay(then);
        // Two seals: what was replayed is in sealed segments.
        std::thread::sleep(Duration::from_millis(2500));
    };
    let get = |path: &str| api(&ns, &address, "GET", path, "");
    let health =
        || -> serde_json::Value { serde_json::from_str(&get("/api/v1/health").1).unwrap() };
    // Whether every UDP packet comes whole: a status past 400, or a transfer
    // broken once the answer has streamed past max_rows, is not.
    let all_udp = || {
        ns.exec(&ns.receiver, "curl")
            .args(["-sS", "--fail-with-body", "-o", "/dev/null"])
            .arg(format!(
                "http://{address}/api/v1/query?filter=udp&format=jsonl"
            ))
            .stderr(Stdio::null())
            .status()
            .unwrap()
            .success()
    };
    let watches = || -> Vec<String> {
        let listed: serde_json::Value = serde_json::from_str(&get("/api/v1/watches").1).unwrap();
        listed["watches"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w["name"].as_str().unwrap().to_owned())
            .collect()
    };

    replay(&mut || {});
    let first = stats_json(&archive);
    let first_bytes = first["bytes_on_disk"].as_u64().unwrap();
    assert!(first["packets"].as_u64().unwrap() >= 62_781, "{first}");
    assert_eq!(watches(), ["syns"]);
    assert_eq!(health()["limits"]["max_rows"], 1_000_000);
    assert!(all_udp());

    // The second replay: half a replay more than the first's bytes may stay,
    // so the first's oldest segments go and none of the second's.
    let bound = first_bytes * 3 / 2;
    std::fs::write(
        archive.join("config.toml"),
        format!("[packets]\nmax_bytes = {bound}\n"),
    )
    .unwrap();
    write_config(
        "udps",
        "SELECT count(*) AS udps FROM live_packets WHERE ip_proto = 17",
        10,
    );
    let reference = work.path().join("tcpdump.pcap");
    let tcpdump = Tcpdump::start(&ns, &reference);
    replay(&mut || {
        std::thread::sleep(Duration::from_millis(1000));
        signal(&serve, "HUP");
    });
    assert_eq!(watches(), ["udps"]);
    assert_eq!(health()["limits"]["max_rows"], 10);
    assert!(!all_udp());
    let second = stats_json(&archive);
    let second_bytes = second["bytes_on_disk"].as_u64().unwrap();
    assert!(
        second_bytes <= bound && second["packets"].as_u64().unwrap() < 2 * 62_781,
        "{bound}: {second}"
    );

    // A file that does not parse changes nothing.
    std::fs::write(&config, "[api\nmax_rows = \n").unwrap();
    signal(&serve, "HUP");
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(health()["limits"]["max_rows"], 10);
    assert_eq!(watches(), ["udps"]);
    // Nor does an analysis on an archive without a home network, refused as
    // at start and through the API.
    std::fs::write(
        &config,
        format!(
            "archive = {:?}\n[capture]\ninterface = \"hs-a\"\nseal_secs = 1\n\
             [api]\nlisten = \"127.0.0.1:0\"\nmax_rows = 20\n\
             [[watch]]\nname = \"scans\"\nanalysis = \"portscan\"\n",
            archive.to_str().unwrap()
        ),
    )
    .unwrap();
    signal(&serve, "HUP");
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(health()["limits"]["max_rows"], 10);
    assert_eq!(watches(), ["udps"]);

    signal(&serve, "TERM");
    let mut serve = serve;
    assert!(serve.wait().unwrap().success());
    let log = serve_err.join().unwrap();
    tcpdump.stop();
    for said in [
        "SIGHUP: [api] max_rows 10",
        "SIGHUP: [[watch]] syns: stopped",
        "SIGHUP: [[watch]] udps: started",
        "SIGHUP: the retention of config.toml: taken",
        "SIGHUP: refused, the configuration in use is kept",
        "watch \"scans\" runs an analysis, which needs the home network",
    ] {
        assert!(log.contains(said), "{said}: {log}");
    }
    eprintln!("{log}");
    // Nothing of the replay during the reload was lost.
    assert_archive_holds(&archive, &reference, &log);
}
