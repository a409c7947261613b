//! Capture-ring benchmark (issue 4), side by side in one run:
//! - the ring (FlowScope's QQ): P producers copy packets of 64 B and 1500 B into
//!   it while C cursors read every chunk and every packet in it;
//! - a plain memcpy of the same bytes by P threads into buffers as large as the
//!   ring, back to back (the physical limit of copying packets into memory);
//! - a crossbeam channel of 64-packet batches with the same P and C (batches are
//!   recycled through a second channel, so nothing is allocated per batch).
//!
//! Every cell prints packets/s (total and per producer), Gbit/s of packet bytes,
//! the ring's share of the memcpy rate, and the share of packets the slowest
//! consumer saw (the ring overwrites what a slow consumer has not read; the
//! channel makes producers wait instead). Medians of `--runs`.
//! `cargo run --release -p hindsight-bench --bin ring_bench -- [--seconds S] [--runs N] [--ring-mib M]`

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use clap::Parser;
use crossbeam_channel::bounded;
use hindsight_ring::{Ring, RingConfig, RingError};

/// Packets per batch of the channel peer.
const BATCH: usize = 64;
/// Packets pushed between two looks at the stop flag.
const BURST: u64 = 256;

#[derive(Parser)]
struct Args {
    #[arg(long, default_value_t = 1.0)]
    seconds: f64,
    #[arg(long, default_value_t = 3)]
    runs: usize,
    #[arg(long, default_value_t = 512)]
    ring_mib: usize,
}

/// One measurement: packets moved by the producers in `elapsed`, and the
/// smallest share of them any consumer saw.
#[derive(Clone, Copy)]
struct Sample {
    packets: u64,
    elapsed: Duration,
    seen: f64,
}

impl Sample {
    fn pps(&self) -> f64 {
        self.packets as f64 / self.elapsed.as_secs_f64()
    }
}

fn median_sample(mut samples: Vec<Sample>) -> Sample {
    samples.sort_by(|a, b| a.pps().total_cmp(&b.pps()));
    samples[samples.len() / 2]
}

fn packet(size: usize) -> Vec<u8> {
    (0..size).map(|i| (i * 7 + 3) as u8).collect()
}

/// Runs `work` on `threads` threads until `duration` has passed; each returns
/// the packets it moved. Returns the total and the longest thread's time.
fn run_producers<F>(threads: usize, duration: Duration, work: F) -> (u64, Duration)
where
    F: Fn(usize, &AtomicBool) -> u64 + Sync,
{
    let stop = AtomicBool::new(false);
    thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (work, stop) = (&work, &stop);
                scope.spawn(move || {
                    let start = Instant::now();
                    let packets = work(t, stop);
                    (packets, start.elapsed())
                })
            })
            .collect();
        thread::sleep(duration);
        stop.store(true, Ordering::Relaxed);
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or((0, Duration::ZERO)))
            .fold((0, Duration::ZERO), |(p, e), (tp, te)| (p + tp, e.max(te)))
    })
}

fn memcpy_cell(size: usize, producers: usize, ring_bytes: usize, duration: Duration) -> Sample {
    let data = packet(size);
    // Records as the ring lays them out: 18 bytes of header, 4-byte alignment.
    let record = (18 + size).next_multiple_of(4);
    let (packets, elapsed) = run_producers(producers, duration, |_, stop| {
        let mut region = vec![0u8; ring_bytes / producers];
        let mut at = 0usize;
        let mut count = 0u64;
        while !stop.load(Ordering::Relaxed) {
            for _ in 0..BURST {
                if at + record > region.len() {
                    at = 0;
                }
                region[at + 18..at + 18 + size].copy_from_slice(&data);
                at += record;
            }
            count += BURST;
            black_box(&mut region);
        }
        count
    });
    Sample {
        packets,
        elapsed,
        seen: 1.0,
    }
}

fn ring_cell(
    size: usize,
    producers: usize,
    consumers: usize,
    ring_bytes: usize,
    duration: Duration,
) -> Sample {
    let ring = Ring::new(RingConfig::with_memory(ring_bytes)).unwrap_or_else(|e| {
        eprintln!("ring_bench: {e}");
        std::process::exit(1)
    });
    let data = packet(size);
    let readers: Vec<_> = (0..consumers)
        .map(|_| {
            let mut cursor = ring.cursor_at_newest();
            thread::spawn(move || {
                let mut seen = 0u64;
                let mut touched = 0u64;
                loop {
                    match cursor.next(Duration::from_millis(100)) {
                        Ok(Some(chunk)) => {
                            for packet in chunk.iter() {
                                seen += 1;
                                touched += u64::from(packet.data.first().copied().unwrap_or(0));
                            }
                        }
                        Ok(None) => {}
                        Err(RingError::Closed) | Err(_) => break,
                    }
                }
                black_box(touched);
                seen
            })
        })
        .collect();
    let (packets, elapsed) = run_producers(producers, duration, |t, stop| {
        let mut producer = ring.producer(t as u16);
        let mut ts = 0i64;
        let mut count = 0u64;
        while !stop.load(Ordering::Relaxed) {
            for _ in 0..BURST {
                ts += 1;
                if producer.push(ts, size as u32, &data).is_err() {
                    return count;
                }
            }
            count += BURST;
        }
        count
    });
    ring.close();
    let seen = readers
        .into_iter()
        .map(|r| r.join().unwrap_or(0))
        .min()
        .unwrap_or(0);
    Sample {
        packets,
        elapsed,
        seen: seen as f64 / packets.max(1) as f64,
    }
}

