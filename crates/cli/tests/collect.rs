//! `hindsight collect` against nfcapd/nfdump as the oracle: softflowd turns a real
//! capture into NetFlow v5, v9 and IPFIX export packets and sends them to nfcapd,
//! which repeats each one to hindsight's collector (`-R`), so both decode exactly
//! the same bytes; the records must be the same.

mod common;

use common::{hindsight, lan_hour, ok, require_tool, start_nfcapd};

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// first ms, last ms, source, destination, source port, destination port,
/// protocol, packets, bytes.
type Record = (i64, i64, String, String, u16, u16, u8, u64, u64);

fn terminate(child: &mut Child) {
    ok(&Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .output()
        .expect("run kill"));
}

fn parse_ms(text: &str) -> i64 {
    // "2012-11-23 17:00:39.435", UTC.
    let time: jiff::civil::DateTime = text.trim().parse().expect(text);
    time.to_zoned(jiff::tz::TimeZone::UTC)
        .expect(text)
        .timestamp()
        .as_millisecond()
}

/// A port as nfdump prints it; ICMP's `type.code` is NetFlow's `type << 8 | code`.
fn port(text: &str) -> u16 {
    match text.split_once('.') {
        Some((kind, code)) => kind.parse::<u16>().unwrap() << 8 | code.parse::<u16>().unwrap(),
        None => text.parse().expect(text),
    }
}

fn nfdump_records(dir: &Path) -> Vec<Record> {
    let text = ok(&Command::new("nfdump")
        .env("TZ", "UTC")
        .args([
            "-q",
            "-N",
            "-o",
            "fmt:%ts|%te|%sa|%da|%sp|%dp|%pr|%pkt|%byt",
            "-R",
        ])
        .arg(dir)
        .output()
        .expect("run nfdump"));
    let mut records: Vec<Record> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let f: Vec<&str> = line.split('|').map(str::trim).collect();
            (
                parse_ms(f[0]),
                parse_ms(f[1]),
                f[2].to_owned(),
                f[3].to_owned(),
                port(f[4]),
                port(f[5]),
                f[6].parse().expect(f[6]),
                f[7].parse().unwrap(),
                f[8].parse().unwrap(),
            )
        })
        .collect();
    records.sort();
    records
}

fn hindsight_records(archive: &Path) -> (Vec<Record>, BTreeMap<String, usize>) {
    let text = ok(&hindsight(&[
        "sql",
        "SELECT CAST(ts AS BIGINT) / 1000000, CAST(last_ts AS BIGINT) / 1000000, \
         ip_str(src_addr), ip_str(dst_addr), src_port, dst_port, ip_proto, packets_out, \
         bytes_out, source FROM flows",
        "--format",
        "csv",
        "--archive",
        archive.to_str().unwrap(),
    ]));
    let mut sources: BTreeMap<String, usize> = BTreeMap::new();
    let mut records: Vec<Record> = text
        .lines()
        .skip(1)
        .map(|line| {
            let f: Vec<&str> = line.split(',').collect();
            *sources.entry(f[9].to_owned()).or_default() += 1;
            (
                f[0].parse().unwrap(),
                f[1].parse().unwrap(),
                f[2].to_owned(),
                f[3].to_owned(),
                f[4].parse().unwrap(),
                f[5].parse().unwrap(),
                f[6].parse().unwrap(),
                f[7].parse().unwrap(),
                f[8].parse().unwrap(),
            )
        })
        .collect();
    records.sort();
    (records, sources)
}

