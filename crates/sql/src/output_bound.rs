//! The functions whose result can be far larger than their arguments,
//! bounded before they run.
//!
//! DataFusion's memory pool counts what operators hold (sorts, joins,
//! aggregations), not what a scalar function makes: `repeat('a',
//! 2147483647)` allocates 2 GiB from a 40-byte statement, and so do `lpad`
//! and `rpad` with a large length. Each is registered here in place of
//! DataFusion's own, under the same name: before calling it, the bytes it
//! would make for the batch are counted from its arguments (string length
//! times count, or the length asked for, at 4 bytes a character), and a
//! call past [`MAX_OUTPUT_BYTES`] fails with an error that names the bound.
//! Constant folding calls the same function, so a statement of literals is
//! refused while it is planned.
//!
//! An aggregate can hold far more than its rows too: DataFusion's
//! `approx_distinct` of a column narrower than 32 bits (booleans, 8- and
//! 16-bit integers) or of a duration keeps a 16 KiB sketch for every group,
//! made for a whole input batch (8,192 rows, 128 MiB) before its memory is
//! reserved, and writes each group's state as 16 KiB values that no
//! operator reserves; grouped by a key with as many values as rows, one
//! statement over 62,781 packets peaked at 659 MiB. [`aggregate_functions`]
//! registers an `approx_distinct` that widens those arguments to 64 bits,
//! where DataFusion keeps a group's few values as a short list (at most
//! eight bytes a row) until it has seen hundreds.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray};
use datafusion::arrow::compute::kernels::length::length;
use datafusion::arrow::compute::{CastOptions, cast_with_options};
use datafusion::arrow::datatypes::{DataType, FieldRef, Int64Type};
use datafusion::common::{ScalarValue, exec_err};
use datafusion::error::Result;
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, ColumnarValue, Documentation, GroupsAccumulator,
    ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

/// The most bytes one call of a bounded function may make (for one batch
/// of rows, or one constant).
pub const MAX_OUTPUT_BYTES: u64 = 64 << 20;

/// How a function's result size follows from its arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Growth {
    /// `repeat(string, n)`: the string's bytes times n.
    Repeat,
    /// `lpad(string, n [, fill])`, `rpad`: n characters.
    Pad,
}

/// DataFusion's function, called only within the bound.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Bounded {
    inner: ScalarUDF,
    growth: Growth,
}

/// The bounded `repeat`, `lpad` and `rpad`, to register over DataFusion's.
pub fn functions() -> Vec<ScalarUDF> {
    use datafusion::functions::{string, unicode};
    [
        (string::repeat(), Growth::Repeat),
        (unicode::lpad(), Growth::Pad),
        (unicode::rpad(), Growth::Pad),
    ]
    .into_iter()
    .map(|(inner, growth)| {
        ScalarUDF::new_from_impl(Bounded {
            inner: inner.as_ref().clone(),
            growth,
        })
    })
    .collect()
}

/// `approx_distinct` with its narrow arguments widened (see the module's
/// documentation), to register over DataFusion's.
pub fn aggregate_functions() -> Vec<AggregateUDF> {
    let inner = datafusion::functions_aggregate::approx_distinct::approx_distinct_udaf();
    vec![AggregateUDF::new_from_impl(Widened {
        inner: inner.as_ref().clone(),
        signature: Signature::user_defined(Volatility::Immutable),
    })]
}

/// DataFusion's aggregate, called with its argument widened to 64 bits
/// where DataFusion would keep a dense sketch for every group.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Widened {
    inner: AggregateUDF,
    signature: Signature,
}