fn channel_cell(size: usize, producers: usize, consumers: usize, duration: Duration) -> Sample {
    let data = packet(size);
    let record = (18 + size).next_multiple_of(4);
    let (full, filled) = bounded::<Vec<u8>>(1024);
    let (empty, recycled) = bounded::<Vec<u8>>(2048);
    let readers: Vec<_> = (0..consumers)
        .map(|_| {
            let (filled, empty) = (filled.clone(), empty.clone());
            thread::spawn(move || {
                let mut seen = 0u64;
                let mut touched = 0u64;
                for batch in filled {
                    for record in batch.chunks_exact(record) {
                        let len =
                            u32::from_le_bytes([record[12], record[13], record[14], record[15]]);
                        touched += u64::from(record[18]) + u64::from(len);
                        seen += 1;
                    }
                    let _ = empty.try_send(batch);
                }
                black_box(touched);
                seen
            })
        })
        .collect();
    drop(filled);
    let (packets, elapsed) = run_producers(producers, duration, |_, stop| {
        let mut ts = 0i64;
        let mut count = 0u64;
        while !stop.load(Ordering::Relaxed) {
            for _ in 0..BURST / BATCH as u64 {
                let mut batch = recycled
                    .try_recv()
                    .unwrap_or_else(|_| Vec::with_capacity(BATCH * record));
                batch.clear();
                for _ in 0..BATCH {
                    ts += 1;
                    let start = batch.len();
                    batch.resize(start + record, 0);
                    batch[start..start + 8].copy_from_slice(&ts.to_le_bytes());
                    batch[start + 8..start + 12].copy_from_slice(&(size as u32).to_le_bytes());
                    batch[start + 12..start + 16].copy_from_slice(&(size as u32).to_le_bytes());
                    batch[start + 18..start + 18 + size].copy_from_slice(&data);
                }
                if full.send(batch).is_err() {
                    return count;
                }
                count += BATCH as u64;
            }
        }
        count
    });
    drop(full);
    let seen: u64 = readers.into_iter().map(|r| r.join().unwrap_or(0)).sum();
    // Channel consumers share the batches: together they see every packet.
    Sample {
        packets,
        elapsed,
        seen: seen as f64 / packets.max(1) as f64,
    }
}

fn main() {
    let args = Args::parse();
    let duration = Duration::from_secs_f64(args.seconds);
    let ring_bytes = args.ring_mib << 20;
    let cores = thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "capture ring benchmark: {cores} cores, ring {} MiB in 2 MiB chunks, {} s per cell, medians of {} runs",
        args.ring_mib, args.seconds, args.runs
    );
    println!("(P producers + C consumers beyond {cores} threads share the cores)");
    for size in [64usize, 1500] {
        println!();
        println!("packets of {size} B");
        println!(
            "{:<28} {:>2} {:>2} {:>10} {:>13} {:>9} {:>9} {:>9}",
            "", "P", "C", "Mpps", "Mpps/producer", "Gbit/s", "% memcpy", "C saw %"
        );
        for producers in [1usize, 2] {
            let memcpy = median_sample(
                (0..args.runs)
                    .map(|_| memcpy_cell(size, producers, ring_bytes, duration))
                    .collect(),
            );
            let line = |name: &str, consumers: usize, s: Sample| {
                let pps = s.pps();
                println!(
                    "{:<28} {:>2} {:>2} {:>10.2} {:>13.2} {:>9.2} {:>8.0}% {:>8.1}%",
                    name,
                    producers,
                    consumers,
                    pps / 1e6,
                    pps / 1e6 / producers as f64,
                    pps * size as f64 * 8.0 / 1e9,
                    100.0 * pps / memcpy.pps(),
                    100.0 * s.seen
                );
            };
            line("memcpy (physical limit)", 0, memcpy);
            for consumers in [1usize, 2] {
                let ring = median_sample(
                    (0..args.runs)
                        .map(|_| ring_cell(size, producers, consumers, ring_bytes, duration))
                        .collect(),
                );
                line("ring (QQ)", consumers, ring);
                let channel = median_sample(
                    (0..args.runs)
                        .map(|_| channel_cell(size, producers, consumers, duration))
                        .collect(),
                );
                line("crossbeam, 64-packet batches", consumers, channel);
            }
        }
    }
}
