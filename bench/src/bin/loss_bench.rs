//! Capture loss at increasing rates (FlowScope's figure 4, Hyperion's figure
//! 16): a real capture replayed by tcpreplay into a veth pair between two
//! network namespaces this benchmark creates, captured on the other end by
//! `hindsight record` (archiving, indexing, building connections, with a
//! trigger on), by `tcpdump -w` and by Stenographer (Debian's package: its
//! `stenotype` writing and indexing blocks, counted by what `stenocurl`
//! answers for all time once its files are indexed), one after the other on
//! the same replay. With `--queries`, a query process runs against
//! hindsight's archive over and over while it records. Prints, per rate and
//! tool, packets sent, captured (what the tool kept) and lost, and each
//! tool's highest rate without loss.
//!
//! Needs root (namespaces, AF_PACKET). Test traffic stays in the namespaces.
//!
//! `cargo build --release -p hindsight -p hindsight-bench --bin loss_bench`
//! `target/release/loss_bench [--capture PCAP] [--seconds 5] [--rates 25000,50000,...] [--no-stenographer] [--queries]`

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hindsight_bench::{Flags, default_source, hindsight_binary};

const RX: &str = "hs-loss-rx";
const TX: &str = "hs-loss-tx";

/// Two namespaces joined by a veth pair (`la` receives, `lb` sends), offloads
/// off so that the capture sees the frames as sent; removed when dropped.
struct Link;

