//! Aggregations over `packets` answered from the segments' summaries
//! (`hindsight_store::segment::summary`): their packets and bytes by minute
//! and by the fields of the link, network and tunnel layers.
//!
//! [`BySummary`], an analyzer rule, finds an aggregation straight over
//! `packets` (through filters only) whose groups, filters and aggregates the
//! summaries can answer, and points it at [`SummaryTable`] instead:
//! - groups and filters read only the summaries' fields, and `ts` only as
//!   `date_trunc` to a minute or more;
//! - aggregates are `count(*)` (the sum of `packets`), `count(field)`,
//!   `sum(wire_len)`, `sum(cap_len)` (the sums of `wire_bytes`, `cap_bytes`),
//!   `min`, `max` and `count(DISTINCT …)` of fields.
//!
//! Anything else reads the rows as before, as does a bare `count(*)` (the
//! segments' statistics answer it). The answer is the same: a segment
//! without a summary (written before them), or whose summary does not read
//! back sound, is summarised from its rows as the statement runs, and so is
//! the unsealed tail.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::catalog::Session;
use datafusion::catalog::default_table_source::source_as_provider;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, ScalarValue};
use datafusion::datasource::{TableProvider, TableType, provider_as_source};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::logical_expr::expr::AggregateFunction;
use datafusion::logical_expr::{
    Aggregate, Expr, LogicalPlan, LogicalPlanBuilder, TableProviderFilterPushDown, cast, col, lit,
    when,
};
use datafusion::optimizer::AnalyzerRule;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::SendableRecordBatchStream;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::{PartitionStream, StreamingTableExec};
use hindsight_store::SegmentReader;
use hindsight_store::schema::col as column;
use hindsight_store::segment::summary::{
    CAP_BYTES, PACKETS, SERVICE_PORTS_BELOW, SummaryBuilder, SummaryKind, WIRE_BYTES,
};

use crate::table::SegmentTable;

/// Partitions of a summary scan: the machine's two cores.
const PARTITIONS: usize = 2;

/// The summaries of the segments a `packets` scan would read, and of its
/// unsealed tail, as a table of its kind's schema.
#[derive(Debug)]
pub struct SummaryTable {
    packets: Arc<SegmentTable>,
    kind: SummaryKind,
}

impl SummaryTable {
    /// The summaries of `kind` of `packets`' segments and tail.
    pub fn new(packets: Arc<SegmentTable>, kind: SummaryKind) -> Self {
        Self { packets, kind }
    }
}

#[async_trait]
impl TableProvider for SummaryTable {
    fn schema(&self) -> SchemaRef {
        self.kind.schema()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        // They choose the segments (by address postings); DataFusion applies them.
        Ok(vec![TableProviderFilterPushDown::Inexact; filters.len()])
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let segments = self.packets.segments(filters)?;
        let mut parts: Vec<Vec<String>> = vec![Vec::new(); PARTITIONS];
        for (i, (_, path)) in segments.into_iter().enumerate() {
            parts[i % PARTITIONS].push(path);
        }
        let all: Vec<usize> = (0..self.kind.schema().fields().len()).collect();
        let projection = projection.cloned().unwrap_or(all);
        let schema = Arc::new(self.kind.schema().project(&projection)?);
        let partitions: Vec<Arc<dyn PartitionStream>> = parts
            .into_iter()
            .enumerate()
            .map(|(i, paths)| {
                Arc::new(Summaries {
                    kind: self.kind,
                    schema: Arc::clone(&schema),
                    projection: projection.clone(),
                    paths,
                    unsealed: if i == 0 {
                        self.packets.unsealed().to_vec()
                    } else {
                        Vec::new()
                    },
                }) as Arc<dyn PartitionStream>
            })
            .collect();
        Ok(Arc::new(StreamingTableExec::try_new(
            schema,
            partitions,
            None,
            [],
            false,
            None,
        )?))
    }
}

/// One partition of a summary scan: its segments' summaries, one batch each,
/// of the columns at `projection` only.
#[derive(Debug)]
struct Summaries {
    kind: SummaryKind,
    schema: SchemaRef,
    projection: Vec<usize>,
    paths: Vec<String>,
    unsealed: Vec<RecordBatch>,
}

impl PartitionStream for Summaries {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let paths = self.paths.clone();
        let unsealed = self.unsealed.clone();
        let kind = self.kind;
        let projection = Arc::new(self.projection.clone());
        let sealed = {
            let projection = Arc::clone(&projection);
            paths
                .into_iter()
                .map(move |path| segment_summary(&path, kind, &projection))
        };
        let tail = (!unsealed.is_empty()).then(move || {
            let mut builder = SummaryBuilder::new(kind);
            for batch in &unsealed {
                builder.add(batch).map_err(external)?;
            }
            Ok(builder.finish().map_err(external)?.project(&projection)?)
        });
        let batches = sealed.chain(tail);
        Box::pin(RecordBatchStreamAdapter::new(
            Arc::clone(&self.schema),
            futures::stream::iter(batches),
        ))
    }
}

