//! Packets matching a filter per time bucket, counted straight from segment
//! files: the histogram's columnar path.
//!
//! DataFusion's grouped count (`SqlSession::count_by_time`) plans a listing
//! of every file, decodes `ts` for every row and hashes each row's bucket. A
//! count by time needs less:
//! - without a filter, a page of `ts` whose smallest and largest timestamps
//!   fall in one bucket adds its row count from the page index, unread; only
//!   pages that straddle a bucket's edge (or the window's) are decoded;
//! - with one, only `ts` and the columns the filter names are decoded, of the
//!   row groups and granules the plan's statistics, Bloom filters and address
//!   postings leave; the filter is evaluated a batch at a time (DataFusion's
//!   physical expression of [`ColumnarFilter`]), and each match goes straight
//!   to its bucket's counter;
//! - with one that a segment summary answers (its columns among the
//!   summary's, buckets of whole minutes), the summary's rows are evaluated
//!   instead and their packets added, a few hundred or thousand rows per
//!   segment (`hindsight_store::segment::summary`).

use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray, BooleanArray, RecordBatch};
use datafusion::arrow::datatypes::{SchemaRef, TimestampNanosecondType, UInt64Type};
use datafusion::common::DFSchema;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::prelude::SessionContext;
use hindsight_model::{Addr16, GranuleSet};
use hindsight_store::schema::col;
use hindsight_store::segment::summary::{PACKETS, SUMMARY_GRANULE_NS, SummaryKind};
use hindsight_store::{SegmentReader, TimeRange};

use crate::{ColumnarFilter, SqlError, TimeBuckets};

/// Schemas a counter keeps its filter compiled for: a segment's rows and its
/// summary.
const COMPILED_SCHEMAS: usize = 2;

/// Counts into buckets; one per thread.
pub struct TimeCounter {
    filter: ColumnarFilter,
    /// `ts` and the columns the filter reads.
    columns: Vec<String>,
    /// The rows counted: the window within the buckets (inclusive).
    low: i64,
    high: i64,
    buckets: TimeBuckets,
    context: SessionContext,
    /// The filter compiled for the schemas it was last evaluated on (the
    /// rows' and a summary's), at most [`COMPILED_SCHEMAS`].
    compiled: Vec<(SchemaRef, Arc<dyn PhysicalExpr>)>,
    /// The segment summary that can answer, if one can: the filter means
    /// for its rows what it means for their packets
    /// ([`crate::summary::answers_filter`]) and every bucket's edge is a
    /// minute's.
    by_summary: Option<SummaryKind>,
    /// The columns of `by_summary`'s schema it decodes: `ts` and the
    /// filter's (and `packets`, always read).
    summary_columns: Option<Vec<usize>>,
    /// Segments this counter counted from their summaries.
    summarised: usize,
}

impl std::fmt::Debug for TimeCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TimeCounter").finish_non_exhaustive()
    }
}

impl Clone for TimeCounter {
    fn clone(&self) -> Self {
        Self {
            filter: self.filter.clone(),
            columns: self.columns.clone(),
            low: self.low,
            high: self.high,
            buckets: self.buckets,
            context: SessionContext::new(),
            compiled: Vec::new(),
            by_summary: self.by_summary,
            summary_columns: self.summary_columns.clone(),
            summarised: 0,
        }
    }
}

impl TimeCounter {
    /// A counter of `filter`'s rows in `time` (inclusive) and in `buckets`.
    pub fn new(filter: &ColumnarFilter, time: TimeRange, buckets: TimeBuckets) -> Self {
        let (low, high) = buckets.window(time);
        let mut columns: Vec<String> = filter
            .expr()
            .column_refs()
            .into_iter()
            .map(|column| column.name.clone())
            .collect();
        columns.sort();
        columns.dedup();
        columns.retain(|name| name != col::TS);
        let width = buckets.width_ns.max(1);
        let aligned =
            buckets.start_ns.rem_euclid(SUMMARY_GRANULE_NS) == 0 && width % SUMMARY_GRANULE_NS == 0;
        let by_summary = SummaryKind::ALL
            .into_iter()
            .find(|&kind| crate::summary::answers_filter(kind, filter.expr()))
            .filter(|_| aligned && !filter.is_match_all());
        columns.push(col::TS.to_owned());
        let summary_columns = by_summary.and_then(|kind| {
            let schema = kind.schema();
            columns
                .iter()
                .map(|name| schema.index_of(name).ok())
                .collect()
        });
        Self {
            filter: filter.clone(),
            columns,
            low,
            high,
            buckets: TimeBuckets {
                width_ns: buckets.width_ns.max(1),
                ..buckets
            },
            context: SessionContext::new(),
            compiled: Vec::new(),
            by_summary,
            summary_columns,
            summarised: 0,
        }
    }

