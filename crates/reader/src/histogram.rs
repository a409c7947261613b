//! Packets matching a filter per time bucket (the API's histogram, the web
//! UI's timeline), counted on one of two paths:
//! - **columnar**: the filter as a DataFusion expression
//!   ([`hindsight_sql::ColumnarFilter`]) in a grouped count over `packets`,
//!   decoding `ts` and the columns the filter names a batch at a time, as SQL
//!   does, or evaluated on the segments' summaries where they answer;
//! - **rows**: the packet search, record by record, for filters the columns
//!   cannot answer (packet bytes, payload, application names, Community IDs)
//!   and for plans small enough that opening a SQL session costs more than
//!   reading them (covering postings, a few granules).

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use hindsight_query::search::{SearchPlan, SearchRequest};
use hindsight_sql::{ColumnarFilter, SqlError, TimeBuckets, TimeCounter};
use hindsight_store::{SegmentReader, TimeRange};

use crate::{LimitExceeded, Limits, ReaderError, Snapshot};

/// A plan that decodes at most this many rows is counted on the row path
/// (with `HistogramMethod::Auto`): its answer takes about a millisecond there,
/// less than a SQL session's start.
pub const ROWS_PATH_MAX_ROWS: u64 = 1 << 16;

/// How a histogram is counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HistogramMethod {
    /// Columnar where the filter allows it and the plan is larger than
    /// [`ROWS_PATH_MAX_ROWS`], rows otherwise.
    Auto,
    /// The grouped count over the columns (rows where the filter reads what
    /// the columns do not hold).
    Columnar,
    /// The packet search, record by record.
    Rows,
}

/// Packets per time bucket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Histogram {
    /// Where the first bucket starts.
    pub start_ns: i64,
    /// Where the window ends (exclusive).
    pub end_ns: i64,
    /// Each bucket's width.
    pub bucket_ns: i64,
    /// The matching packets of each bucket.
    pub counts: Vec<u64>,
    /// Their sum.
    pub total: u64,
    /// The path that counted them: `columnar` or `rows`.
    pub method: &'static str,
    /// Segments the columnar path counted from their summaries (their
    /// packets by minute and header fields) instead of their rows.
    pub summarised: usize,
    /// What the answer went without: damaged catalog lines, segments skipped.
    pub incomplete: Vec<String>,
}

impl Snapshot {
    /// The packets matching `request` (its filter and window) in `buckets`
    /// equal buckets. Without a `since`, the window starts at the first packet
    /// of the segments the filter can match (or of the unsealed tail); without
    /// an `until`, it ends after their last. `plan` is `request`'s, if made.
    pub fn histogram(
        &self,
        request: &SearchRequest,
        plan: Option<SearchPlan>,
        buckets: usize,
        limits: &Limits,
        method: HistogramMethod,
    ) -> Result<Histogram, ReaderError> {
        let plan = match plan {
            Some(plan) => plan,
            None => self.plan(request)?,
        };
        let time = request.time;
        let unsealed = self.unsealed_span();
        let first = plan
            .segments
            .iter()
            .map(|s| s.min_ts_nanos)
            .chain(unsealed.map(|u| u.0))
            .min();
        let last = plan
            .segments
            .iter()
            .map(|s| s.max_ts_nanos)
            .chain(unsealed.map(|u| u.1))
            .max();
        let start = if time.start_nanos != TimeRange::ALL.start_nanos {
            time.start_nanos
        } else {
            first.unwrap_or(0)
        };
        let end = if time.end_nanos != TimeRange::ALL.end_nanos {
            time.end_nanos
        } else {
            last.map_or(start, |last| last.saturating_add(1))
        };
        let buckets = timeline_buckets(start, end, buckets);
        let width = buckets.width_ns;
        let columnar = ColumnarFilter::of(&request.filter).filter(|_| match method {
            HistogramMethod::Auto => self.plan_rows(request, &plan) > ROWS_PATH_MAX_ROWS,
            HistogramMethod::Columnar => true,
            HistogramMethod::Rows => false,
        });
        let mut summarised = 0;
        let (counts, method, incomplete) = match columnar {
            // Copies in the object store: DataFusion reads them.
            Some(filter) if !plan.remote.is_empty() => {
                let session = self.sql(limits)?;
                let counts = session.count_by_time(&filter, time, buckets, &limits.statement())?;
                (counts, "columnar", session.skipped())
            }
            Some(filter) => {
                let (counts, skipped, by_summary) =
                    self.count_segments(&filter, &plan, time, buckets, limits)?;
                summarised = by_summary;
                // Segments the plan left out (files gone), then those that
                // failed as they were read.
                let mut incomplete = self.catalog_damage();
                incomplete.extend(plan.stats.skipped.iter().map(ToString::to_string));
                incomplete.extend(skipped);
                (counts, "columnar", incomplete)
            }
            None => {
                let mut counts = vec![0u64; buckets.count];
                let stats = self.search_with(
                    request,
                    Some(plan),
                    limits,
                    &mut |_| {},
                    &mut |record, _| {
                        let slot = record.ts_nanos.saturating_sub(buckets.start_ns) / width;
                        if let Some(count) =
                            usize::try_from(slot).ok().and_then(|s| counts.get_mut(s))
                        {
                            *count += 1;
                        }
                        Ok(true)
                    },
                )?;
                let mut incomplete = self.catalog_damage();
                incomplete.extend(stats.skipped.iter().map(ToString::to_string));
                (counts, "rows", incomplete)
            }
        };
        Ok(Histogram {
            start_ns: buckets.start_ns,
            end_ns: end,
            bucket_ns: width,
            total: counts.iter().sum(),
            counts,
            method,
            summarised,
            incomplete,
        })
    }
}