/// A segment's summary, its columns at `projection`: the one it holds, or
/// one made from its rows if it holds none (written before them, or flows
/// past its share) or one that does not read back sound.
fn segment_summary(path: &str, kind: SummaryKind, projection: &[usize]) -> Result<RecordBatch> {
    let reader =
        SegmentReader::open_without_page_index(std::path::Path::new(path)).map_err(external)?;
    if let Ok(Some(summary)) = reader.summary_columns(kind, Some(projection)) {
        // `packets` comes last if it was not asked for.
        let asked: Vec<usize> = (0..projection.len()).collect();
        return Ok(summary.project(&asked)?);
    }
    let mut columns = vec![column::TS, column::WIRE_LEN, column::CAP_LEN];
    columns.extend(kind.dimensions());
    let mut builder = SummaryBuilder::new(kind);
    let batches = reader
        .read((0..reader.row_groups()).collect(), Some(&columns))
        .map_err(external)?;
    for batch in batches {
        builder.add(&batch?).map_err(external)?;
    }
    Ok(builder.finish().map_err(external)?.project(projection)?)
}

fn external(error: impl std::error::Error + Send + Sync + 'static) -> DataFusionError {
    DataFusionError::External(Box::new(error))
}

/// The analyzer rule that points aggregations the summaries answer at them.
#[derive(Debug)]
pub struct BySummary {
    /// The session's `packets`.
    packets: Arc<SegmentTable>,
    /// Its summaries, of each kind, the smaller first.
    summaries: Vec<(SummaryKind, Arc<dyn TableProvider>)>,
}

impl BySummary {
    /// The rule for a session's `packets` table.
    pub fn new(packets: Arc<SegmentTable>) -> Self {
        Self {
            summaries: SummaryKind::ALL
                .map(|kind| {
                    let table = SummaryTable::new(Arc::clone(&packets), kind);
                    (kind, Arc::new(table) as Arc<dyn TableProvider>)
                })
                .into(),
            packets,
        }
    }

    fn is_packets(&self, provider: &Arc<dyn TableProvider>) -> bool {
        std::ptr::addr_eq(Arc::as_ptr(provider), Arc::as_ptr(&self.packets))
    }

    /// The summary's plan of `aggregate`, if it answers it.
    fn rewrite(&self, aggregate: &Aggregate) -> Result<Option<LogicalPlan>> {
        let mut filters = Vec::new();
        let mut input = aggregate.input.as_ref();
        let scan = loop {
            match input {
                LogicalPlan::Filter(filter) => {
                    filters.push(filter.predicate.clone());
                    input = filter.input.as_ref();
                }
                LogicalPlan::TableScan(scan) => break scan,
                _ => return Ok(None),
            }
        };
        let packets = source_as_provider(&scan.source).ok();
        if !packets.is_some_and(|p| self.is_packets(&p))
            || self.packets.reads_copies()
            || scan.projection.is_some()
            || !scan.filters.is_empty()
            || scan.fetch.is_some()
        {
            return Ok(None);
        }
        // A bare count: the segments' statistics answer it, unread.
        if aggregate.group_expr.is_empty() && filters.is_empty() {
            return Ok(None);
        }
        // A subquery's columns are not among the condition's own.
        let subquery = |e: &Expr| {
            e.exists(|e| {
                Ok(matches!(
                    e,
                    Expr::Exists(_)
                        | Expr::InSubquery(_)
                        | Expr::ScalarSubquery(_)
                        | Expr::OuterReferenceColumn(..)
                ))
            })
            .unwrap_or(true)
        };
        if filters.iter().chain(&aggregate.group_expr).any(subquery) {
            return Ok(None);
        }
        let answering = self.summaries.iter().find_map(|(kind, table)| {
            let answers = aggregate
                .group_expr
                .iter()
                .all(|e| is_summary_group(*kind, e))
                && filters.iter().all(|e| answers_filter(*kind, e));
            let sums: Option<Vec<_>> = aggregate
                .aggr_expr
                .iter()
                .map(|e| summary_aggregate(*kind, e))
                .collect();
            sums.filter(|_| answers).map(|sums| (table, sums))
        });
        let Some((summary, sums)) = answering else {
            return Ok(None);
        };
        let mut builder = LogicalPlanBuilder::scan(
            scan.table_name.clone(),
            provider_as_source(Arc::clone(summary)),
            None,
        )?;
        for predicate in filters.into_iter().rev() {
            builder = builder.filter(predicate)?;
        }
        // Not aliased: DataFusion's rewrite of `count(DISTINCT x)` into a
        // grouping by `x` (SingleDistinctToGroupBy) takes bare aggregates only.
        let aggregates: Vec<Expr> = sums.iter().map(|(expr, _)| expr.clone()).collect();
        builder = builder.aggregate(aggregate.group_expr.clone(), aggregates)?;
        let summarised = Arc::clone(builder.schema());
        // The aggregate's own columns, names and types.
        let groups = aggregate.schema.fields().len() - sums.len();
        let mut columns = Vec::with_capacity(aggregate.schema.fields().len());
        for (i, (qualifier, field)) in aggregate.schema.iter().enumerate() {
            let expr = match i.checked_sub(groups) {
                None => Expr::Column(Column::from((qualifier, field))),
                Some(at) => {
                    let value = cast(
                        Expr::Column(Column::from(summarised.qualified_field(groups + at))),
                        field.data_type().clone(),
                    );
                    let value = if sums[at].1 {
                        // A count of no rows is 0; a sum of none is null.
                        when(
                            value.clone().is_null(),
                            cast(lit(0i64), field.data_type().clone()),
                        )
                        .otherwise(value)?
                    } else {
                        value
                    };
                    value.alias_qualified(qualifier.cloned(), field.name())
                }
            };
            columns.push(expr);
        }
        Ok(Some(builder.project(columns)?.build()?))
    }
}

