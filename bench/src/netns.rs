//! Two network namespaces of the benchmark's own joined by a veth pair: a
//! replay sent from one end is captured on the other, and no traffic leaves
//! them. Needs root.

use std::path::Path;
use std::process::{Command, Stdio};

/// Two namespaces, `rx` (receives on `la`) and `tx` (sends from `lb`), joined
/// by a veth pair with IPv6 and offloads off, so that the capture sees the
/// frames as sent (and nothing else); removed when dropped.
#[derive(Debug)]
pub struct Link {
    /// The receiving namespace (its interface is `la`, its loopback up).
    pub rx: String,
    /// The sending namespace (its interface is `lb`).
    pub tx: String,
}

impl Link {
    /// Makes the pair `rx`, `tx` (removing namespaces left by a run before).
    pub fn new(rx: &str, tx: &str) -> Self {
        let link = Self {
            rx: rx.to_owned(),
            tx: tx.to_owned(),
        };
        link.remove();
        for ns in [rx, tx] {
            must(Command::new("ip").args(["netns", "add", ns]));
        }
        must(Command::new("ip").args([
            "link", "add", "la", "netns", rx, "type", "veth", "peer", "name", "lb", "netns", tx,
        ]));
        must(Command::new("ip").args(["-n", rx, "link", "set", "lo", "up"]));
        for (ns, dev) in [(rx, "la"), (tx, "lb")] {
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
        link
    }

    fn remove(&self) {
        for ns in [&self.rx, &self.tx] {
            let _ = Command::new("ip")
                .args(["netns", "del", ns])
                .stderr(Stdio::null())
                .status();
        }
    }

    /// `program` run in the namespace `ns` (`ip netns exec` execs it, so the
    /// child's pid is the program's).
    pub fn exec(ns: &str, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut command = Command::new("ip");
        command.args(["netns", "exec", ns]).arg(program);
        command
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.remove();
    }
}

/// Replays `capture` `loops` times from `iface` of the namespace `ns` with
/// tcpreplay at `pps` packets a second (0: as fast as it can); returns the
/// packets it sent and the rate it reached.
pub fn tcpreplay(ns: &str, iface: &str, capture: &Path, pps: u64, loops: u64) -> (u64, f64) {
    let mut command = Link::exec(ns, "tcpreplay");
    command.args(["-i", iface, "--loop"]).arg(loops.to_string());
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

/// Runs a setup command; panics with its error output if it fails.
pub fn must(command: &mut Command) {
    let output = command.output().expect("run a setup command");
    assert!(
        output.status.success(),
        "{command:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Whether this process runs as root.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}
