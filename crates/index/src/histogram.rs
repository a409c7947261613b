//! The timestamp histogram of Diventi (§3.2.2): one counter per fixed-width
//! interval of event time, enough to find an approximate N-cutoff — a time such
//! that at least N events are at or after it and at most N + (one interval's
//! events) are.

use std::collections::BTreeMap;

/// Event counts per interval of event time.
#[derive(Clone, Debug)]
pub struct TimestampHistogram {
    /// Interval width in nanoseconds (at least 1).
    width_ns: i64,
    /// Interval number (`ts.div_euclid(width)`) → events recorded in it.
    counts: BTreeMap<i64, u64>,
}

impl TimestampHistogram {
    /// Returns an empty histogram with intervals `width_ns` wide.
    pub fn new(width_ns: i64) -> Self {
        Self {
            width_ns: width_ns.max(1),
            counts: BTreeMap::new(),
        }
    }

    /// Returns the interval width in nanoseconds.
    pub fn width_ns(&self) -> i64 {
        self.width_ns
    }

    /// Returns the number of the interval holding `ts_ns`.
    pub fn bucket_of(&self, ts_ns: i64) -> i64 {
        ts_ns.div_euclid(self.width_ns)
    }

    /// Returns the first nanosecond of interval `bucket`.
    pub fn bucket_start(&self, bucket: i64) -> i64 {
        bucket.saturating_mul(self.width_ns)
    }

    /// Adds `count` events to interval `bucket`.
    pub fn add(&mut self, bucket: i64, count: u64) {
        *self.counts.entry(bucket).or_default() += count;
    }

    /// Records one event at `ts_ns`.
    pub fn record(&mut self, ts_ns: i64) {
        self.add(self.bucket_of(ts_ns), 1);
    }

    /// Returns the total of all counters.
    pub fn total(&self) -> u64 {
        self.counts.values().sum()
    }

    /// Returns the (bucket, count) pairs, oldest first.
    pub fn buckets(&self) -> impl Iterator<Item = (i64, u64)> + '_ {
        self.counts.iter().map(|(&b, &c)| (b, c))
    }

    /// Returns the approximate N-cutoff: the start of the newest interval such
    /// that the events in it and in all newer intervals number at least `keep`.
    /// `None` if the histogram holds fewer than `keep` events (nothing to expire)
    /// or `keep` is zero (expiration off).
    pub fn cutoff(&self, keep: u64) -> Option<i64> {
        if keep == 0 {
            return None;
        }
        let mut newer = 0u64;
        for (&bucket, &count) in self.counts.iter().rev() {
            newer += count;
            if newer >= keep {
                return Some(self.bucket_start(bucket));
            }
        }
        None
    }

    /// Forgets the intervals that end at or before `cutoff_ns`: their events are
    /// expired and will not count towards a later cutoff. Returns the buckets dropped.
    pub fn drop_before(&mut self, cutoff_ns: i64) -> Vec<i64> {
        let first_kept = cutoff_ns.div_euclid(self.width_ns);
        let kept = self.counts.split_off(&first_kept);
        let dropped = std::mem::replace(&mut self.counts, kept);
        dropped.into_keys().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cutoff_keeps_at_least_n_and_at_most_one_interval_more() {
        let mut histogram = TimestampHistogram::new(10);
        // Ten events in each of the intervals 0..100 (ts 0..=99, one per ns).
        for ts in 0..100 {
            histogram.record(ts);
        }
        assert_eq!(histogram.cutoff(0), None);
        assert_eq!(histogram.cutoff(101), None);
        assert_eq!(histogram.cutoff(100), Some(0));
        // 25 newest are ts 75..=99; rounding down to the interval start keeps 30.
        assert_eq!(histogram.cutoff(25), Some(70));
        assert_eq!(histogram.cutoff(30), Some(70));
        assert_eq!(histogram.cutoff(31), Some(60));
    }

    #[test]
    fn negative_times_and_dropping_old_intervals() {
        let mut histogram = TimestampHistogram::new(10);
        for ts in [-15, -5, 5, 15, 25] {
            histogram.record(ts);
        }
        assert_eq!(histogram.bucket_of(-15), -2);
        assert_eq!(histogram.cutoff(4), Some(-10));
        assert_eq!(histogram.drop_before(10), vec![-2, -1, 0]);
        assert_eq!(histogram.total(), 2);
        assert_eq!(histogram.cutoff(2), Some(10));
    }
}
