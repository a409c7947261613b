//! Where ingest spends its time: the ingest pipeline taken apart stage by stage on
//! one thread, each stage timed alone on the same replicated capture, side by side
//! with `tcpdump -r X -w /dev/null` (the raw read floor).
//!
//! | stage | what is timed |
//! |---|---|
//! | read | `CaptureReader` over the file, frames touched |
//! | decode | `hindsight_decode::decode` of frames held in memory |
//! | columns | `PacketBatchBuilder` append + finish, from decoded records |
//! | flows | `FlowTable::push` from decoded headers |
//! | flow-encode | `flows` segments from the flow table's records: batches of 8,192 in start order, a segment per hour (as ingest), write + seal |
//! | encode | `SegmentWriter` write + seal of the built batches (Parquet, zstd, postings) |
//! | ingest | `Ingestor::ingest_file`, all of it (two threads; CPU time reported) |
//!
//! Run with `cargo run --release -p hindsight-bench --bin ingest_stages -- [--packets N] [--runs N]`.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use clap::Parser;
use hindsight_bench::{
    cpu_seconds, default_source, median, replicate, run_quiet, segment_column_bytes,
};
use hindsight_capture::CaptureReader;
use hindsight_flow::{FlowTable, FlowTableConfig};
use hindsight_ingest::{IngestOptions, Ingestor};
use hindsight_model::{FlowRecord, LinkType, PacketHeaders, PacketRecord, SegmentId};
use hindsight_store::arrow::array::RecordBatch;
use hindsight_store::flows::FlowBatchBuilder;
use hindsight_store::schema::PacketBatchBuilder;
use hindsight_store::{SealedSegment, SegmentOptions, SegmentWriter, Table};

#[derive(Parser)]
struct Args {
    #[arg(long, default_value_t = 5_000_000)]
    packets: u64,
    #[arg(long, default_value_t = 3)]
    runs: usize,
    #[arg(long, default_value_os_t = std::env::temp_dir().join("hindsight-bench"))]
    work: PathBuf,
    /// Stages to run (all if none): tcpdump, read, decode, columns, flows,
    /// flow-encode, encode, ingest.
    #[arg(long, value_delimiter = ',')]
    stages: Vec<String>,
    /// Segment options of the encode and ingest stages (default: the archive's).
    #[arg(long)]
    zstd_level: Option<i32>,
    #[arg(long)]
    data_zstd_level: Option<i32>,
    #[arg(long)]
    encode_threads: Option<usize>,
    #[arg(long)]
    page_rows: Option<usize>,
}

impl Args {
    /// The segment options the flags ask for.
    fn segment(&self) -> SegmentOptions {
        let default = SegmentOptions::default();
        SegmentOptions {
            zstd_level: self.zstd_level.unwrap_or(default.zstd_level),
            data_zstd_level: self.data_zstd_level.unwrap_or(default.data_zstd_level),
            encode_threads: self.encode_threads.unwrap_or(default.encode_threads),
            page_rows: self.page_rows.unwrap_or(default.page_rows),
            ..default
        }
    }
}

/// One frame held in memory.
struct Held {
    ts_nanos: i64,
    wire_len: u32,
    link_type: LinkType,
    data: Vec<u8>,
}

/// Times `runs` runs of `f`, returning the median wall time and the median CPU time.
fn time<T>(runs: usize, mut f: impl FnMut() -> T) -> (Duration, Duration) {
    let mut wall = Vec::new();
    let mut cpu = Vec::new();
    for _ in 0..runs {
        let cpu_before = cpu_seconds();
        let started = Instant::now();
        std::hint::black_box(f());
        wall.push(started.elapsed());
        cpu.push(Duration::from_secs_f64(cpu_seconds() - cpu_before));
    }
    (median(wall), median(cpu))
}

/// The encode stage's CPU time by column (the encoding threads' own time, last
/// run), costliest first, printed after the stage table.
fn print_column_cpu(table: Table, column_cpu: &[Duration], packets: u64) {
    let schema = table.schema();
    let mut columns: Vec<(&str, Duration)> = schema
        .fields()
        .iter()
        .map(|field| field.name().as_str())
        .zip(column_cpu.iter().copied())
        .collect();
    columns.sort_by_key(|(_, cpu)| std::cmp::Reverse(*cpu));
    let total: Duration = column_cpu.iter().sum();
    println!();
    println!(
        "encode CPU by column (last run; {:.3} s in all)",
        total.as_secs_f64()
    );
    println!("| column | CPU s | ns/row | share |");
    println!("|---|---:|---:|---:|");
    for (name, cpu) in columns {
        println!(
            "| {name} | {:.3} | {:.1} | {:.1}% |",
            cpu.as_secs_f64(),
            cpu.as_nanos() as f64 / packets.max(1) as f64,
            100.0 * cpu.as_secs_f64() / total.as_secs_f64().max(f64::MIN_POSITIVE)
        );
    }
    println!();
}