impl AnalyzerRule for BySummary {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        plan.transform_up_with_subqueries(|node| match &node {
            LogicalPlan::Aggregate(aggregate) => Ok(match self.rewrite(aggregate)? {
                Some(summary) => Transformed::yes(summary),
                None => Transformed::no(node),
            }),
            _ => Ok(Transformed::no(node)),
        })
        .map(|transformed| transformed.data)
    }

    fn name(&self) -> &str {
        "hindsight_by_summary"
    }
}

/// Whether `expr` reads no column but those `kind` holds as they are (all
/// its dimensions but the services summary's ports).
fn reads_exact_only(kind: SummaryKind, expr: &Expr) -> bool {
    !matches!(expr, Expr::GroupingSet(_))
        && expr.column_refs().iter().all(|c| {
            kind.dimensions().contains(&c.name.as_str())
                && !(kind == SummaryKind::Services && is_port_name(&c.name))
        })
}

fn is_port_name(name: &str) -> bool {
    name == column::SRC_PORT || name == column::DST_PORT
}

/// Whether a condition means for a summary row of `kind` what it means for
/// each of its packets: it reads only the summary's dimensions, and a port
/// (merged from 1024 up in the services summary) only compared with
/// constants below 1024, true or false alike for every port merged.
pub fn answers_filter(kind: SummaryKind, expr: &Expr) -> bool {
    let reads = !matches!(expr, Expr::GroupingSet(_))
        && expr
            .column_refs()
            .iter()
            .all(|c| kind.dimensions().contains(&c.name.as_str()));
    reads && (kind != SummaryKind::Services || ports_compared_below(expr))
}

/// Whether every port in `expr` is compared (`=`, `<>`, `<`, `<=`, `>`,
/// `>=`, `BETWEEN`, `IN`) with constants below [`SERVICE_PORTS_BELOW`]
/// (`port < 1024`, `port >= 1024` too), or tested for null.
fn ports_compared_below(expr: &Expr) -> bool {
    use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
    use datafusion::logical_expr::{BinaryExpr, Operator};
    // Casts that keep every value of a `u16` (a port).
    let widens = |to: &DataType| {
        matches!(
            to,
            DataType::UInt16
                | DataType::Int32
                | DataType::UInt32
                | DataType::Int64
                | DataType::UInt64
        )
    };
    let is_port =
        |e: &Expr| matches!(without_widening(e, widens), Expr::Column(c) if is_port_name(&c.name));
    // Whether `e` is a constant in `0..limit`.
    let below = |e: &Expr, limit: i64| {
        let mut e = e;
        while let Expr::Cast(cast) = e {
            e = &cast.expr;
        }
        match e {
            Expr::Literal(value, _) => value
                .cast_to(&datafusion::arrow::datatypes::DataType::Int64)
                .ok()
                .and_then(|v| match v {
                    ScalarValue::Int64(Some(v)) => Some(v),
                    _ => None,
                })
                .is_some_and(|v| (0..limit).contains(&v)),
            _ => false,
        }
    };
    match expr {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) if is_port(left) || is_port(right) => {
            let (other, op) = if is_port(left) {
                (right, Some(*op))
            } else {
                (left, op.swap())
            };
            let merged = i64::from(SERVICE_PORTS_BELOW);
            match op {
                // `port < 1024` and `port >= 1024` hold alike for every port merged.
                Some(Operator::Lt | Operator::GtEq) => below(other, merged + 1),
                Some(Operator::Eq | Operator::NotEq | Operator::LtEq | Operator::Gt) => {
                    below(other, merged)
                }
                _ => false,
            }
        }
        Expr::Between(between) if is_port(&between.expr) => {
            let merged = i64::from(SERVICE_PORTS_BELOW);
            below(&between.low, merged) && below(&between.high, merged)
        }
        Expr::InList(list) if is_port(&list.expr) => list
            .list
            .iter()
            .all(|e| below(e, i64::from(SERVICE_PORTS_BELOW))),
        Expr::IsNull(e) | Expr::IsNotNull(e) if is_port(e) => true,
        e if is_port(e) => false,
        e => {
            let mut sound = true;
            let _ = e.apply_children(|child| {
                sound = ports_compared_below(child);
                Ok(if sound {
                    TreeNodeRecursion::Continue
                } else {
                    TreeNodeRecursion::Stop
                })
            });
            sound
        }
    }
}