impl AggregateUDFImpl for Widened {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        let [arg] = arg_types else {
            return datafusion::common::plan_err!(
                "{} takes one argument, not {}",
                self.name(),
                arg_types.len()
            );
        };
        Ok(vec![match arg {
            DataType::Boolean
            | DataType::Int8
            | DataType::Int16
            | DataType::UInt8
            | DataType::UInt16
            | DataType::Duration(_) => DataType::Int64,
            other => other.clone(),
        }])
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arg_types)
    }

    fn is_nullable(&self) -> bool {
        self.inner.is_nullable()
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        self.inner.accumulator(args)
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        self.inner.state_fields(args)
    }

    fn groups_accumulator_supported(&self, args: AccumulatorArgs) -> bool {
        self.inner.groups_accumulator_supported(args)
    }

    fn create_groups_accumulator(
        &self,
        args: AccumulatorArgs,
    ) -> Result<Box<dyn GroupsAccumulator>> {
        self.inner.create_groups_accumulator(args)
    }

    fn default_value(&self, data_type: &DataType) -> Result<ScalarValue> {
        self.inner.default_value(data_type)
    }

    fn documentation(&self) -> Option<&Documentation> {
        self.inner.documentation()
    }
}

/// The per-row values of argument `arg` as 64-bit integers (`None` for a
/// null), `rows` of them.
fn integers(arg: &ColumnarValue, rows: usize) -> Result<Vec<Option<i64>>> {
    let array: ArrayRef = match arg {
        ColumnarValue::Scalar(value) => value.to_array_of_size(1)?,
        ColumnarValue::Array(array) => Arc::clone(array),
    };
    let array = cast_with_options(&array, &DataType::Int64, &CastOptions::default())?;
    let values = array.as_primitive::<Int64Type>();
    let value = |i: usize| (!values.is_null(i)).then(|| values.value(i));
    Ok(match arg {
        ColumnarValue::Scalar(_) => vec![value(0); rows],
        ColumnarValue::Array(_) => (0..values.len()).map(value).collect(),
    })
}

/// The per-row byte lengths of string argument `arg`.
fn lengths(arg: &ColumnarValue, rows: usize) -> Result<Vec<Option<i64>>> {
    match arg {
        ColumnarValue::Scalar(value) => {
            let len = match value {
                ScalarValue::Utf8(text)
                | ScalarValue::LargeUtf8(text)
                | ScalarValue::Utf8View(text) => text.as_ref().map(|t| t.len() as i64),
                other => other.to_string().len().try_into().ok(),
            };
            Ok(vec![len; rows])
        }
        ColumnarValue::Array(array) => {
            integers(&ColumnarValue::Array(length(array.as_ref())?), array.len())
        }
    }
}

impl Bounded {
    /// The bytes the call would make, at most.
    fn output_bytes(&self, args: &ScalarFunctionArgs) -> Result<u64> {
        let rows = args.number_rows.max(1);
        let (Some(text), Some(count)) = (args.args.first(), args.args.get(1)) else {
            return Ok(0);
        };
        let counts = integers(count, rows)?;
        let per_row: Box<dyn Iterator<Item = u64>> = match self.growth {
            Growth::Repeat => {
                let lengths = lengths(text, rows)?;
                Box::new(lengths.into_iter().zip(counts).map(|(len, n)| {
                    let (len, n) = (len.unwrap_or(0).max(0), n.unwrap_or(0).max(0));
                    (len as u64).saturating_mul(n as u64)
                }))
            }
            Growth::Pad => Box::new(
                counts
                    .into_iter()
                    .map(|n| (n.unwrap_or(0).max(0) as u64).saturating_mul(4)),
            ),
        };
        Ok(per_row.fold(0u64, u64::saturating_add))
    }
}

impl ScalarUDFImpl for Bounded {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arg_types)
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        self.inner.return_field_from_args(args)
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.inner.coerce_types(arg_types)
    }

    fn documentation(&self) -> Option<&Documentation> {
        self.inner.documentation()
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let bytes = self.output_bytes(&args)?;
        if bytes > MAX_OUTPUT_BYTES {
            return exec_err!(
                "{} would make {bytes} bytes for {} row(s); one call may make at most \
                 {MAX_OUTPUT_BYTES} (a bound of the server's memory)",
                self.name(),
                args.number_rows
            );
        }
        self.inner.invoke_with_args(args)
    }
}