/// The encoding CPU time of each column of `table`, summed over `sealed`.
fn column_cpu(table: Table, sealed: &[SealedSegment]) -> Vec<Duration> {
    let mut sum = vec![Duration::ZERO; table.schema().fields().len()];
    for segment in sealed {
        for (total, cpu) in sum.iter_mut().zip(&segment.column_cpu) {
            *total += *cpu;
        }
    }
    sum
}

/// The `flow-encode` stage: the flow table's records of the capture written as
/// ingest writes them (batches of `FLOW_BATCH` in start order, a segment per
/// partition), timed with the per-column CPU of the last run.
fn flow_encode(args: &Args, held: &[Held], decoded: &[PacketHeaders], dir: &std::path::Path) {
    const FLOW_BATCH: usize = 8192;
    let mut table = FlowTable::new(FlowTableConfig::default());
    let mut records = Vec::new();
    for (frame, headers) in held.iter().zip(decoded) {
        table.push(frame.ts_nanos, headers, frame.wire_len, &mut records);
    }
    table.flush(&mut records);
    let partition = IngestOptions::default().partition_nanos;
    let options = &args.segment();
    let mut column_cpu = Vec::new();
    let (wall, cpu) = time(args.runs, || {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).expect("create segment dir");
        let mut builder = FlowBatchBuilder::new();
        let (mut id, mut open_partition) = (0, None);
        let mut writer: Option<SegmentWriter> = None;
        let mut sealed = Vec::new();
        for chunk in records.chunks(FLOW_BATCH) {
            let mut order: Vec<&FlowRecord> = chunk.iter().collect();
            order.sort_by_key(|r| r.first_ns);
            let at = order.first().map(|r| r.first_ns.div_euclid(partition));
            if at != open_partition {
                sealed.extend(writer.take().map(|w| w.seal().expect("seal")));
                open_partition = at;
            }
            for record in order {
                builder.append(record);
            }
            let open = writer.get_or_insert_with(|| {
                id += 1;
                SegmentWriter::create(dir, Table::Flows, SegmentId(id), options)
                    .expect("create segment")
            });
            open.write(&builder.finish()).expect("write batch");
        }
        sealed.extend(writer.take().map(|w| w.seal().expect("seal")));
        column_cpu = self::column_cpu(Table::Flows, &sealed);
        sealed.len()
    });
    println!(
        "| flow-encode ({} records) | {:.3} | {:.2} | {:.0} records/s | {:.0} ns/record |",
        records.len(),
        wall.as_secs_f64(),
        cpu.as_secs_f64(),
        records.len() as f64 / cpu.as_secs_f64().max(0.01),
        cpu.as_nanos() as f64 / records.len().max(1) as f64
    );
    print_column_cpu(Table::Flows, &column_cpu, records.len() as u64);
}