    /// The segments this counter counted from their summaries.
    pub fn summarised(&self) -> usize {
        self.summarised
    }

    /// The bucket of a timestamp in the window.
    fn slot(&self, ts: i64) -> usize {
        ((i128::from(ts) - i128::from(self.buckets.start_ns)) / i128::from(self.buckets.width_ns))
            as usize
    }

    fn in_window(&self, ts: i64) -> bool {
        self.low <= ts && ts <= self.high
    }

    /// Adds the matching rows of one segment to `counts` (one per bucket),
    /// reading only the row groups that may hold rows in the window and, with
    /// them, in `granules` and with an address in `addresses`. `stop` is
    /// asked between batches; once it says so, the count ends early (the
    /// caller reports why). Returns the rows decoded (of its summary, if
    /// that answered).
    pub fn segment(
        &mut self,
        reader: &SegmentReader,
        granules: Option<&GranuleSet>,
        addresses: Option<&[(Addr16, Addr16)]>,
        counts: &mut [u64],
        stop: &dyn Fn() -> bool,
    ) -> Result<u64, SqlError> {
        if self.low > self.high {
            return Ok(0);
        }
        let window = TimeRange {
            start_nanos: self.low,
            end_nanos: self.high,
        };
        let groups = reader.matching_row_groups(window, addresses)?;
        if groups.is_empty() {
            return Ok(0);
        }
        let mut decoded = 0;
        if self.filter.is_match_all() && granules.is_none() && addresses.is_none() {
            // From the page index where a page lies in one bucket.
            let mut ranges = Vec::new();
            for group in groups {
                for span in reader.time_spans(group) {
                    if span.max_ts < self.low || span.min_ts > self.high {
                        continue;
                    }
                    let inside = self.in_window(span.min_ts) && self.in_window(span.max_ts);
                    if inside && self.slot(span.min_ts) == self.slot(span.max_ts) {
                        if let Some(count) = counts.get_mut(self.slot(span.min_ts)) {
                            *count += span.rows;
                        }
                    } else {
                        ranges.push((span.first_row, span.rows));
                    }
                }
            }
            if ranges.is_empty() {
                return Ok(0);
            }
            for batch in reader.read_ranges(&ranges, &[col::TS])? {
                let batch = batch.map_err(|e| SqlError::DataFusion(e.into()))?;
                decoded += batch.num_rows() as u64;
                self.count_rows(&batch, None, counts)?;
                if stop() {
                    break;
                }
            }
            return Ok(decoded);
        }
        if let Some(kind) = self.by_summary {
            // A segment without a summary (written before them) or with a
            // damaged one is read instead: its rows answer the same. Only
            // `ts`, the filter's columns and `packets` are decoded.
            if let Ok(Some(summary)) = reader.summary_columns(kind, self.summary_columns.as_deref())
                && self.count_summary(&summary, counts)?
            {
                self.summarised += 1;
                return Ok(summary.num_rows() as u64);
            }
        }
        let columns: Vec<&str> = self.columns.iter().map(String::as_str).collect();
        let (batches, _) =
            reader.read_granules(groups, granules, Some(&columns), addresses, &[])?;
        for batch in batches {
            let batch = batch.map_err(|e| SqlError::DataFusion(e.into()))?;
            decoded += batch.num_rows() as u64;
            self.batch(&batch, counts)?;
            if stop() {
                break;
            }
        }
        Ok(decoded)
    }