#[cfg(test)]
mod tests {
    use datafusion::prelude::SessionContext;

    use super::*;

    async fn run(context: &SessionContext, sql: &str) -> Result<Vec<String>> {
        let batches = context.sql(sql).await?.collect().await?;
        let text = datafusion::arrow::util::pretty::pretty_format_batches(&batches)?;
        Ok(text.to_string().lines().map(str::to_owned).collect())
    }

    #[test]
    fn large_results_are_refused_and_small_ones_answered_as_before() {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(refused_and_answered());
    }

    #[test]
    fn approx_distinct_of_a_narrow_column_keeps_no_sketch_per_group() {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(narrow_widened());
    }

    /// 20,000 groups of one value each, of an 8-bit, a 16-bit and a boolean
    /// column, which DataFusion's own counts with a 16 KiB sketch a group
    /// (312 MiB; 659 MiB at the peak over lan-hour's 62,781 packets,
    /// measured with a release build): the widened
    /// function is planned with the cast (so DataFusion's groups accumulator,
    /// which keeps a group's few values as a list, counts it) and answers as
    /// DataFusion's own with the cast written.
    async fn narrow_widened() {
        let widened = SessionContext::new();
        for function in aggregate_functions() {
            widened.register_udaf(function);
        }
        let own = SessionContext::new();
        let groups = |argument: &str| {
            format!(
                "SELECT count(*) AS groups, sum(n) AS counted FROM (SELECT value AS k, \
                 approx_distinct({argument}) AS n FROM generate_series(1, 20000) GROUP BY value)"
            )
        };
        for narrow in ["TINYINT UNSIGNED", "SMALLINT", "BOOLEAN"] {
            let sql = groups(&format!("CAST(value % 2 AS {narrow})"));
            let plan = run(&widened, &format!("EXPLAIN {sql}")).await.unwrap();
            assert!(
                plan.iter()
                    .any(|line| line.contains("approx_distinct(CAST(CAST(")
                        && line.contains("AS Int64))")),
                "{plan:?}"
            );
            let answer = run(&widened, &sql).await.unwrap();
            assert!(
                answer.iter().any(|line| line == "| 20000  | 20000   |"),
                "{answer:?}"
            );
            let written = groups(&format!("CAST(CAST(value % 2 AS {narrow}) AS BIGINT)"));
            assert_eq!(answer, run(&own, &written).await.unwrap(), "{narrow}");
        }
        // Other types are DataFusion's as they were.
        let plan = run(&widened, &format!("EXPLAIN {}", groups("value")))
            .await
            .unwrap();
        assert!(!plan.iter().any(|line| line.contains("CAST(")), "{plan:?}");
    }

    async fn refused_and_answered() {
        let context = SessionContext::new();
        for function in functions() {
            context.register_udf(function);
        }
        for sql in [
            "SELECT length(repeat('a', 2147483647))",
            "SELECT length(lpad('a', 2147483647))",
            "SELECT length(rpad('a', 100000000, 'xy'))",
            "SELECT length(repeat(s, 100000000)) FROM (VALUES ('ab'), ('c')) AS t(s)",
            "SELECT length(repeat('abc', n)) FROM (VALUES (30000000), (1)) AS t(n)",
        ] {
            let error = run(&context, sql).await.unwrap_err().to_string();
            assert!(
                error.contains("one call may make at most"),
                "{sql}: {error}"
            );
        }
        let plain = SessionContext::new();
        for sql in [
            "SELECT repeat('ab', 3), lpad('7', 3, '0'), rpad('x', 2)",
            "SELECT repeat(s, n), lpad(s, n, '.') FROM (VALUES ('ab', 2), (NULL, 1), ('c', NULL)) AS t(s, n)",
            "SELECT length(repeat('a', 1000000))",
        ] {
            assert_eq!(
                run(&context, sql).await.unwrap(),
                run(&plain, sql).await.unwrap(),
                "{sql}"
            );
        }
    }
}
