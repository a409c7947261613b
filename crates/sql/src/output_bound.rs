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

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray};
use datafusion::arrow::compute::kernels::length::length;
use datafusion::arrow::compute::{CastOptions, cast_with_options};
use datafusion::arrow::datatypes::{DataType, FieldRef, Int64Type};
use datafusion::common::{ScalarValue, exec_err};
use datafusion::error::Result;
use datafusion::logical_expr::{
    ColumnarValue, Documentation, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl,
    Signature,
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
