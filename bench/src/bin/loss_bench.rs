//! Capture loss at increasing rates (FlowScope's figure 4, Hyperion's figure
//! 16): a real capture replayed (by this benchmark's own `AF_PACKET` sender,
//! [`send_frames`], or with `--sender tcpreplay` by tcpreplay, which tops out
//! at about 480,000 packets/s here) into a veth pair between two
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
//! With `--disk-mbps`, every tool writes to a disk that takes that many MB a
//! second (`slow_disk`): where the disk, not the CPU, bounds the capture, as
//! in Hyperion's figure 16.
//!
//! `target/release/loss_bench [--capture PCAP] [--seconds 5] [--rates 25000,50000,...] [--sender frames|tcpreplay] [--no-stenographer] [--queries] [--disk-mbps 10 [--disk-dirty-mb 16]]`

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;
use hindsight_bench::netns::{Link, must};
use hindsight_bench::{default_source, hindsight_binary};

const RX: &str = "hs-loss-rx";
const TX: &str = "hs-loss-tx";

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
/// (which only root may enter); on the slow disk with `--disk-mbps`.
static STENO_DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

fn steno_dir() -> &'static Path {
    STENO_DIR.get_or_init(|| PathBuf::from("/var/tmp/hs-loss-steno"))
}

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

    /// Stops the capture (SIGINT, as a user would) and returns the packets it
    /// kept and the CPU seconds its process spent.
    fn stop(self, running: Running, work: &Path) -> (u64, f64) {
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
        let cpu = cpu_seconds(child.id());
        // SAFETY: kill with a pid we spawned.
        unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
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
                (archived, cpu)
            }
            Self::Tcpdump => {
                let path = work.join("tcpdump.pcap");
                let frames = hindsight_bench::read_frames(&path).len() as u64;
                std::fs::remove_file(path).ok();
                (frames, cpu)
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
    let dir = steno_dir();
    let steno = dir.display();
    let _ = std::fs::remove_dir_all(dir);
    for sub in ["packets", "index"] {
        std::fs::create_dir_all(dir.join(sub)).expect("create Stenographer's directories");
    }
    let config = dir.join("config");
    std::fs::write(
        &config,
        format!(
            r#"{{
  "Threads": [{{ "PacketsDirectory": "{steno}/packets", "IndexDirectory": "{steno}/index",
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
    must(
        Command::new("chown")
            .args(["-R", "stenographer:stenographer"])
            .arg(dir),
    );
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
            "stenotype did not start: see {steno}/stenographer.log"
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
fn stop_stenographer(running: Running) -> (u64, f64) {
    let dir = steno_dir();
    let steno = dir.display();
    let count = || -> u64 {
        let output = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "STENOGRAPHER_CONFIG={steno}/config ip netns exec {RX} stenocurl /query                  -d 'after 1970-01-01T00:00:00Z' --silent --show-error 2>>{steno}/stenocurl.err | tcpdump -r - -nn 2>/dev/null | wc -l"
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
    // stenotype does the capturing: its CPU, not its server's.
    let cpu = Command::new("pgrep")
        .args(["-u", "stenographer", "-x", "stenotype"])
        .output()
        .ok()
        .and_then(|out| {
            String::from_utf8_lossy(&out.stdout)
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .map_or(f64::NAN, cpu_seconds);
    // SAFETY: kill with a pid we spawned.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
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
    (if last == u64::MAX { 0 } else { last }, cpu)
}

/// User and system CPU seconds of process `pid` (all its threads), from
/// `/proc` (NaN if it is gone).
fn cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return f64::NAN;
    };
    // The fields after the command's closing parenthesis; utime and stime
    // are the 14th and 15th of the line, the 12th and 13th after it.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i).and_then(|v| v.parse::<f64>().ok()))
        .sum();
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    ticks / per_second
}

/// The command line.
#[derive(Parser)]
struct Args {
    #[arg(long, default_value_os_t = default_source())]
    capture: PathBuf,
    /// Seconds of each cell.
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// Rates in packets per second (0: top speed).
    #[arg(long, value_delimiter = ',', default_values_t = [25_000, 50_000, 100_000, 200_000, 400_000, 0])]
    rates: Vec<u64>,
    #[arg(long, value_enum, default_value_t = Sender::Frames)]
    sender: Sender,
    #[arg(long = "no-stenographer", action = clap::ArgAction::SetFalse)]
    stenographer: bool,
    #[arg(long)]
    queries: bool,
    /// Every tool writes to a disk this slow (MB/s).
    #[arg(long)]
    disk_mbps: Option<f64>,
    #[arg(long, default_value_t = 16.0, requires = "disk_mbps")]
    disk_dirty_mb: f64,
}

/// What replays the capture.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Sender {
    /// This benchmark's own sender ([`send_frames`]).
    Frames,
    /// tcpreplay (about 480,000 packets/s at top speed on this machine).
    Tcpreplay,
}

/// Replays `capture` `loops` times at `pps` (0: as fast as the sender can);
/// returns the packets sent and the rate reached.
fn replay(sender: Sender, capture: &Path, pps: u64, loops: u64) -> (u64, f64) {
    if sender == Sender::Frames {
        let output = Link::exec(TX, std::env::current_exe().expect("this program"))
            .args(["--send-frames", "lb"])
            .arg(capture)
            .args([pps.to_string(), loops.to_string()])
            .output()
            .expect("run the sender");
        let text = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "sender: {text}{}",
            String::from_utf8_lossy(&output.stderr)
        );
        // "sent N rate R"
        let fields: Vec<&str> = text.split_whitespace().collect();
        let sent = fields.get(1).and_then(|n| n.parse().ok());
        let rate = fields.get(3).and_then(|n| n.parse().ok());
        return sent
            .zip(rate)
            .unwrap_or_else(|| panic!("no count in the sender's output: {text}"));
    }
    hindsight_bench::netns::tcpreplay(TX, "lb", capture, pps, loops)
}

/// The sender, run inside the sending namespace as
/// `loss_bench --send-frames IFACE PCAP PPS LOOPS`: the capture's frames held
/// in memory and written `LOOPS` times to `IFACE` through an `AF_PACKET`
/// socket that bypasses the queueing discipline, 64 frames a `sendmmsg`
/// call, paced to `PPS` (0: as fast as it can). Prints `sent N rate R`.
fn send_frames(args: &[String]) {
    let [iface, capture, pps, loops] = args else {
        panic!("--send-frames IFACE PCAP PPS LOOPS");
    };
    let pps: u64 = pps.parse().expect("PPS");
    let loops: u64 = loops.parse().expect("LOOPS");
    let frames = hindsight_bench::read_frames(Path::new(capture));
    assert!(!frames.is_empty(), "{capture} holds no frames");
    let fail = |what: &str| -> ! { panic!("{what}: {}", std::io::Error::last_os_error()) };
    // SAFETY: plain system calls on a socket this function owns, with
    // pointers to locals and to `frames`, which outlive the calls.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0) };
    if fd < 0 {
        fail("socket(AF_PACKET)");
    }
    let name = std::ffi::CString::new(iface.as_str()).expect("an interface name");
    // SAFETY: a NUL-terminated name.
    let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if index == 0 {
        fail(iface);
    }
    // SAFETY: sockaddr_ll is plain data; zero is a valid value of each field.
    let mut address: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    address.sll_family = libc::AF_PACKET as u16;
    address.sll_ifindex = index as i32;
    let length = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
    // SAFETY: `address` is a sockaddr_ll of `length` bytes.
    if unsafe { libc::bind(fd, (&raw const address).cast(), length) } != 0 {
        fail("bind");
    }
    let one: libc::c_int = 1;
    let size = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: an int option.
    if unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_PACKET,
            libc::PACKET_QDISC_BYPASS,
            (&raw const one).cast(),
            size,
        )
    } != 0
    {
        fail("PACKET_QDISC_BYPASS");
    }
    let mut vectors: Vec<libc::iovec> = frames
        .iter()
        .map(|(_, _, data)| libc::iovec {
            iov_base: data.as_ptr() as *mut libc::c_void,
            iov_len: data.len(),
        })
        .collect();
    let mut headers: Vec<libc::mmsghdr> = vectors
        .iter_mut()
        .map(|vector| {
            // SAFETY: mmsghdr is plain data; zero is a valid value of each field.
            let mut header: libc::mmsghdr = unsafe { std::mem::zeroed() };
            header.msg_hdr.msg_iov = vector;
            header.msg_hdr.msg_iovlen = 1;
            header
        })
        .collect();
    const BATCH: usize = 64;
    let total = frames.len() as u64 * loops;
    let mut sent = 0u64;
    let mut at = 0usize;
    let started = Instant::now();
    while sent < total {
        if pps > 0 {
            let due = Duration::from_secs_f64(sent as f64 / pps as f64);
            let elapsed = started.elapsed();
            if due > elapsed {
                let wait = due - elapsed;
                if wait > Duration::from_micros(200) {
                    std::thread::sleep(wait);
                } else {
                    std::hint::spin_loop();
                }
                continue;
            }
        }
        let count = BATCH
            .min(frames.len() - at)
            .min(usize::try_from(total - sent).unwrap_or(BATCH));
        // SAFETY: `count` headers from `at` lie inside `headers`.
        let done = unsafe { libc::sendmmsg(fd, headers.as_mut_ptr().add(at), count as u32, 0) };
        if done < 0 {
            let error = std::io::Error::last_os_error();
            match error.raw_os_error() {
                // The device's queue is full: try again.
                Some(libc::ENOBUFS | libc::EAGAIN | libc::EINTR) => std::thread::yield_now(),
                _ => panic!("sendmmsg: {error}"),
            }
            continue;
        }
        sent += done as u64;
        at = (at + done as usize) % frames.len();
    }
    let seconds = started.elapsed().as_secs_f64();
    println!("sent {sent} rate {:.0}", sent as f64 / seconds);
}

/// Frames the receiving end of the link took in (`la`'s counter): what
/// reached the capturing tools' sockets to keep or lose.
fn link_delivered() -> u64 {
    let output = Link::exec(RX, "cat")
        .arg("/sys/class/net/la/statistics/rx_packets")
        .output()
        .expect("read la's counters");
    String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .unwrap_or(0)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--send-frames") {
        send_frames(&args[1..]);
        return;
    }
    let Args {
        capture,
        seconds,
        rates,
        sender,
        stenographer,
        queries,
        disk_mbps,
        disk_dirty_mb: dirty_mb,
    } = Args::parse();
    let packets = hindsight_bench::read_frames(&capture).len() as u64;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let by = match sender {
        Sender::Frames => "this bench's AF_PACKET sender (sendmmsg, qdisc bypassed)",
        Sender::Tcpreplay => "tcpreplay",
    };
    println!(
        "capture loss: {} ({packets} packets) replayed by {by} into a veth pair, about {seconds} s a cell, {cores} cores",
        capture.display()
    );
    println!(
        "hindsight record archives, indexes, builds connections and runs a trigger; tcpdump -w writes a pcap"
    );
    if let Some(mbps) = disk_mbps {
        println!(
            "every tool writes to a slow disk: {mbps} MB/s (10^6 bytes), at most {dirty_mb} MB of its pages dirty (bench/src/slow_disk.rs)"
        );
    }
    println!();
    println!(
        "delivered: what the receiving end of the link took in (la's rx_packets), for the tool to keep or lose"
    );
    println!();
    println!(
        "{:>12} {:>12} {:<18} {:>12} {:>12} {:>12} {:>9} {:>8} {:>10}",
        "asked pps",
        "sent pps",
        "tool",
        "sent",
        "delivered",
        "kept",
        "lost %",
        "CPU s",
        "CPU ns/pkt"
    );
    let _link = Link::new(RX, TX);
    // Dropped after `work`, which lies on it.
    let slow_disk = disk_mbps.map(|mbps| {
        hindsight_bench::slow_disk::SlowDisk::new(
            Path::new("/var/tmp/hs-loss-disk"),
            16 << 30,
            (mbps * 1e6) as u64,
            (dirty_mb * 1e6) as u64,
        )
    });
    if let Some(disk) = &slow_disk {
        let _ = STENO_DIR.set(disk.path().join("steno"));
    }
    let work = tempfile::tempdir_in(
        slow_disk
            .as_ref()
            .map_or_else(|| PathBuf::from("/var/tmp"), |disk| disk.path()),
    )
    .expect("a work directory");
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
    // CPU a packet at top speed: what bounds each tool past the sender's reach.
    let mut top_cpu = vec![f64::NAN; tools.len()];
    for &pps in &rates {
        // Top speed is measured first with one loop to size its loops.
        let loops = if pps == 0 {
            let started = Instant::now();
            let (sent, _) = replay(sender, &capture, 0, 1);
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
            let before = link_delivered();
            let (sent, rate) = replay(sender, &capture, pps, loops);
            // What the kernel still holds reaches the reader within its poll.
            std::thread::sleep(Duration::from_secs(1));
            let delivered = link_delivered().saturating_sub(before);
            let (kept, cpu) = tool.stop(running, work.path());
            let lost = sent.saturating_sub(kept);
            let asked = if pps == 0 {
                "top".to_owned()
            } else {
                pps.to_string()
            };
            println!(
                "{asked:>12} {rate:>12.0} {:<18} {sent:>12} {delivered:>12} {kept:>12} {:>8.3}% {cpu:>8.2} {:>10.0}",
                tool.name(),
                lost as f64 * 100.0 / sent.max(1) as f64,
                cpu * 1e9 / kept.max(1) as f64
            );
            if pps == 0 {
                top_cpu[i] = cpu * 1e9 / kept.max(1) as f64;
            }
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
    println!();
    println!(
        "CPU a kept packet at top speed (all of the tool's threads; the sender and the kernel's delivery hold the other core):"
    );
    for (tool, ns) in tools.iter().zip(&top_cpu) {
        println!("{:<18} {ns:.0} ns", tool.name());
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
