//! The capture ring through its public interface: what producers push, cursors
//! read back in order; the oldest chunks are overwritten; pins hold producers back.

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use hindsight_ring::{Ring, RingConfig, RingError};

const SMALL_CHUNK: usize = 64 << 10;

fn ring(chunks: usize) -> Ring {
    Ring::new(RingConfig {
        chunk_bytes: SMALL_CHUNK,
        chunks,
        max_hold: Duration::from_millis(20),
    })
    .unwrap()
}

/// A packet whose bytes and length encode its number.
fn packet(i: u64) -> Vec<u8> {
    let len = 40 + (i % 1400) as usize;
    (0..len).map(|b| (i as usize + b) as u8).collect()
}

/// Every packet read from `cursor` until the ring is closed and drained.
fn drain(cursor: &mut hindsight_ring::Cursor) -> Vec<(i64, u32, u16, Vec<u8>)> {
    let mut out = Vec::new();
    loop {
        match cursor.next(Duration::from_secs(5)) {
            Ok(Some(chunk)) => {
                out.extend(
                    chunk
                        .iter()
                        .map(|p| (p.ts_ns, p.wire_len, p.iface, p.data.to_vec())),
                );
            }
            Ok(None) => panic!("no chunk within 5 s and the ring is not closed"),
            Err(RingError::Closed) => return out,
            Err(other) => panic!("{other}"),
        }
    }
}

#[test]
fn packets_come_back_in_order_across_chunks() {
    let ring = ring(64);
    let mut cursor = ring.cursor_at_oldest();
    let mut producer = ring.producer(3);
    let count = 5_000u64;
    for i in 0..count {
        let data = packet(i);
        producer
            .push(i as i64 * 1000, data.len() as u32 + 10, &data)
            .unwrap();
    }
    drop(producer);
    ring.close();
    let read = drain(&mut cursor);
    assert_eq!(read.len() as u64, count);
    for (i, (ts, wire, iface, data)) in read.into_iter().enumerate() {
        let expected = packet(i as u64);
        assert_eq!(ts, i as i64 * 1000);
        assert_eq!(wire, expected.len() as u32 + 10);
        assert_eq!(iface, 3);
        assert_eq!(data, expected);
    }
    let stats = ring.stats();
    assert_eq!(stats.packets, count);
    assert!(stats.chunks > 1, "{stats:?}");
    assert_eq!(stats.overwritten, 0);
    assert_eq!(cursor.skipped(), 0);
}

#[test]
fn the_oldest_chunks_are_overwritten_and_a_late_cursor_skips_them() {
    let ring = ring(4);
    let mut producer = ring.producer(0);
    let count = 20_000u64;
    for i in 0..count {
        producer.push(i as i64, 1500, &packet(i)).unwrap();
    }
    drop(producer);
    ring.close();
    let stats = ring.stats();
    assert!(stats.chunks > 4, "{stats:?}");
    assert_eq!(stats.overwritten, stats.chunks - 4);
    let mut cursor = ring.cursor_at_oldest();
    let read = drain(&mut cursor);
    assert_eq!(cursor.skipped(), stats.chunks - 4);
    // What is left is the newest packets, contiguous up to the last one.
    let first = read[0].0 as u64;
    assert_eq!(read.len() as u64, count - first);
    for (offset, (ts, _, _, data)) in read.iter().enumerate() {
        assert_eq!(*ts as u64, first + offset as u64);
        assert_eq!(*data, packet(first + offset as u64));
    }
    // Memory stays within the configured bound: four chunks' worth of packets.
    let held: usize = read.iter().map(|p| p.3.len() + 18).sum();
    assert!(held <= 4 * SMALL_CHUNK, "{held}");
}

#[test]
fn a_pin_holds_producers_back_until_it_moves() {
    let ring = ring(3);
    let mut producer = ring.producer(0);
    // Publish two chunks; the producer then holds the third.
    let mut i = 0u64;
    while ring.stats().chunks < 2 {
        producer.push(i as i64, 1000, &packet(i)).unwrap();
        i += 1;
    }
    let mut pin = ring.pin(0);
    let (done, finished) = mpsc::channel();
    let writer = thread::spawn(move || {
        // Two more chunks' worth: the first of them must overwrite chunk 0.
        for j in i..i + 200 {
            producer.push(j as i64, 1000, &packet(j)).unwrap();
        }
        drop(producer);
        done.send(()).unwrap();
    });
    while ring.stats().pin_waits == 0 {
        thread::sleep(Duration::from_millis(1));
    }
    // The producer waits; chunk 0 is intact.
    let mut cursor = ring.cursor_at_oldest();
    let chunk = cursor.next(Duration::from_secs(5)).unwrap().unwrap();
    assert_eq!(chunk.seq(), 0);
    assert_eq!(chunk.iter().next().unwrap().data, packet(0).as_slice());
    drop(chunk);
    assert!(finished.try_recv().is_err());
    assert_eq!(ring.stats().overwritten, 0);
    pin.move_to(1);
    finished.recv_timeout(Duration::from_secs(30)).unwrap();
    writer.join().unwrap();
    assert!(ring.stats().overwritten >= 1);
    drop(pin);
}

