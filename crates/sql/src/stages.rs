//! Scripts of stages: the controller of the live and historical queries
//! (`fastbit-telegraphcq` section 4), in SQL.
//!
//! A script is statements separated by `;`. Each but the last is a stage,
//! `CREATE TEMPORARY TABLE name AS SELECT ...`: its rows become the table
//! `name` for the statements after it, held in memory for one run of the
//! script (nothing is created anywhere else). The last statement is the
//! answer.
//!
//! The controller's part is binding: a condition of a later statement that
//! reads only stages, `x IN (SELECT c FROM stage)` or a scalar `(SELECT ...
//! FROM stage)`, is replaced by the stage's values before the statement is
//! planned further, as the paper's controller fills `:X1, :X2, ...` into the
//! historical query's template. The archive's scans then see a list of
//! literals, and prune by it (address postings for `packets`, Bloom filters
//! and statistics for both tables) instead of reading every segment of the
//! time range for a join.

use std::collections::BTreeSet;
use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::execution::context::SessionState;
use datafusion::logical_expr::expr::{InList, InSubquery};
use datafusion::logical_expr::{Expr, LogicalPlan, Subquery};
use datafusion::prelude::SessionContext;
use datafusion::scalar::ScalarValue;
use datafusion::sql::parser::{DFParserBuilder, Statement as DfStatement};
use datafusion::sql::sqlparser::ast::{CreateTable, Statement};
use datafusion::sql::sqlparser::dialect::dialect_from_str;
use futures::StreamExt;

use crate::SqlError;

/// Most values a stage's subquery is bound to; past it the condition stays a
/// join.
pub const MAX_BOUND_VALUES: usize = 10_000;

/// Tables a stage may not be named after.
const RESERVED: [&str; 4] = ["packets", "flows", crate::LIVE_PACKETS, crate::LIVE_FLOWS];

/// A parsed script: its stages in order, then its answer.
#[derive(Clone, Debug)]
pub struct Script {
    pub(crate) stages: Vec<(String, DfStatement)>,
    pub(crate) answer: DfStatement,
}

impl Script {
    /// The stages' names, in order.
    pub fn stage_names(&self) -> impl Iterator<Item = &str> {
        self.stages.iter().map(|(name, _)| name.as_str())
    }
}

/// Parses `sql` into a script.
pub(crate) fn parse(state: &SessionState, sql: &str) -> Result<Script, SqlError> {
    crate::shape::check_in(state, sql)?;
    let dialect_name = &state.config().options().sql_parser.dialect;
    let dialect = dialect_from_str(dialect_name).ok_or_else(|| {
        datafusion::error::DataFusionError::Plan(format!("unknown SQL dialect {dialect_name}"))
    })?;
    let mut statements = DFParserBuilder::new(sql)
        .with_dialect(dialect.as_ref())
        .build()?
        .parse_statements()?;
    let Some(answer) = statements.pop_back() else {
        return Err(script_error("the script holds no statement"));
    };
    let mut stages: Vec<(String, DfStatement)> = Vec::new();
    for statement in statements {
        let (name, query) = stage(&statement)?;
        if RESERVED.contains(&name.as_str()) {
            return Err(script_error(&format!(
                "a stage cannot be named {name}: that is a table of the archive or the window"
            )));
        }
        if stages.iter().any(|(earlier, _)| *earlier == name) {
            return Err(script_error(&format!("two stages are named {name}")));
        }
        stages.push((name, query));
    }
    if stage(&answer).is_ok() {
        return Err(script_error(
            "the script ends with a stage; its last statement is the answer, a query",
        ));
    }
    Ok(Script { stages, answer })
}

fn script_error(reason: &str) -> SqlError {
    SqlError::Script(reason.to_owned())
}

/// `CREATE TEMPORARY TABLE name AS query`: the stage's name and its query.
fn stage(statement: &DfStatement) -> Result<(String, DfStatement), SqlError> {
    let wrong = || {
        script_error(&format!(
            "every statement before the last must be a stage, CREATE TEMPORARY TABLE name AS \
             SELECT ...; this one is not: {}",
            first_line(&statement.to_string())
        ))
    };
    let DfStatement::Statement(inner) = statement else {
        return Err(wrong());
    };
    let Statement::CreateTable(CreateTable {
        temporary: true,
        name,
        columns,
        query: Some(query),
        location: None,
        external: false,
        ..
    }) = inner.as_ref()
    else {
        return Err(wrong());
    };
    if !columns.is_empty() || name.0.len() != 1 {
        return Err(wrong());
    }
    let name = name.to_string().trim_matches('"').to_owned();
    Ok((
        name,
        DfStatement::Statement(Box::new(Statement::Query(query.clone()))),
    ))
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or(text)
}