impl Link {
    fn new() -> Self {
        Self::remove();
        for ns in [RX, TX] {
            must(Command::new("ip").args(["netns", "add", ns]));
        }
        must(Command::new("ip").args([
            "link", "add", "la", "netns", RX, "type", "veth", "peer", "name", "lb", "netns", TX,
        ]));
        // Stenographer's server listens on the receiving side's loopback.
        must(Command::new("ip").args(["-n", RX, "link", "set", "lo", "up"]));
        for (ns, dev) in [(RX, "la"), (TX, "lb")] {
            must(
                Command::new("ip")
                    .args(["netns", "exec", ns, "sysctl", "-q"])
                    .arg(format!("net.ipv6.conf.{dev}.disable_ipv6=1")),
            );
            must(Command::new("ip").args(["-n", ns, "link", "set", dev, "up", "mtu", "9000"]));
            let _ = Command::new("ip")
                .args(["netns", "exec", ns, "ethtool", "-K", dev])
                .args([
                    "tx", "off", "rx", "off", "tso", "off", "gso", "off", "gro", "off",
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        Self
    }

    fn remove() {
        for ns in [RX, TX] {
            let _ = Command::new("ip")
                .args(["netns", "del", ns])
                .stderr(Stdio::null())
                .status();
        }
    }

    fn exec(ns: &str, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut command = Command::new("ip");
        command.args(["netns", "exec", ns]).arg(program);
        command
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        Self::remove();
    }
}

fn must(command: &mut Command) {
    let output = command.output().expect("run a setup command");
    assert!(
        output.status.success(),
        "{command:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A capturing tool under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tool {
    Hindsight,
    /// `hindsight record` while a query process runs against its archive
    /// over and over.
    HindsightQueried,
    Tcpdump,
    Stenographer,
}

/// Stenographer's directory: owned by its user, outside the work directory
/// (which only root may enter).
const STENO_DIR: &str = "/var/tmp/hs-loss-steno";

impl Tool {
    fn name(self) -> &'static str {
        match self {
            Self::Hindsight => "hindsight record",
            Self::HindsightQueried => "hindsight + queries",
            Self::Tcpdump => "tcpdump -w",
            Self::Stenographer => "stenographer",
        }
    }

    /// Starts capturing on `la` into `work`; returns once it captures.
    fn start(self, work: &Path) -> Running {
        if self == Self::Stenographer {
            return start_stenographer();
        }
        let mut command = match self {
            Self::HindsightQueried | Self::Stenographer => return Self::Hindsight.start(work),
            Self::Hindsight => {
                let mut command = Link::exec(RX, hindsight_binary());
                command
                    .args(["record", "-i", "la", "--archive"])
                    .arg(work.join("archive"))
                    .args(["--seal-secs", "5"])
                    .args(["--trigger", "tcp.flags.syn == 1 && tcp.dstport == 23"])
                    .args(["--dump", "host $src"]);
                command
            }
            Self::Tcpdump => {
                let mut command = Link::exec(RX, "tcpdump");
                command
                    .args(["-i", "la", "-n", "-w"])
                    .arg(work.join("tcpdump.pcap"));
                command
            }
        };
        let mut child = command
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the capture");
        // Both say when they listen: record "recording on", tcpdump "listening on".
        let mut stderr = child.stderr.take().expect("stderr");
        let (said, heard) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut text = Vec::new();
            let mut byte = [0u8];
            let mut sent = false;
            while let Ok(1) = stderr.read(&mut byte) {
                text.push(byte[0]);
                if !sent && (text.ends_with(b"recording on") || text.ends_with(b"listening on")) {
                    let _ = said.send(None);
                    sent = true;
                }
            }
            let _ = said.send(Some(String::from_utf8_lossy(&text).into_owned()));
        });
        match heard.recv_timeout(Duration::from_secs(60)) {
            Ok(None) => {}
            other => panic!("{} did not start: {other:?}", self.name()),
        }
        Running {
            child,
            log: heard,
            queries: None,
        }
    }

    /// Stops the capture (SIGINT, as a user would) and returns the packets it kept.
    fn stop(self, running: Running, work: &Path) -> u64 {
        if self == Self::Stenographer {
            return stop_stenographer(running);
        }
        let Running {
            mut child,
            log,
            queries,
        } = running;
        if let Some((stop, thread)) = queries {
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            let answered = thread.join().unwrap_or(0);
            eprintln!("loss_bench: {answered} queries answered during the capture");
        }
        // SAFETY: kill with a pid we spawned.
        unsafe { kill(child.id() as i32, 2) };
        let status = child.wait().expect("wait for the capture");
        // The rest of its standard error arrives with the exit.
        let log = log
            .recv_timeout(Duration::from_secs(30))
            .ok()
            .flatten()
            .unwrap_or_default();
        assert!(status.success(), "{} failed: {log}", self.name());
        match self {
            Self::Hindsight | Self::HindsightQueried | Self::Stenographer => {
                // "captured N packets (...); archived A (...)"
                let archived = log
                    .split("archived ")
                    .nth(1)
                    .and_then(|rest| rest.split_whitespace().next())
                    .and_then(|n| n.parse().ok())
                    .unwrap_or_else(|| panic!("no archived count in: {log}"));
                std::fs::remove_dir_all(work.join("archive")).ok();
                archived
            }
            Self::Tcpdump => {
                let path = work.join("tcpdump.pcap");
                let frames = hindsight_bench::read_frames(&path).len() as u64;
                std::fs::remove_file(path).ok();
                frames
            }
        }
    }
}

/// A capture running: the process and its standard error (`None` once it
/// listens, then the whole text when it exits).
struct Running {
    child: Child,
    log: std::sync::mpsc::Receiver<Option<String>>,
    /// A thread asking the archive over and over, and its stop flag; it
    /// returns how many queries it ran.
    queries: Option<(
        std::sync::Arc<std::sync::atomic::AtomicBool>,
        std::thread::JoinHandle<u64>,
    )>,
}

/// Queries the archive being recorded, one `hindsight query` process after
/// another (a rare address, a port, the last minute), until told to stop.
fn query_loop(
    archive: PathBuf,
) -> (
    std::sync::Arc<std::sync::atomic::AtomicBool>,
    std::thread::JoinHandle<u64>,
) {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = std::sync::Arc::clone(&stop);
    let thread = std::thread::spawn(move || {
        let filters = ["host 172.30.100.1", "udp port 53", "tcp.flags.syn == 1"];
        let mut answered = 0;
        while !flag.load(std::sync::atomic::Ordering::Relaxed) {
            for filter in filters {
                let status = Command::new(hindsight_binary())
                    .args(["query", "--count", "--archive"])
                    .arg(&archive)
                    .arg(filter)
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status();
                if status.is_ok_and(|s| s.success()) {
                    answered += 1;
                }
            }
        }
        answered
    });
    (stop, thread)
}

/// Starts Stenographer on `la`: its configuration and directories under
/// [`STENO_DIR`], blocks rotated every 10 s so that a replay is on disk and
/// indexed soon after; returns once stenotype reads packets.
fn start_stenographer() -> Running {
    let dir = Path::new(STENO_DIR);
    let _ = std::fs::remove_dir_all(dir);
    for sub in ["packets", "index"] {
        std::fs::create_dir_all(dir.join(sub)).expect("create Stenographer's directories");
    }
    let config = dir.join("config");
    std::fs::write(
        &config,
        format!(
            r#"{{
  "Threads": [{{ "PacketsDirectory": "{STENO_DIR}/packets", "IndexDirectory": "{STENO_DIR}/index",
    "MaxDirectoryFiles": 30000, "DiskFreePercentage": 1 }}],
  "StenotypePath": "/usr/sbin/stenotype",
  "Interface": "la",
  "Port": 1234,
  "Host": "127.0.0.1",
  "Flags": ["--no_watchdogs", "--blocks=2048", "--fileage_sec=10", "--blockage_sec=1", "-v"],
  "CertPath": "/etc/stenographer/certs"
}}"#
        ),
    )
    .expect("write Stenographer's configuration");
    must(Command::new("chown").args(["-R", "stenographer:stenographer", STENO_DIR]));
    let log = std::fs::File::create(dir.join("stenographer.log")).expect("log file");
    let child = Link::exec(RX, "runuser")
        .args([
            "-u",
            "stenographer",
            "--",
            "stenographer",
            "-syslog=false",
            "-config",
        ])
        .arg(&config)
        .stdout(log.try_clone().expect("log file"))
        .stderr(log)
        .spawn()
        .expect("start stenographer (bench/stenographer.sh installs it)");
    let started = Instant::now();
    // stenotype allocates its ring before it reads packets; replaying earlier loses them.
    while !std::fs::read_to_string(dir.join("stenographer.log"))
        .unwrap_or_default()
        .contains("starting to process packets")
    {
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "stenotype did not start: see {STENO_DIR}/stenographer.log"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Its first packets are not kept until it has written a first block
    // (seen on this machine: a replay at once was lost whole); it is given
    // the time bench/stenographer.sh gives it.
    std::thread::sleep(Duration::from_secs(5));
    let (_, log) = std::sync::mpsc::channel();
    Running {
        child,
        log,
        queries: None,
    }
}

