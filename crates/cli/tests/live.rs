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

use common::{PacketKey, hindsight, lan_hour, ok, read_frames as read_capture, require_tool};

use std::io::{BufRead, BufReader};
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

impl Namespaces {
    fn new() -> Self {
        let id = std::process::id();
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
    let stderr = child.stderr.take().expect("piped stderr");
    let (ready, is_ready) = std::sync::mpsc::channel();
    let text = text.to_owned();
    let reader = std::thread::spawn(move || {
        let mut all = String::new();
        let mut sent = false;
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if !sent && line.contains(&text) {
                let _ = ready.send(());
                sent = true;
            }
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    is_ready
        .recv_timeout(Duration::from_secs(60))
        .expect("the capture did not start");
    reader
}

fn interrupt(child: &Child) {
    run(privileged("kill").args(["-INT", &child.id().to_string()]));
}

#[test]
fn live_capture_archives_what_tcpdump_sees_and_a_trigger_dumps_its_window() {
    if std::env::var_os("HINDSIGHT_SKIP_LIVE").is_some() {
        eprintln!("HINDSIGHT_SKIP_LIVE is set: live test skipped");
        return;
    }
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc_geteuid() } == 0;
    assert!(
        root,
        "the live test needs root; set HINDSIGHT_SKIP_LIVE=1 to skip it"
    );
    for tool in ["ip", "tcpdump", "tcpreplay"] {
        require_tool(tool);
    }
    let work = tempfile::tempdir().unwrap();
    let archive = work.path().join("archive");
    let reference = work.path().join("tcpdump.pcap");
    let ns = Namespaces::new();

    let mut tcpdump = ns
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
        .arg(&reference)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let tcpdump_err = wait_for_stderr(&mut tcpdump, "listening on");
    let (before, after) = ("1", "1");
    let mut recorder = ns
        .exec(&ns.receiver, env!("CARGO_BIN_EXE_hindsight"))
        .args(["record", "-i", "hs-a", "--archive"])
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
    interrupt(&tcpdump);
    tcpdump.wait().unwrap();
    let tcpdump_err = tcpdump_err.join().unwrap();
    assert!(
        tcpdump_err.contains("\n0 packets dropped by kernel"),
        "tcpdump dropped packets: {tcpdump_err}"
    );

    // The archive holds every packet tcpdump saw: same times, lengths and bytes
    // (the archive keeps 128 bytes of each).
    let seen = read_capture(&reference);
    let replayed = read_capture(&lan_hour()).len();
    assert!(
        seen.len() >= replayed,
        "tcpdump saw {} of {replayed}",
        seen.len()
    );
    let exported = work.path().join("archive.pcap");
    ok(&hindsight(&[
        "query",
        "",
        "--archive",
        archive.to_str().unwrap(),
        "--format",
        "pcap",
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
    assert_eq!(archived.len(), expected.len(), "{recorder_err}");
    assert!(archived == expected, "archive and tcpdump differ");

    // The first trigger is the first packet of 172.30.100.1 tcpdump saw; its dump
    // is what tcpdump -r selects from tcpdump's recording for `host $src` and
    // the window.
    let mut dumps: Vec<_> = std::fs::read_dir(archive.join("dumps"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    dumps.sort();
    assert!(!dumps.is_empty(), "no dump: {recorder_err}");
    let rare = work.path().join("rare.pcap");
    run(Command::new("tcpdump")
        .args(["--time-stamp-precision=nano", "-r"])
        .arg(&reference)
        .arg("-w")
        .arg(&rare)
        .arg("host 172.30.100.1"));
    let first_rare = read_capture(&rare)[0].0;
    let name = dumps[0].file_stem().unwrap().to_str().unwrap().to_owned();
    let mut parts = name.splitn(3, '-').skip(1);
    let at: i64 = parts.next().unwrap().parse().unwrap();
    let src = parts.next().unwrap().to_owned();
    assert_eq!(at, first_rare, "the trigger packet");
    let selected = work.path().join("selected.pcap");
    run(Command::new("tcpdump")
        .args(["--time-stamp-precision=nano", "-r"])
        .arg(&reference)
        .arg("-w")
        .arg(&selected)
        .arg(format!("host {src}")));
    let window = (at - 1_000_000_000)..=(at + 1_000_000_000);
    let oracle: Vec<PacketKey> = read_capture(&selected)
        .into_iter()
        .filter(|(ts, _, _)| window.contains(ts))
        .collect();
    let dumped = read_capture(&dumps[0]);
    assert!(oracle.len() > 10, "{} packets in the window", oracle.len());
    assert_eq!(dumped.len(), oracle.len());
    assert!(dumped == oracle, "dump and tcpdump's selection differ");
}

unsafe extern "C" {
    #[link_name = "geteuid"]
    fn libc_geteuid() -> u32;
}