#[test]
fn netflow_v5_v9_and_ipfix_from_softflowd_decode_as_nfdump_decodes_them() {
    require_tool("softflowd");
    require_tool("nfcapd");
    require_tool("nfdump");
    let work = tempfile::tempdir().unwrap();
    let archive = work.path().join("archive");
    let mut collector = Command::new(env!("CARGO_BIN_EXE_hindsight"))
        .args(["collect", "--listen", "udp://127.0.0.1:0", "--archive"])
        .arg(&archive)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start hindsight collect");
    let mut stderr = BufReader::new(collector.stderr.take().unwrap());
    let mut first_line = String::new();
    stderr.read_line(&mut first_line).unwrap();
    let listening = first_line
        .trim()
        .strip_prefix("listening on udp://")
        .unwrap_or_else(|| panic!("unexpected first line {first_line:?}"))
        .to_owned();

    let nfcapd_dir = work.path().join("nfcapd");
    let (mut nfcapd, nfcapd_port) = start_nfcapd(&nfcapd_dir, &listening);

    // `-a`: flow times from the packets (2012), not from the replay.
    for version in ["5", "9", "10"] {
        ok(&Command::new("softflowd")
            .args(["-a", "-r"])
            .arg(lan_hour())
            .args(["-n", &format!("127.0.0.1:{nfcapd_port}"), "-v", version])
            .arg("-p")
            .arg(work.path().join("softflowd.pid"))
            .args(["-c", "none"])
            .stdin(Stdio::null())
            .output()
            .expect("run softflowd"));
    }
    std::thread::sleep(Duration::from_secs(1));
    terminate(&mut nfcapd);
    assert!(nfcapd.wait().unwrap().success());
    terminate(&mut collector);
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
    assert!(collector.wait().unwrap().success(), "{rest}");
    assert!(rest.contains(" 0 malformed"), "{rest}");

    let theirs = nfdump_records(&nfcapd_dir);
    let (ours, sources) = hindsight_records(&archive);
    // softflowd's IPFIX records carry flowStartSysUpTime (22) and flowEndSysUpTime
    // (21) relative to the systemInitTimeMilliseconds of an options record. nfdump
    // 1.7.1 reads them the other way round (its IPFIX records end before they
    // begin; the same connection in v5 and v9 does not), hindsight as IANA defines
    // them: the comparison orders the two times, and ours are all in order.
    assert!(
        ours.iter().all(|r| r.0 <= r.1),
        "a record of ours ends before it begins"
    );
    let ordered = |records: Vec<Record>| {
        let mut records: Vec<Record> = records
            .into_iter()
            .map(|mut r| {
                (r.0, r.1) = (r.0.min(r.1), r.0.max(r.1));
                r
            })
            .collect();
        records.sort();
        records
    };
    let (theirs, ours) = (ordered(theirs), ordered(ours));
    // softflowd exports each connection as two records: thousands per version.
    // nfcapd may drop some of softflowd's end-of-file burst (both then miss
    // the same packets: it repeats what it received).
    assert!(theirs.len() > 2_000, "nfdump has {} records", theirs.len());
    assert_eq!(sources.len(), 3, "{sources:?}");
    let mut only_ours = ours.clone();
    let mut only_theirs = Vec::new();
    for record in &theirs {
        match only_ours.binary_search(record) {
            Ok(at) => {
                only_ours.remove(at);
            }
            Err(_) => only_theirs.push(record.clone()),
        }
    }
    assert!(
        only_ours.is_empty() && only_theirs.is_empty(),
        "{} records, nfdump {}; only ours (first 5): {:?}; only nfdump's: {:?}",
        ours.len(),
        theirs.len(),
        &only_ours[..only_ours.len().min(5)],
        &only_theirs[..only_theirs.len().min(5)]
    );
    // The records are 2012's: the capture's hour.
    let (first, last) = (theirs[0].0, theirs.iter().map(|r| r.1).max().unwrap());
    assert!(
        (1_353_690_000_000..1_353_700_000_000).contains(&first) && last < 1_353_700_000_000,
        "{first}..{last}"
    );
}

#[test]
fn collect_rejects_a_bad_listen_address() {
    let work = tempfile::tempdir().unwrap();
    let output = hindsight(&[
        "collect",
        "--listen",
        "tcp://127.0.0.1:2055",
        "--archive",
        work.path().join("a").to_str().unwrap(),
    ]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("expected udp://ADDRESS:PORT"), "{stderr}");
}