/// The packets Stenographer answers for all time, once its files are rotated
/// and indexed (two counts in a row agree); then stops it.
fn stop_stenographer(running: Running) -> u64 {
    let dir = Path::new(STENO_DIR);
    let count = || -> u64 {
        let output = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "STENOGRAPHER_CONFIG={STENO_DIR}/config ip netns exec {RX} stenocurl /query                  -d 'after 1970-01-01T00:00:00Z' --silent --show-error 2>>{STENO_DIR}/stenocurl.err | tcpdump -r - -nn 2>/dev/null | wc -l"
            ))
            .output()
            .expect("run stenocurl");
        String::from_utf8_lossy(&output.stdout)
            .trim()
            .parse()
            .unwrap_or(0)
    };
    // Its server finds rotated, indexed files on its own schedule: counted
    // until two counts in a row agree on something.
    std::thread::sleep(Duration::from_secs(12));
    let mut last = u64::MAX;
    for _ in 0..40 {
        let names = |sub: &str| -> Vec<String> {
            std::fs::read_dir(dir.join(sub)).map_or(Vec::new(), |d| {
                d.filter_map(Result::ok)
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
        };
        // Every rotated file (the one being written is hidden) indexed.
        let visible = |sub: &str| names(sub).iter().filter(|n| !n.starts_with('.')).count();
        let (packets, index) = (visible("packets"), visible("index"));
        if packets > 0 && index >= packets {
            let now = count();
            if now > 0 && now == last {
                break;
            }
            last = now;
        }
        std::thread::sleep(Duration::from_secs(3));
    }
    let Running { mut child, .. } = running;
    // SAFETY: kill with a pid we spawned.
    unsafe { kill(child.id() as i32, 15) };
    let _ = child.wait();
    // stenotype outlives its server's SIGTERM (and holds a 2 GB ring): by name.
    let _ = Command::new("pkill")
        .args(["-KILL", "-u", "stenographer", "-x", "stenotype"])
        .status();
    std::thread::sleep(Duration::from_secs(1));
    if last == u64::MAX || last == 0 {
        let log = std::fs::read_to_string(dir.join("stenographer.log")).unwrap_or_default();
        let lines: Vec<&str> = log
            .lines()
            .filter(|l| !l.contains("aio.cc") && !l.contains("index.cc"))
            .take(20)
            .collect();
        eprintln!(
            "loss_bench: stenographer answered nothing; its log:\n{}\nstenocurl: {}",
            lines.join("\n"),
            std::fs::read_to_string(dir.join("stenocurl.err")).unwrap_or_default()
        );
    }
    let _ = std::fs::remove_dir_all(dir);
    if last == u64::MAX { 0 } else { last }
}

unsafe extern "C" {
    fn kill(pid: i32, signal: i32) -> i32;
}

/// Replays `capture` `loops` times at `pps` (0: as fast as tcpreplay can);
/// returns the packets tcpreplay sent and the rate it reached.
fn replay(capture: &Path, pps: u64, loops: u64) -> (u64, f64) {
    let mut command = Link::exec(TX, "tcpreplay");
    command.args(["-i", "lb", "--loop"]).arg(loops.to_string());
    if pps == 0 {
        command.arg("--topspeed");
    } else {
        command.arg("--pps").arg(pps.to_string());
    }
    let output = command.arg(capture).output().expect("run tcpreplay");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "tcpreplay: {text}");
    // "Successful packets:        N" and "Rated: B Bps, M Mbps, P pps"
    let sent = text
        .lines()
        .find_map(|line| line.trim().strip_prefix("Successful packets:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no packet count in tcpreplay's output: {text}"));
    let rate = text
        .lines()
        .find(|line| line.trim().starts_with("Rated:"))
        .and_then(|line| line.split(',').nth(2))
        .and_then(|pps| pps.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0.0);
    (sent, rate)
}

