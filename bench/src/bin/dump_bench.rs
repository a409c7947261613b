//! Dump-writer benchmark (issue 4), side by side in one run, on lan-hour's packets
//! replicated `--copies` times:
//! - `write_pcap`, the dump writer: blocks reserved with fallocate, 1 MiB
//!   writes, fsync, rename;
//! - the same without the reservation (the writer dumps used before);
//! - `dd bs=1M conv=fsync` of a pcap of the same bytes: the disk's durable
//!   sequential write rate, the limit for any writer.
//!
//! Then a whole dump from the ring (`trigger::dump`: cursor, pin, filter, sort,
//! write) of the same packets, for the empty filter (every packet written) and
//! for a rare host (every packet decoded, few written).
//! Medians of `--runs`. `cargo run --release -p hindsight-bench --bin dump_bench -- [--copies N] [--runs N]`

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use clap::Parser;
use hindsight_bench::median;
use hindsight_capture::{CaptureReader, PcapWriter, TimestampPrecision};
use hindsight_model::LinkType;
use hindsight_query::Filter;
use hindsight_ring::{Ring, RingConfig};
use hindsight_trigger::{DumpLimits, DumpRequest, dump, write_pcap};

#[derive(Parser)]
struct Args {
    #[arg(long, default_value_t = 16, value_parser = hindsight_bench::count_from(1))]
    copies: usize,
    #[arg(long, default_value_t = 5, value_parser = hindsight_bench::count_from(1))]
    runs: usize,
}

fn buffered(path: &Path, link_type: LinkType, packets: &[(i64, u32, &[u8])]) {
    let temp = path.with_extension("part");
    let file = File::create(&temp).unwrap();
    let mut writer = PcapWriter::new(
        BufWriter::with_capacity(1 << 20, file),
        link_type,
        65_535,
        TimestampPrecision::Nanos,
    )
    .unwrap();
    for &(ts, wire_len, data) in packets {
        writer.write_frame(ts, wire_len, data).unwrap();
    }
    let mut out = writer.into_inner().unwrap();
    out.flush().unwrap();
    out.into_inner().unwrap().sync_all().unwrap();
    std::fs::rename(&temp, path).unwrap();
}

fn main() {
    let Args { copies, runs } = Args::parse();
    let source = hindsight_bench::default_source();
    let mut reader = CaptureReader::open(&source).expect("open lan-hour");
    let mut frames: Vec<(i64, u32, Vec<u8>, LinkType)> = Vec::new();
    while let Some(frame) = reader.next_frame() {
        let frame = frame.expect("read lan-hour");
        frames.push((
            frame.ts_nanos,
            frame.wire_len,
            frame.data.to_vec(),
            frame.link_type,
        ));
    }
    let link_type = frames[0].3;
    let span = frames.last().unwrap().0 - frames[0].0 + 1;
    let mut packets: Vec<(i64, u32, &[u8])> = Vec::with_capacity(frames.len() * copies);
    for copy in 0..copies as i64 {
        for (ts, wire_len, data, _) in &frames {
            packets.push((ts + copy * span, *wire_len, data.as_slice()));
        }
    }
    let bytes = 24 + packets.iter().map(|p| 16 + p.2.len()).sum::<usize>();
    let dir = tempfile::tempdir_in(std::env::temp_dir()).unwrap();
    println!(
        "{} packets, {:.1} MB of pcap, written in {}; medians of {runs} runs\n",
        packets.len(),
        bytes as f64 / 1e6,
        dir.path().display()
    );

    // The writers, on the same packets.
    let out = dir.path().join("out.pcap");
    let mut mapped_s = Vec::new();
    let mut buffered_s = Vec::new();
    let mut dd_s = Vec::new();
    let reference = dir.path().join("reference.pcap");
    write_pcap(&reference, link_type, &packets).unwrap();
    for _ in 0..runs {
        let started = Instant::now();
        write_pcap(&out, link_type, &packets).unwrap();
        mapped_s.push(started.elapsed());
        std::fs::remove_file(&out).unwrap();

        let started = Instant::now();
        buffered(&out, link_type, &packets);
        buffered_s.push(started.elapsed());
        std::fs::remove_file(&out).unwrap();

        let started = Instant::now();
        let status = Command::new("dd")
            .arg(format!("if={}", reference.display()))
            .arg(format!("of={}", out.display()))
            .args(["bs=1M", "conv=fsync", "status=none"])
            .status()
            .expect("run dd");
        assert!(status.success());
        dd_s.push(started.elapsed());
        std::fs::remove_file(&out).unwrap();
    }
    println!(
        "{:<46} {:>10} {:>10} {:>10}",
        "writer", "seconds", "MB/s", "Mpackets/s"
    );
    for (name, seconds) in [
        (
            "write_pcap (fallocate + 1 MiB writes + fsync)",
            median(mapped_s),
        ),
        ("1 MiB writes + fsync, no fallocate", median(buffered_s)),
        ("dd bs=1M conv=fsync (same bytes)", median(dd_s)),
    ] {
        let seconds = seconds.as_secs_f64();
        println!(
            "{name:<46} {seconds:>10.3} {:>10.0} {:>10.2}",
            bytes as f64 / seconds / 1e6,
            packets.len() as f64 / seconds / 1e6
        );
    }

    // Whole dumps from a ring holding the packets.
    let ring = Ring::new(RingConfig::with_memory((bytes * 2).next_power_of_two())).unwrap();
    {
        let mut producer = ring.producer(0);
        for &(ts, wire_len, data) in &packets {
            producer.push(ts, wire_len, data).unwrap();
        }
    }
    let first = packets[0].0;
    let last = packets.last().unwrap().0;
    println!(
        "\n{:<46} {:>10} {:>10} {:>10}",
        "dump from the ring", "seconds", "packets", "Mscanned/s"
    );
    for (name, filter) in [
        ("every packet (empty filter)", ""),
        ("host 172.30.100.1", "host 172.30.100.1"),
    ] {
        let mut seconds = Vec::new();
        let mut written = 0;
        for _ in 0..runs {
            let request = DumpRequest {
                at_ns: first,
                before: Duration::ZERO,
                after: Duration::from_nanos(u64::try_from(last - first).unwrap()),
                filter: Filter::parse(filter).unwrap(),
                link_type,
            };
            let limits = DumpLimits {
                max_bytes: u64::MAX,
                max_wait: Duration::ZERO,
            };
            let started = Instant::now();
            let report = dump(&ring, &request, &out, limits).unwrap();
            seconds.push(started.elapsed());
            written = report.packets;
            std::fs::remove_file(&out).unwrap();
        }
        let seconds = median(seconds).as_secs_f64();
        println!(
            "{name:<46} {seconds:>10.3} {written:>10} {:>10.2}",
            packets.len() as f64 / seconds / 1e6
        );
    }
}
