//! Triggers and dumps through the public interface, on the real lan-hour capture
//! replayed into a capture ring; `tcpdump -r` is the oracle of what a dump holds.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use hindsight_capture::CaptureReader;
use hindsight_filter::Filter;
use hindsight_model::LinkType;
use hindsight_ring::{Ring, RingConfig};
use hindsight_trigger::{Analyzer, DumpLimits, DumpRequest, DumpTemplate, TriggerError, dump};

fn lan_hour() -> PathBuf {
    Path::new(&std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo test sets CARGO_MANIFEST_DIR"))
        .join("../../../shared/data/lan-hour-2012.pcap")
}

/// (timestamp ns, wire length, bytes) of every frame of a capture file.
fn frames(path: &Path) -> Vec<(i64, u32, Vec<u8>)> {
    let mut reader = CaptureReader::open(path).unwrap();
    let mut out = Vec::new();
    while let Some(frame) = reader.next_frame() {
        let frame = frame.unwrap();
        out.push((frame.ts_nanos, frame.wire_len, frame.data.to_vec()));
    }
    out
}

/// The capture, replayed into a ring large enough to hold it, then closed.
fn ring_with_lan_hour() -> Ring {
    let ring = Ring::new(RingConfig {
        chunks: 16,
        ..RingConfig::default()
    })
    .unwrap();
    let mut producer = ring.producer(0);
    for (ts, wire_len, data) in frames(&lan_hour()) {
        producer.push(ts, wire_len, &data).unwrap();
    }
    drop(producer);
    ring.close();
    assert_eq!(ring.stats().overwritten, 0);
    ring
}

#[test]
fn a_trigger_dumps_what_tcpdump_selects_in_the_window() {
    let ring = ring_with_lan_hour();
    let trigger = Filter::parse("ip.addr == 172.30.100.1").unwrap();
    let mut analyzer = Analyzer::from_oldest(
        &ring,
        trigger,
        LinkType::ETHERNET,
        Duration::from_secs(3600),
    );
    let hit = analyzer
        .next_trigger(Duration::from_secs(10))
        .unwrap()
        .expect("the capture has packets of 172.30.100.1");
    let template = DumpTemplate::new("host $src").unwrap();
    let filter_text = template.render_text(&hit.headers).unwrap();
    let src = hit.headers.src_addr.unwrap().to_string();
    assert_eq!(filter_text, format!("host {src}"));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("dump.pcap");
    let (before, after) = (Duration::from_secs(120), Duration::from_secs(300));
    let report = dump(
        &ring,
        &DumpRequest {
            at_ns: hit.ts_ns,
            before,
            after,
            filter: template.render(&hit.headers).unwrap(),
            link_type: LinkType::ETHERNET,
        },
        &out,
        DumpLimits::default(),
    )
    .unwrap();

    // The oracle: tcpdump's selection of the same host, cut to the same window.
    let selected = dir.path().join("tcpdump.pcap");
    let status = Command::new("tcpdump")
        .args(["-r"])
        .arg(lan_hour())
        .args(["-w"])
        .arg(&selected)
        .arg(&filter_text)
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let from = hit.ts_ns - before.as_nanos() as i64;
    let to = hit.ts_ns + after.as_nanos() as i64;
    let expected: Vec<_> = frames(&selected)
        .into_iter()
        .filter(|(ts, _, _)| (from..=to).contains(ts))
        .collect();
    let dumped = frames(&out);
    assert!(
        expected.len() > 10,
        "{} packets in the window",
        expected.len()
    );
    assert_eq!(dumped.len(), expected.len());
    assert_eq!(dumped, expected);
    assert_eq!(report.packets, expected.len() as u64);
    assert_eq!(report.left_out, 0);
    assert!(
        dumped.iter().any(|(ts, _, _)| *ts < hit.ts_ns),
        "packets from before the trigger"
    );
}

#[test]
fn a_dump_keeps_to_its_byte_budget() {
    let ring = ring_with_lan_hour();
    let all = frames(&lan_hour());
    let (first, last) = (all[0].0, all[all.len() - 1].0);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("dump.pcap");
    let report = dump(
        &ring,
        &DumpRequest {
            at_ns: first,
            before: Duration::ZERO,
            after: Duration::from_nanos((last - first) as u64),
            filter: Filter::match_all(),
            link_type: LinkType::ETHERNET,
        },
        &out,
        DumpLimits {
            max_bytes: 100_000,
            ..DumpLimits::default()
        },
    )
    .unwrap();
    assert!(report.bytes <= 100_000);
    assert_eq!(report.packets + report.left_out, all.len() as u64);
    assert_eq!(frames(&out).len() as u64, report.packets);
}

/// Two capture threads of one fanout group, one lagging: it publishes packets
/// of the window in a chunk numbered after one that starts past the window, and
/// fills a chunk from before the window's start while the other publishes.
/// The dump waits for both and holds every packet of the window.
#[test]
fn a_dump_waits_for_a_lagging_producer() {
    let ring = Ring::new(RingConfig {
        chunk_bytes: 64 << 10,
        chunks: 16,
        max_hold: Duration::from_millis(20),
    })
    .unwrap();
    let frame = |ts: i64| (ts, vec![ts as u8; 60]);
    let (mut fast, mut slow) = (ring.producer(0), ring.producer(0));
    // The window is [1000, 2000]. The slow thread holds chunk 0 from 990 on.
    slow.push(990, 60, &frame(990).1).unwrap();
    fast.push(1000, 60, &frame(1000).1).unwrap();
    fast.push(1500, 60, &frame(1500).1).unwrap();
    fast.publish(); // chunk 1: 1000-1500
    fast.push(2500, 60, &frame(2500).1).unwrap();
    fast.publish(); // chunk 2: past the window
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("dump.pcap");
    let request = DumpRequest {
        at_ns: 1000,
        before: Duration::ZERO,
        after: Duration::from_nanos(1000),
        filter: Filter::match_all(),
        link_type: LinkType::ETHERNET,
    };
    let (report, dumped) = std::thread::scope(|scope| {
        let dumping = scope.spawn(|| {
            let report = dump(&ring, &request, &out, DumpLimits::default()).unwrap();
            (report, frames(&out))
        });
        std::thread::sleep(Duration::from_millis(100));
        assert!(!dumping.is_finished(), "the dump did not wait");
        slow.push(1200, 60, &frame(1200).1).unwrap();
        slow.publish(); // chunk 0: 990-1200
        slow.push(1800, 60, &frame(1800).1).unwrap();
        slow.publish(); // chunk 3: after the chunk past the window
        std::thread::sleep(Duration::from_millis(100));
        assert!(!dumping.is_finished(), "the dump did not wait");
        // The slow thread's socket is empty: nothing older than 3000 will come.
        slow.caught_up(3000);
        dumping.join().unwrap()
    });
    assert!(report.complete);
    let times: Vec<i64> = dumped.iter().map(|f| f.0).collect();
    assert_eq!(times, [1000, 1200, 1500, 1800]);
    assert_eq!(dumped[1], (1200, 60, frame(1200).1));

    // A producer that never catches up: the dump ends at its deadline, marked so.
    fast.push(2600, 60, &frame(2600).1).unwrap();
    let report = dump(
        &ring,
        &DumpRequest {
            at_ns: 2500,
            ..request
        },
        &out,
        DumpLimits {
            max_wait: Duration::from_millis(100),
            ..DumpLimits::default()
        },
    )
    .unwrap();
    assert!(!report.complete);
    assert_eq!(frames(&out).len(), 1, "2500 was published, 2600 is held");
}

#[test]
fn the_holdoff_makes_one_trigger_per_event() {
    let ring = ring_with_lan_hour();
    let filter = "tcp.flags.syn == 1 && tcp.flags.ack == 0";
    let holdoff = Duration::from_secs(60);
    let mut analyzer = Analyzer::from_oldest(
        &ring,
        Filter::parse(filter).unwrap(),
        LinkType::ETHERNET,
        holdoff,
    );
    let mut fired = Vec::new();
    while let Ok(next) = analyzer.next_trigger(Duration::from_secs(10)) {
        fired.push(
            next.expect("a closed ring ends, it does not time out")
                .ts_ns,
        );
    }
    // The oracle: tcpdump's SYNs, thinned by the same rule.
    let output = Command::new("tcpdump")
        .args(["-nn", "-tt", "--time-stamp-precision=nano", "-r"])
        .arg(lan_hour())
        .arg("tcp[tcpflags] & (tcp-syn|tcp-ack) == tcp-syn")
        .stderr(std::process::Stdio::null())
        .output()
        .unwrap();
    let mut expected = Vec::new();
    let mut matches = 0u64;
    for line in String::from_utf8(output.stdout).unwrap().lines() {
        let stamp = line.split_whitespace().next().unwrap();
        let (s, ns) = stamp.split_once('.').unwrap();
        let ts = s.parse::<i64>().unwrap() * 1_000_000_000 + ns.parse::<i64>().unwrap();
        matches += 1;
        if expected
            .last()
            .is_none_or(|&last: &i64| ts - last >= holdoff.as_nanos() as i64)
        {
            expected.push(ts);
        }
    }
    assert!(expected.len() > 1);
    assert_eq!(fired, expected);
    assert_eq!(analyzer.suppressed(), matches - expected.len() as u64);
}

#[test]
fn templates_name_their_faults() {
    let err = DumpTemplate::new("host $source").unwrap_err();
    assert!(
        matches!(err, TriggerError::UnknownPlaceholder { column: 6, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("$source"), "{err}");
    let err = DumpTemplate::new("host $src and (").unwrap_err();
    assert!(matches!(err, TriggerError::Filter { .. }), "{err}");
    // FlowScope's spellings, and both filter syntaxes.
    let template = DumpTemplate::new("ip.addr == $srcIP && tcp.port == $dstPort").unwrap();
    let headers = hindsight_model::PacketHeaders {
        src_addr: Some(std::net::Ipv4Addr::new(10, 1, 2, 3).into()),
        dst_port: Some(443),
        ..Default::default()
    };
    assert_eq!(
        template.render_text(&headers).unwrap(),
        "ip.addr == 10.1.2.3 && tcp.port == 443"
    );
    // A trigger packet without ports cannot fill `$dport`.
    let template = DumpTemplate::new("host $src and port $dport").unwrap();
    let err = template
        .render_text(&hindsight_model::PacketHeaders {
            src_addr: headers.src_addr,
            ..Default::default()
        })
        .unwrap_err();
    assert!(err.to_string().contains("$dport"), "{err}");
}

#[test]
fn hostile_templates_never_panic_and_name_a_column_inside_the_text() {
    // Every string of up to five characters over an alphabet of the characters
    // that matter to the reader, then random longer ones.
    let alphabet = ['$', 's', 'r', 'c', 'P', 'o', '_', ' ', '(', 'é', '1'];
    let mut texts: Vec<String> = vec![String::new()];
    let mut frontier = texts.clone();
    for _ in 0..5 {
        frontier = frontier
            .iter()
            .flat_map(|t| alphabet.iter().map(move |c| format!("{t}{c}")))
            .collect();
        texts.extend(frontier.iter().cloned());
    }
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..20_000 {
        let mut text = String::new();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        for i in 0..(x % 48) {
            let pick = (x >> (i % 50)) as usize;
            text.push(match pick % 4 {
                0 => alphabet[pick % alphabet.len()],
                1 => ['$', 'd', 'p', 't'][pick % 4],
                2 => char::from_u32(0x20 + (pick % 0x5f) as u32).unwrap(),
                _ => ['€', '\u{0}', '\u{10ffff}', ' '][pick % 4],
            });
        }
        texts.push(text);
    }
    let headers = hindsight_model::PacketHeaders::default();
    for text in &texts {
        match DumpTemplate::new(text) {
            Ok(template) => {
                // A packet with no fields: every placeholder is missing.
                let _ = template.render(&headers);
            }
            Err(TriggerError::UnknownPlaceholder { column, .. }) => {
                assert!(
                    column >= 1 && column <= text.chars().count(),
                    "column {column} of {text:?}"
                );
            }
            Err(error) => {
                let _ = error.to_string();
            }
        }
    }
}
