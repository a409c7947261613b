//! Capture loss at increasing rates (FlowScope's figure 4, Hyperion's figure
//! 16): a real capture replayed by tcpreplay into a veth pair between two
//! network namespaces this benchmark creates, captured on the other end by
//! `hindsight record` (archiving, indexing, building connections, with a
//! trigger on) and by `tcpdump -w`, one after the other on the same replay.
//! Prints, per rate and tool, packets sent, captured (what the tool kept) and
//! lost, and each tool's highest rate without loss.
//!
//! Needs root (namespaces, AF_PACKET). Test traffic stays in the namespaces.
//!
//! `cargo build --release -p hindsight -p hindsight-bench --bin loss_bench`
//! `target/release/loss_bench [--capture PCAP] [--seconds 5] [--rates 25000,50000,...]`

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
    Tcpdump,
}

impl Tool {
    fn name(self) -> &'static str {
        match self {
            Self::Hindsight => "hindsight record",
            Self::Tcpdump => "tcpdump -w",
        }
    }

    /// Starts capturing on `la` into `work`; returns once it captures.
    fn start(self, work: &Path) -> Running {
        let mut command = match self {
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
        Running { child, log: heard }
    }

    /// Stops the capture (SIGINT, as a user would) and returns the packets it kept.
    fn stop(self, running: Running, work: &Path) -> u64 {
        let Running { mut child, log } = running;
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
            Self::Hindsight => {
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
        "[--capture PCAP] [--seconds S] [--rates PPS,PPS,...,0 (0: top speed)]",
    );
    let mut capture: PathBuf = default_source();
    let mut seconds = 5.0f64;
    let mut rates: Vec<u64> = vec![25_000, 50_000, 100_000, 200_000, 400_000, 0];
    while let Some(flag) = flags.next_flag() {
        match flag.as_str() {
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
    let tools = [Tool::Hindsight, Tool::Tcpdump];
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
            let running = tool.start(work.path());
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
    match (lossless[0], lossless[1]) {
        (Some(_), Some(_)) if lossless_at_top[0] && lossless_at_top[1] => {
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