/// Replaces, in `plan`, each uncorrelated subquery that reads only `stages`
/// by its values: `IN (SELECT ...)` by a list, a scalar subquery by its value.
pub(crate) async fn bind(
    context: &SessionContext,
    plan: LogicalPlan,
    stages: &BTreeSet<String>,
) -> Result<LogicalPlan, SqlError> {
    if stages.is_empty() {
        return Ok(plan);
    }
    // The subqueries to run first (the plan's tree is walked again to replace
    // them: running a query needs the async context a tree walk has not).
    let mut wanted: Vec<Arc<LogicalPlan>> = Vec::new();
    plan.apply_with_subqueries(|node| {
        node.apply_expressions(|expr| {
            expr.apply(|e| {
                if let Some(subquery) = bindable(e, stages)
                    && !wanted.contains(&subquery.subquery)
                {
                    wanted.push(Arc::clone(&subquery.subquery));
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })
    })?;
    if wanted.is_empty() {
        return Ok(plan);
    }
    let mut values: Vec<(Arc<LogicalPlan>, Option<Vec<ScalarValue>>)> = Vec::new();
    for subquery in wanted {
        let rows = column_values(context, subquery.as_ref().clone()).await?;
        values.push((subquery, rows));
    }
    let lookup = |subquery: &Subquery| {
        values
            .iter()
            .find(|(plan, _)| *plan == subquery.subquery)
            .and_then(|(_, rows)| rows.clone())
    };
    let bound = plan.transform_up_with_subqueries(|node| {
        node.map_expressions(|expr| {
            expr.transform_up(|e| {
                if bindable(&e, stages).is_none() {
                    return Ok(Transformed::no(e));
                }
                Ok(match e {
                    Expr::InSubquery(InSubquery {
                        expr,
                        subquery,
                        negated,
                    }) => match lookup(&subquery) {
                        Some(list) => Transformed::yes(Expr::InList(InList::new(
                            expr,
                            list.into_iter().map(|v| Expr::Literal(v, None)).collect(),
                            negated,
                        ))),
                        None => Transformed::no(Expr::InSubquery(InSubquery::new(
                            expr, subquery, negated,
                        ))),
                    },
                    Expr::ScalarSubquery(subquery) => match lookup(&subquery) {
                        Some(list) if list.len() <= 1 => {
                            let value = match list.into_iter().next() {
                                Some(value) => value,
                                None => ScalarValue::try_from(
                                    subquery.subquery.schema().field(0).data_type(),
                                )?,
                            };
                            Transformed::yes(Expr::Literal(value, None))
                        }
                        _ => Transformed::no(Expr::ScalarSubquery(subquery)),
                    },
                    other => Transformed::no(other),
                })
            })
        })
    })?;
    Ok(bound.data)
}

/// The subquery of `expr` if it can be bound: uncorrelated, one column, and
/// reading only stages.
fn bindable<'a>(expr: &'a Expr, stages: &BTreeSet<String>) -> Option<&'a Subquery> {
    let subquery = match expr {
        Expr::InSubquery(InSubquery { subquery, .. }) | Expr::ScalarSubquery(subquery) => subquery,
        _ => return None,
    };
    if !subquery.outer_ref_columns.is_empty() || subquery.subquery.schema().fields().len() != 1 {
        return None;
    }
    let mut only_stages = true;
    let _ = subquery.subquery.apply_with_subqueries(|node| {
        if let LogicalPlan::TableScan(scan) = node
            && !stages.contains(scan.table_name.table())
        {
            only_stages = false;
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    });
    only_stages.then_some(subquery)
}

/// The first column of `plan`'s rows, or `None` past [`MAX_BOUND_VALUES`].
async fn column_values(
    context: &SessionContext,
    plan: LogicalPlan,
) -> Result<Option<Vec<ScalarValue>>, SqlError> {
    let frame = context.execute_logical_plan(plan).await?;
    let mut stream = frame.execute_stream().await?;
    let mut values = Vec::new();
    while let Some(batch) = stream.next().await {
        let batch: RecordBatch = batch?;
        let column = batch.column(0);
        for row in 0..batch.num_rows() {
            if values.len() == MAX_BOUND_VALUES {
                return Ok(None);
            }
            values.push(ScalarValue::try_from_array(column, row)?);
        }
    }
    Ok(Some(values))
}