/// `date_trunc` units whose instants are whole minutes (in UTC, `ts`'s zone).
const MINUTE_UNITS: [&str; 7] = ["minute", "hour", "day", "week", "month", "quarter", "year"];

/// Whether a group expression reads only the summaries' fields, and `ts` only
/// truncated to a minute or more.
fn is_summary_group(kind: SummaryKind, expr: &Expr) -> bool {
    if reads_exact_only(kind, expr) {
        return true;
    }
    let Expr::ScalarFunction(function) = expr else {
        return false;
    };
    match (function.name(), function.args.as_slice()) {
        (
            "date_trunc",
            [
                Expr::Literal(
                    ScalarValue::Utf8(Some(unit))
                    | ScalarValue::LargeUtf8(Some(unit))
                    | ScalarValue::Utf8View(Some(unit)),
                    _,
                ),
                Expr::Column(ts),
            ],
        ) => ts.name == column::TS && MINUTE_UNITS.contains(&unit.to_ascii_lowercase().as_str()),
        _ => false,
    }
}

/// `expr` without the casts around it to types that `keeps` says hold every
/// value of what they cast.
fn without_widening(expr: &Expr, keeps: fn(&DataType) -> bool) -> &Expr {
    match expr {
        Expr::Cast(cast) if keeps(cast.field.data_type()) => without_widening(&cast.expr, keeps),
        expr => expr,
    }
}

/// The summaries' aggregate for one of a statement's, and whether it is a
/// count (0, not null, over no rows).
fn summary_aggregate(kind: SummaryKind, expr: &Expr) -> Option<(Expr, bool)> {
    // `count(*)` is `count(1) AS "count(*)"`; the name is kept by the caller.
    let expr = match expr {
        Expr::Alias(alias) => alias.expr.as_ref(),
        expr => expr,
    };
    let Expr::AggregateFunction(AggregateFunction { func, params }) = expr else {
        return None;
    };
    if params.filter.is_some() || !params.order_by.is_empty() || params.null_treatment.is_some() {
        return None;
    }
    let [arg] = params.args.as_slice() else {
        return None;
    };
    let sum = |of: Expr| datafusion::functions_aggregate::expr_fn::sum(of);
    match func.name() {
        "count" if params.distinct => reads_exact_only(kind, arg).then(|| (expr.clone(), true)),
        "count" => match arg {
            Expr::Literal(value, _) if !value.is_null() => Some((sum(col(PACKETS)), true)),
            arg if reads_exact_only(kind, arg) => Some((
                sum(when(arg.clone().is_null(), lit(0u64))
                    .otherwise(col(PACKETS))
                    .ok()?),
                true,
            )),
            _ => None,
        },
        // Type coercion widened the column (`CAST(wire_len AS UInt64)`).
        "sum" if !params.distinct => match without_widening(arg, |to| {
            // Every value of a `u32` (`wire_len`, `cap_len`).
            matches!(to, DataType::Int64 | DataType::UInt64 | DataType::Float64)
        }) {
            Expr::Column(c) if c.name == column::WIRE_LEN => Some((sum(col(WIRE_BYTES)), false)),
            Expr::Column(c) if c.name == column::CAP_LEN => Some((sum(col(CAP_BYTES)), false)),
            _ => None,
        },
        "min" | "max" => reads_exact_only(kind, arg).then(|| (expr.clone(), false)),
        _ => None,
    }
}