#[test]
fn a_slow_producer_publishes_after_the_hold_time() {
    let ring = ring(8);
    let mut cursor = ring.cursor_at_newest();
    let mut producer = ring.producer(0);
    producer.push(1, 60, &packet(1)).unwrap();
    assert!(cursor.next(Duration::ZERO).unwrap().is_none());
    thread::sleep(ring.config().max_hold);
    producer.publish_if_stale();
    let chunk = cursor.next(Duration::from_secs(5)).unwrap().unwrap();
    assert_eq!(chunk.packets(), 1);
    assert_eq!(chunk.time_range(), (1, 1));
}

#[test]
fn many_producers_lose_nothing_when_the_ring_is_large_enough() {
    let ring = ring(256);
    let mut cursor = ring.cursor_at_oldest();
    let per_producer = 4_000u64;
    let handles: Vec<_> = (0..4u16)
        .map(|p| {
            let mut producer = ring.producer(p);
            thread::spawn(move || {
                for i in 0..per_producer {
                    let data = packet(i);
                    producer.push(i as i64, 100, &data).unwrap();
                }
            })
        })
        .collect();
    for handle in handles {
        handle.join().unwrap();
    }
    ring.close();
    let read = drain(&mut cursor);
    assert_eq!(read.len() as u64, 4 * per_producer);
    for p in 0..4u16 {
        // Within one producer, order is kept.
        let mine: Vec<i64> = read.iter().filter(|r| r.2 == p).map(|r| r.0).collect();
        assert_eq!(mine, (0..per_producer as i64).collect::<Vec<_>>());
    }
}

#[test]
fn a_cursor_can_start_at_a_time() {
    let ring = ring(64);
    let mut producer = ring.producer(0);
    for i in 0..10_000u64 {
        producer.push(i as i64 * 10, 1000, &packet(i)).unwrap();
    }
    drop(producer);
    ring.close();
    let mut cursor = ring.cursor_at_time(50_000);
    let read = drain(&mut cursor);
    let first = read[0].0;
    assert!(first <= 50_000, "{first}");
    assert!(read.iter().any(|r| r.0 == 50_000));
    // It starts in the chunk holding that time, not earlier.
    assert!(read.len() < 10_000 - 4_000);
}

#[test]
fn a_cursor_at_a_time_starts_at_an_older_chunk_still_being_filled() {
    let ring = ring(8);
    let (mut slow, mut fast) = (ring.producer(1), ring.producer(2));
    slow.push(10, 60, &packet(10)).unwrap(); // chunk 0, held
    fast.push(20, 60, &packet(20)).unwrap();
    fast.publish(); // chunk 1
    let mut cursor = ring.cursor_at_time(15);
    assert_eq!(cursor.position(), 0);
    slow.push(16, 60, &packet(16)).unwrap();
    drop((slow, fast));
    ring.close();
    let times: Vec<i64> = drain(&mut cursor).iter().map(|r| r.0).collect();
    assert_eq!(times, [10, 16, 20]);
}

#[test]
fn a_time_is_settled_once_every_producer_is_past_it() {
    let ring = ring(8);
    let (mut a, mut b) = (ring.producer(0), ring.producer(0));
    a.push(100, 60, &packet(1)).unwrap();
    a.push(200, 60, &packet(2)).unwrap();
    a.publish();
    // b has published nothing: it may still push anything.
    assert_eq!(ring.settled_through(150), None);
    b.push(50, 60, &packet(3)).unwrap();
    // Caught up, but its held chunk (from 50 on) is not published yet.
    b.caught_up(300);
    assert_eq!(ring.settled_through(150), None);
    assert_eq!(ring.settled_through(49), Some(2));
    b.publish();
    b.caught_up(300);
    // a's last packet was at 200: another may come at 200 still.
    assert_eq!(ring.settled_through(199), Some(2));
    assert_eq!(ring.settled_through(200), None);
    a.caught_up(250);
    assert_eq!(ring.settled_through(250), Some(2));
    // A producer that ends settles everything it could have pushed.
    drop(a);
    assert_eq!(ring.settled_through(300), Some(2));
    assert_eq!(ring.settled_through(301), None);
    drop(b);
    assert_eq!(ring.settled_through(i64::MAX), Some(2));
}

#[test]
fn oversized_packets_are_cut_to_fit_and_counted() {
    let ring = ring(4);
    let mut cursor = ring.cursor_at_oldest();
    let mut producer = ring.producer(0);
    let big = vec![7u8; SMALL_CHUNK * 2];
    producer.push(5, big.len() as u32, &big).unwrap();
    drop(producer);
    ring.close();
    let read = drain(&mut cursor);
    assert_eq!(read.len(), 1);
    assert_eq!(read[0].1, big.len() as u32);
    assert!(read[0].3.len() < SMALL_CHUNK && read[0].3.iter().all(|&b| b == 7));
    assert_eq!(ring.stats().truncated, 1);
}

#[test]
fn a_closed_ring_refuses_producers() {
    let ring = ring(4);
    ring.close();
    let mut producer = ring.producer(0);
    assert_eq!(producer.push(1, 60, &[0; 60]), Err(RingError::Closed));
}

#[test]
fn bad_dimensions_are_refused_with_a_reason() {
    let err = Ring::new(RingConfig {
        chunk_bytes: 1000,
        ..RingConfig::default()
    })
    .unwrap_err();
    assert!(err.to_string().contains("1000 bytes"), "{err}");
    let err = Ring::new(RingConfig {
        chunks: 1,
        ..RingConfig::default()
    })
    .unwrap_err();
    assert_eq!(err, RingError::TooFewChunks(1));
    assert_eq!(RingConfig::with_memory(1 << 30).chunks, 512);
}