    /// Adds the matching rows of `batch` (with `ts` and the filter's columns,
    /// or every column of `packets`) to `counts`.
    pub fn batch(&mut self, batch: &RecordBatch, counts: &mut [u64]) -> Result<(), SqlError> {
        if self.filter.is_match_all() {
            return self.count_rows(batch, None, counts);
        }
        let mask = self.mask(batch)?;
        self.count_rows(batch, Some(&mask), counts)
    }

    /// The filter evaluated on `batch` (rows or a summary), its expression
    /// compiled once for each schema.
    fn mask(&mut self, batch: &RecordBatch) -> Result<BooleanArray, SqlError> {
        let schema = batch.schema();
        let compiled = self.compiled.iter().find(|(of, _)| *of == schema);
        let expr = match compiled {
            Some((_, expr)) => Arc::clone(expr),
            None => {
                let df_schema = DFSchema::try_from(Arc::clone(&schema))?;
                let expr = self
                    .context
                    .create_physical_expr(self.filter.expr().clone(), &df_schema)?;
                if self.compiled.len() == COMPILED_SCHEMAS {
                    self.compiled.remove(0);
                }
                self.compiled.push((schema, Arc::clone(&expr)));
                expr
            }
        };
        let mask = expr.evaluate(batch)?.into_array(batch.num_rows())?;
        mask.as_boolean_opt().cloned().ok_or_else(|| {
            SqlError::DataFusion(datafusion::error::DataFusionError::Internal(
                "a filter's expression is not a boolean".to_owned(),
            ))
        })
    }

    /// Adds a segment's matching packets from its summary (`by_summary`);
    /// false, adding nothing, if one of its minutes lies across the window's
    /// edge, so that its rows must be read.
    fn count_summary(
        &mut self,
        summary: &RecordBatch,
        counts: &mut [u64],
    ) -> Result<bool, SqlError> {
        let internal = |what: &str| {
            SqlError::DataFusion(datafusion::error::DataFusionError::Internal(format!(
                "a segment summary has no {what} column"
            )))
        };
        let minutes = summary
            .column_by_name(col::TS)
            .and_then(|c| c.as_primitive_opt::<TimestampNanosecondType>())
            .ok_or_else(|| internal(col::TS))?;
        let packets = summary
            .column_by_name(PACKETS)
            .and_then(|c| c.as_primitive_opt::<UInt64Type>())
            .ok_or_else(|| internal(PACKETS))?;
        let last = |minute: i64| minute.saturating_add(SUMMARY_GRANULE_NS - 1);
        let across = minutes.values().iter().any(|&minute| {
            let inside = self.in_window(minute) && self.in_window(last(minute));
            let outside = last(minute) < self.low || minute > self.high;
            !inside && !outside
        });
        if across {
            return Ok(false);
        }
        let mask = self.mask(summary)?;
        for row in mask.values().set_indices() {
            let minute = minutes.value(row);
            if mask.is_valid(row)
                && self.in_window(minute)
                && let Some(count) = counts.get_mut(self.slot(minute))
            {
                *count += packets.value(row);
            }
        }
        Ok(true)
    }

    fn count_rows(
        &self,
        batch: &RecordBatch,
        mask: Option<&datafusion::arrow::array::BooleanArray>,
        counts: &mut [u64],
    ) -> Result<(), SqlError> {
        let ts = batch
            .column_by_name(col::TS)
            .and_then(|column| column.as_primitive_opt::<TimestampNanosecondType>())
            .ok_or_else(|| {
                SqlError::DataFusion(datafusion::error::DataFusionError::Internal(
                    "a counted batch has no ts column".to_owned(),
                ))
            })?;
        let mut add = |row: usize| {
            let t = ts.value(row);
            if self.in_window(t)
                && let Some(count) = counts.get_mut(self.slot(t))
            {
                *count += 1;
            }
        };
        match mask {
            None => (0..ts.len()).for_each(&mut add),
            Some(mask) => {
                let valid = mask.nulls().cloned();
                for row in mask.values().set_indices() {
                    if valid.as_ref().is_none_or(|nulls| nulls.is_valid(row)) {
                        add(row);
                    }
                }
            }
        }
        Ok(())
    }
}