const SECOND_NS: i64 = 1_000_000_000;
const DAY_NS: i64 = 86_400 * SECOND_NS;

/// Bucket widths of a second to a day a timeline may take (Kibana's and
/// Arkime's): whole minutes from a minute up, so that segment summaries
/// answer.
const TIMELINE_WIDTHS_S: [i64; 17] = [
    1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1_800, 3_600, 7_200, 10_800, 21_600, 43_200,
];

/// The narrowest timeline width of at least `wanted` ns: 1, 2 or 5 times a
/// power of ten below a second, [`TIMELINE_WIDTHS_S`] up to a day, whole
/// days above.
fn timeline_width(wanted: i64) -> i64 {
    let wanted = wanted.max(1);
    if wanted <= SECOND_NS {
        let mut power = 1;
        loop {
            for step in [1, 2, 5] {
                if step * power >= wanted {
                    return step * power;
                }
            }
            power *= 10;
        }
    }
    TIMELINE_WIDTHS_S
        .iter()
        .map(|s| s * SECOND_NS)
        .find(|&width| width >= wanted)
        .unwrap_or_else(|| {
            (wanted / DAY_NS + i64::from(wanted % DAY_NS != 0)).saturating_mul(DAY_NS)
        })
}

/// At most `count` buckets covering `start..end`, each of a timeline width
/// and starting at a multiple of it from the epoch (so the first may start
/// before `start`): the narrowest such width.
pub fn timeline_buckets(start: i64, end: i64, count: usize) -> TimeBuckets {
    let count = count.max(1) as i64;
    let span = end.saturating_sub(start).max(1);
    let mut width = timeline_width(span / count + i64::from(span % count != 0));
    loop {
        let first = start.div_euclid(width).saturating_mul(width);
        let needed = (i128::from(end) - i128::from(first)).max(1);
        let buckets = needed.div_euclid(i128::from(width))
            + i128::from(needed.rem_euclid(i128::from(width)) != 0);
        if buckets <= i128::from(count) || width == i64::MAX {
            return TimeBuckets {
                start_ns: first,
                width_ns: width,
                count: usize::try_from(buckets.max(1)).unwrap_or(1),
            };
        }
        width = timeline_width(width.saturating_add(1));
    }
}

/// Threads counting segments at once: the machine's two cores.
const COUNT_THREADS: usize = 2;

impl Snapshot {
    /// The columnar count of `plan`'s segments and of the unsealed tail: the
    /// segments shared among [`COUNT_THREADS`] threads, each with its own
    /// counters. Returns the counts and the segments skipped (gone or
    /// damaged), one line each.
    fn count_segments(
        &self,
        filter: &ColumnarFilter,
        plan: &SearchPlan,
        time: TimeRange,
        buckets: TimeBuckets,
        limits: &Limits,
    ) -> Result<(Vec<u64>, Vec<String>, usize), ReaderError> {
        let started = Instant::now();
        let exceeded = || -> Option<LimitExceeded> {
            if limits.cancel.is_cancelled() {
                return Some(LimitExceeded::Cancelled);
            }
            limits
                .timeout
                .filter(|timeout| started.elapsed() > *timeout)
                .map(LimitExceeded::Time)
        };
        let counter = TimeCounter::new(filter, time, buckets);
        let next = AtomicUsize::new(0);
        let skipped = Mutex::new(Vec::new());
        let threads = COUNT_THREADS.min(plan.segments.len()).max(1);
        let parts: Vec<(Vec<u64>, usize)> = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..threads)
                .map(|_| {
                    let mut counter = counter.clone();
                    let (next, skipped, exceeded) = (&next, &skipped, &exceeded);
                    scope.spawn(move || {
                        let mut counts = vec![0u64; buckets.count];
                        let stop = || exceeded().is_some();
                        while let Some(entry) =
                            plan.segments.get(next.fetch_add(1, Ordering::Relaxed))
                        {
                            if stop() {
                                break;
                            }
                            let id = entry.segment_id();
                            let path = self.archive.segment_path(entry);
                            let counted = SegmentReader::open(&path)
                                .map_err(SqlError::from)
                                .and_then(|reader| {
                                    counter.segment(
                                        &reader,
                                        plan.granules.get(&id),
                                        plan.address_ranges.as_deref(),
                                        &mut counts,
                                        &stop,
                                    )
                                });
                            if let Err(error) = counted
                                && let Ok(mut skipped) = skipped.lock()
                            {
                                skipped.push(format!(
                                    "segment {} ({}) skipped: {error}",
                                    id.0, entry.file
                                ));
                            }
                        }
                        (counts, counter.summarised())
                    })
                })
                .collect();
            workers
                .into_iter()
                .map(|worker| worker.join().unwrap_or_default())
                .collect()
        });
        let mut counts = vec![0u64; buckets.count];
        let mut summarised = 0;
        for (part, by_summary) in parts {
            for (total, count) in counts.iter_mut().zip(part) {
                *total += count;
            }
            summarised += by_summary;
        }
        if let Some(tail) = &self.tail {
            let mut counter = counter;
            for (_, batch) in &tail.packets {
                counter.batch(batch, &mut counts)?;
            }
        }
        if let Some(limit) = exceeded() {
            return Err(ReaderError::Limit(limit));
        }
        let skipped = skipped.into_inner().unwrap_or_default();
        Ok((counts, skipped, summarised))
    }
}