fn main() {
    let mut flags = Flags::new(
        "loss_bench",
        "[--capture PCAP] [--seconds S] [--rates PPS,PPS,...,0 (0: top speed)] [--no-stenographer] [--queries]",
    );
    let mut capture: PathBuf = default_source();
    let mut seconds = 5.0f64;
    let mut rates: Vec<u64> = vec![25_000, 50_000, 100_000, 200_000, 400_000, 0];
    let mut stenographer = true;
    let mut queries = false;
    while let Some(flag) = flags.next_flag() {
        match flag.as_str() {
            "--no-stenographer" => stenographer = false,
            "--queries" => queries = true,
            "--capture" => capture = flags.value::<PathBuf>("--capture"),
            "--seconds" => seconds = flags.value("--seconds"),
            "--rates" => {
                let text: String = flags.value("--rates");
                rates = text
                    .split(',')
                    .map(|r| r.trim().parse().expect("a rate in packets per second"))
                    .collect();
            }
            other => flags.unknown(other),
        }
    }
    let packets = hindsight_bench::read_frames(&capture).len() as u64;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "capture loss: {} ({packets} packets) replayed by tcpreplay into a veth pair, about {seconds} s a cell, {cores} cores",
        capture.display()
    );
    println!(
        "hindsight record archives, indexes, builds connections and runs a trigger; tcpdump -w writes a pcap"
    );
    println!();
    println!(
        "{:>12} {:>12} {:<18} {:>12} {:>12} {:>9}",
        "asked pps", "sent pps", "tool", "sent", "kept", "lost %"
    );
    let _link = Link::new();
    let work = tempfile::tempdir_in("/var/tmp").expect("a work directory");
    let mut tools = vec![Tool::Hindsight];
    if queries {
        tools.push(Tool::HindsightQueried);
    }
    tools.push(Tool::Tcpdump);
    if stenographer {
        let present = Command::new("sh")
            .args(["-c", "command -v stenotype && command -v stenocurl"])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if present {
            tools.push(Tool::Stenographer);
        } else {
            println!(
                "(stenographer not installed: apt-get install stenographer stenographer-client, or bench/stenographer.sh)"
            );
        }
    }
    let mut lossless: Vec<Option<f64>> = vec![None; tools.len()];
    // Whether a tool kept everything at top speed: then the replay, not the
    // tool, set its highest rate.
    let mut lossless_at_top = vec![false; tools.len()];
    for &pps in &rates {
        // Top speed is measured first with one loop to size its loops.
        let loops = if pps == 0 {
            let started = Instant::now();
            let (sent, _) = replay(&capture, 0, 1);
            let per_second = sent as f64 / started.elapsed().as_secs_f64();
            ((per_second * seconds) / packets as f64).ceil().max(1.0) as u64
        } else {
            ((pps as f64 * seconds) / packets as f64).ceil().max(1.0) as u64
        };
        for (i, &tool) in tools.iter().enumerate() {
            let mut running = tool.start(work.path());
            if tool == Tool::HindsightQueried {
                running.queries = Some(query_loop(work.path().join("archive")));
            }
            let (sent, rate) = replay(&capture, pps, loops);
            // What the kernel still holds reaches the reader within its poll.
            std::thread::sleep(Duration::from_secs(1));
            let kept = tool.stop(running, work.path());
            let lost = sent.saturating_sub(kept);
            let asked = if pps == 0 {
                "top".to_owned()
            } else {
                pps.to_string()
            };
            println!(
                "{asked:>12} {rate:>12.0} {:<18} {sent:>12} {kept:>12} {:>8.3}%",
                tool.name(),
                lost as f64 * 100.0 / sent.max(1) as f64
            );
            if lost == 0 {
                lossless[i] = Some(lossless[i].map_or(rate, |best: f64| best.max(rate)));
                lossless_at_top[i] |= pps == 0;
            }
        }
    }
    println!();
    for ((tool, best), at_top) in tools.iter().zip(&lossless).zip(&lossless_at_top) {
        match best {
            Some(rate) if *at_top => println!(
                "{:<18} no loss at any rate: at least {rate:.0} pps (the replay's top speed, not the tool, is the limit)",
                tool.name()
            ),
            Some(rate) => println!(
                "{:<18} highest rate without loss: {rate:.0} pps",
                tool.name()
            ),
            None => println!("{:<18} lost packets at every rate", tool.name()),
        }
    }
    let tcpdump = tools.iter().position(|&t| t == Tool::Tcpdump).unwrap_or(1);
    match (lossless[0], lossless[tcpdump]) {
        (Some(_), Some(_)) if lossless_at_top[0] && lossless_at_top[tcpdump] => {
            println!(
                "ratio hindsight / tcpdump: not measurable here (neither lost a packet at the replay's top speed)"
            );
        }
        (Some(ours), Some(theirs)) => {
            println!("ratio hindsight / tcpdump: {:.2}x", ours / theirs);
        }
        _ => {}
    }
}