fn main() {
    let args = Args::parse();
    std::fs::create_dir_all(&args.work).expect("create work dir");
    let (capture, packets, _) = replicate(&default_source(), args.packets, &args.work);
    println!(
        "# ingest stages, {packets} packets, medians of {} runs",
        args.runs
    );
    println!("| stage | wall s | CPU s | packets/s (CPU) | ns/packet (CPU) |");
    println!("|---|---:|---:|---:|---:|");
    let wanted = |stage: &str| args.stages.is_empty() || args.stages.iter().any(|s| s == stage);
    let row = |stage: &str, (wall, cpu): (Duration, Duration)| {
        // CPU time comes in 10 ms ticks.
        let cpu_s = cpu.as_secs_f64().max(0.01);
        println!(
            "| {stage} | {:.3} | {:.2} | {:.0} | {:.0} |",
            wall.as_secs_f64(),
            cpu.as_secs_f64(),
            packets as f64 / cpu_s,
            cpu_s * 1e9 / packets as f64
        );
    };

    // A child's CPU time is not this process's: tcpdump is single-threaded and
    // reads from the page cache, so its wall time stands for its CPU time.
    if wanted("tcpdump") {
        let (tcpdump, _) = time(args.runs, || {
            run_quiet(
                Command::new("tcpdump")
                    .arg("-r")
                    .arg(&capture)
                    .args(["-w", "/dev/null"]),
            );
        });
        row(
            "tcpdump -r X -w /dev/null (wall as CPU)",
            (tcpdump, tcpdump),
        );
    }

    if wanted("read") {
        row(
            "read",
            time(args.runs, || {
                let mut reader = CaptureReader::open(&capture).expect("open capture");
                let mut bytes = 0u64;
                while let Some(frame) = reader.next_frame() {
                    bytes += frame.expect("read capture").data.len() as u64;
                }
                bytes
            }),
        );
    }

    // The in-memory stages work on frames held in memory, loaded only for them.
    let in_memory = ["decode", "columns", "flows", "flow-encode", "encode"]
        .iter()
        .any(|stage| wanted(stage));
    let mut held = Vec::with_capacity(if in_memory { packets as usize } else { 0 });
    let mut reader = CaptureReader::open(&capture).expect("open capture");
    while let Some(frame) = reader.next_frame().filter(|_| in_memory) {
        let frame = frame.expect("read capture");
        held.push(Held {
            ts_nanos: frame.ts_nanos,
            wire_len: frame.wire_len,
            link_type: frame.link_type,
            data: frame.data.to_vec(),
        });
    }

    if wanted("decode") {
        row(
            "decode",
            time(args.runs, || {
                held.iter()
                    .map(|f| hindsight_decode::decode(f.link_type, &f.data).status as u64)
                    .sum::<u64>()
            }),
        );
    }
    let decoded: Vec<PacketHeaders> = held
        .iter()
        .map(|f| hindsight_decode::decode(f.link_type, &f.data))
        .collect();

    let options = args.segment();
    let snaplen = IngestOptions::default().snaplen as usize;
    let build = |keep: bool| {
        let mut builder = PacketBatchBuilder::with_capacity(
            options.row_group_rows,
            options.row_group_rows * snaplen,
        );
        let mut batches = Vec::new();
        for (frame, headers) in held.iter().zip(&decoded) {
            let record = PacketRecord {
                ts_nanos: frame.ts_nanos,
                wire_len: frame.wire_len,
                cap_len: frame.data.len() as u32,
                link_type: frame.link_type,
                iface: 0,
                headers: *headers,
            };
            builder.append(&record, &frame.data[..frame.data.len().min(snaplen)]);
            if builder.len() >= options.row_group_rows {
                let batch = builder.finish();
                // As in ingest, where the sink frees a batch once written.
                if keep {
                    batches.push(batch);
                }
            }
        }
        if !builder.is_empty() {
            batches.push(builder.finish());
        }
        batches
    };
    if wanted("columns") {
        row("columns", time(args.runs, || build(false).len()));
    }
    let batches: Vec<RecordBatch> = if in_memory { build(true) } else { Vec::new() };

    if wanted("flows") {
        row(
            "flows",
            time(args.runs, || {
                let mut table = FlowTable::new(FlowTableConfig::default());
                let mut out = Vec::new();
                for (frame, headers) in held.iter().zip(&decoded) {
                    table.push(frame.ts_nanos, headers, frame.wire_len, &mut out);
                    out.clear();
                }
                table.flush(&mut out);
                out.len()
            }),
        );
    }

    let segments = args.work.join("stages-segments");
    if wanted("flow-encode") {
        flow_encode(&args, &held, &decoded, &segments);
    }
    let segment_rows = IngestOptions::default().segment_max_rows as usize;
    if wanted("encode") {
        // Encoding CPU time per column, of the last run.
        let mut column_cpu = Vec::new();
        row(
            "encode",
            time(args.runs, || {
                let _ = std::fs::remove_dir_all(&segments);
                std::fs::create_dir_all(&segments).expect("create segment dir");
                let mut id = 0;
                let mut writer: Option<SegmentWriter> = None;
                let mut sealed = Vec::new();
                for batch in &batches {
                    let open = writer.get_or_insert_with(|| {
                        id += 1;
                        SegmentWriter::create(&segments, Table::Packets, SegmentId(id), &options)
                            .expect("create segment")
                    });
                    open.write(batch).expect("write batch");
                    if open.rows() as usize >= segment_rows {
                        sealed.push(writer.take().expect("open").seal().expect("seal"));
                    }
                }
                if let Some(open) = writer {
                    sealed.push(open.seal().expect("seal"));
                }
                column_cpu = self::column_cpu(Table::Packets, &sealed);
                sealed.iter().map(|segment| segment.size_bytes).sum::<u64>()
            }),
        );
        let (data, headers, _) = segment_column_bytes(&segments);
        println!(
            "| (encode output: header columns {:.2} B/packet, snap bytes {:.2} B/packet) | | | | |",
            headers as f64 / packets as f64,
            data as f64 / packets as f64
        );
        print_column_cpu(Table::Packets, &column_cpu, packets);
    }
    drop(batches);
    drop(decoded);
    drop(held);

    let archive = args.work.join("stages-archive");
    if wanted("ingest") {
        row(
            "ingest (all, two threads)",
            time(args.runs, || {
                let _ = std::fs::remove_dir_all(&archive);
                let (mut ingestor, _) =
                    Ingestor::open(&archive, IngestOptions::default()).expect("open archive");
                let outcome = ingestor.ingest_file(&capture, &mut |_| {}).expect("ingest");
                assert!(outcome.error.is_none(), "{:?}", outcome.error);
                ingestor.finish().expect("finish")
            }),
        );
    }
}
