//! The expiration bound of Diventi (Theorem 1), checked on the real RocksDB index:
//! after every phase of an ingest of M ≫ N events, with out-of-order and late
//! timestamps and a restart in the middle, the index holds every one of the N
//! newest events and no more than N + k, where k = e_hist + I_update + I_compact
//! is computed from the configured histogram granularity, cutoff interval and
//! compaction interval.

use std::collections::BTreeSet;
use std::time::Duration;

use hindsight_index::{ConnectionIndex, Expiry, ExpiryClock};
use hindsight_model::{Addr16, FlowRecord, FlowSource, FlowState, ip_proto};

const MS: i64 = 1_000_000;
/// Events per simulated second, of event time and of ingest alike.
const RATE: u64 = 1_000;
const N: u64 = 20_000;
const M: u64 = 200_000;
const BATCH: u64 = 100;
const CHECK_EVERY: u64 = 2_000;

/// A small deterministic generator (xorshift), so the test is reproducible.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn record(ts_ns: i64, n: u64) -> FlowRecord {
    FlowRecord {
        first_ns: ts_ns,
        last_ns: ts_ns + 1_500 * MS,
        src: Addr16::from_v4_bytes([10, 0, (n >> 8) as u8 & 0x3f, n as u8]),
        dst: Addr16::from_v4_bytes([192, 0, 2, (n % 7) as u8]),
        src_port: 1024 + (n % 50_000) as u16,
        dst_port: 443,
        proto: ip_proto::TCP,
        packets_out: n % 97,
        bytes_out: n * 13,
        packets_in: 3,
        bytes_in: 1_000,
        tcp_flags: 0x1b,
        state: FlowState::SF,
        source: FlowSource::Zeek,
        ..FlowRecord::default()
    }
}

/// The events in arrival order: event i is stamped base + i ms, arrivals are
/// shuffled within blocks of 500, and every 50th arrival is a late event stamped
/// up to 60 s in the past (offset by half a millisecond so stamps stay unique).
fn events() -> Vec<i64> {
    let base = 1_700_000_000_000 * MS;
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut times: Vec<i64> = (0..M as i64).map(|i| base + i * MS).collect();
    for block in times.chunks_mut(500) {
        for i in (1..block.len()).rev() {
            let j = (rng.next() % (i as u64 + 1)) as usize;
            block.swap(i, j);
        }
    }
    for (i, ts) in times.iter_mut().enumerate() {
        if i % 50 == 49 {
            *ts -= (rng.next() % 60_000) as i64 * MS + MS / 2;
        }
    }
    times
}

#[test]
fn index_keeps_the_n_newest_and_never_more_than_n_plus_k() {
    let expiry = Expiry {
        keep_events: N,
        histogram_granularity: Duration::from_secs(1),
        cutoff_interval: Duration::from_secs(2),
        compaction_interval: Duration::from_secs(10),
    };
    let times = events();

    // e_hist is the largest number of events in one histogram interval; with the
    // late events that is a little above RATE × granularity. The bound uses the
    // larger of the two rates, as the paper's §4.2 does.
    let width = expiry.histogram_granularity.as_nanos() as i64;
    let mut per_interval = std::collections::HashMap::<i64, u64>::new();
    for ts in &times {
        *per_interval.entry(ts.div_euclid(width)).or_default() += 1;
    }
    let densest = *per_interval.values().max().unwrap_or(&0);
    let max_rate = (densest as f64 / expiry.histogram_granularity.as_secs_f64()).max(RATE as f64);
    let k = expiry.excess_bound(max_rate);
    assert!(
        k < N,
        "k = {k} must stay below N = {N} for the test to mean anything"
    );

    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("connections");
    let mut index = ConnectionIndex::open(&path, expiry).expect("open index");
    let mut clock = ExpiryClock::new(expiry);
    let mut inserted = BTreeSet::new();
    let (mut checks, mut cutoffs, mut compactions) = (0, 0, 0);
    let mut most_held = 0;

    for (batch_no, batch) in times.chunks(BATCH as usize).enumerate() {
        let first = batch_no as u64 * BATCH;
        let records: Vec<FlowRecord> = batch
            .iter()
            .enumerate()
            .map(|(i, &ts)| record(ts, first + i as u64))
            .collect();
        index.insert(&records).expect("insert");
        inserted.extend(batch.iter().copied());

        // Simulated ingest time: RATE events per second.
        let now = Duration::from_secs_f64((first + BATCH) as f64 / RATE as f64);
        let due = clock.tick(now);
        if due.cutoff {
            index.update_cutoff().expect("update cutoff");
            cutoffs += 1;
        }
        if due.compaction {
            index.compact().expect("compact");
            compactions += 1;
        }

        // A restart half way: the histogram and the cutoff must come back.
        if first + BATCH == M / 2 {
            let cutoff_before = index.cutoff();
            drop(index);
            index = ConnectionIndex::open(&path, expiry).expect("reopen index");
            assert_eq!(index.cutoff(), cutoff_before, "cutoff lost on restart");
        }

        if (first + BATCH).is_multiple_of(CHECK_EVERY) {
            checks += 1;
            let held: BTreeSet<i64> = index
                .event_times()
                .expect("read index")
                .into_iter()
                .collect();
            let (events, entries) = index.count().expect("count");
            most_held = most_held.max(events);
            assert!(
                events <= N + k,
                "after {} events the index holds {events} > N + k = {}",
                first + BATCH,
                N + k
            );
            assert!(entries <= 2 * (N + k), "{entries} entries > 2 (N + k)");
            let missing = inserted
                .iter()
                .rev()
                .take(N as usize)
                .filter(|ts| !held.contains(ts))
                .count();
            assert_eq!(
                missing,
                0,
                "after {} events, {missing} of the {N} newest are gone",
                first + BATCH
            );
        }
    }
    assert_eq!(checks, M / CHECK_EVERY);
    assert!(
        cutoffs >= 90 && compactions >= 18,
        "{cutoffs} cutoff updates, {compactions} compactions"
    );
    // Expiration really happened: far fewer than M events are left.
    assert!(
        most_held <= N + k && most_held >= N,
        "most held {most_held}"
    );
    let (events, _) = index.count().expect("count");
    assert!(events < M / 4, "{events} events left of {M}");
}

#[test]
fn expiration_off_keeps_everything() {
    let dir = tempfile::tempdir().expect("tempdir");
    let index = ConnectionIndex::open(dir.path(), Expiry::OFF).expect("open index");
    let records: Vec<FlowRecord> = (0..5_000).map(|i| record(i * MS, i as u64)).collect();
    index.insert(&records).expect("insert");
    assert_eq!(index.update_cutoff().expect("cutoff"), None);
    index.compact().expect("compact");
    assert_eq!(index.count().expect("count"), (5_000, 10_000));
}
