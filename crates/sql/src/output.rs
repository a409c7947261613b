//! Writing SQL results: an aligned table, CSV or JSON lines. Addresses and MACs are
//! printed in their usual text forms and raw bytes in hex, in every format.

use std::fmt::Write as _;
use std::io::Write;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, BinaryArray, FixedSizeBinaryArray, LargeBinaryArray, RecordBatch, StringArray,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::error::ArrowError;
use hindsight_model::{Addr16, mac_text};

/// Output formats of SQL results.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputFormat {
    /// An aligned table.
    Table,
    /// Comma-separated values with a header line.
    Csv,
    /// One JSON object per line.
    Jsonl,
    /// An Apache Parquet file (zstd), for DuckDB, pandas or Spark.
    Parquet,
}

/// Writes `batches` to `out` in `format`.
pub fn write(
    batches: &[RecordBatch],
    format: OutputFormat,
    out: &mut dyn Write,
) -> Result<(), crate::SqlError> {
    let batches = batches
        .iter()
        .map(readable)
        .collect::<Result<Vec<_>, _>>()?;
    match format {
        OutputFormat::Table => {
            let table = datafusion::arrow::util::pretty::pretty_format_batches(&batches)?;
            writeln!(out, "{table}")?;
            let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
            writeln!(out, "{rows} row(s)")?;
        }
        OutputFormat::Csv => {
            let mut writer = datafusion::arrow::csv::WriterBuilder::new()
                .with_header(true)
                .build(out);
            for batch in &batches {
                writer.write(batch)?;
            }
        }
        OutputFormat::Jsonl => {
            let mut writer = datafusion::arrow::json::LineDelimitedWriter::new(out);
            for batch in &batches {
                writer.write(batch)?;
            }
            writer.finish()?;
        }
        OutputFormat::Parquet => {
            let schema = match batches.first() {
                Some(batch) => batch.schema(),
                None => Arc::new(Schema::empty()),
            };
            let properties = datafusion::parquet::file::properties::WriterProperties::builder()
                .set_compression(datafusion::parquet::basic::Compression::ZSTD(
                    datafusion::parquet::basic::ZstdLevel::default(),
                ))
                .build();
            // The writer wants a `Send` sink; the result is bounded by the row limit.
            let mut file = Vec::new();
            let mut writer = datafusion::parquet::arrow::ArrowWriter::try_new(
                &mut file,
                schema,
                Some(properties),
            )
            .map_err(|e| ArrowError::ExternalError(Box::new(e)))?;
            for batch in &batches {
                writer
                    .write(batch)
                    .map_err(|e| ArrowError::ExternalError(Box::new(e)))?;
            }
            writer
                .close()
                .map_err(|e| ArrowError::ExternalError(Box::new(e)))?;
            out.write_all(&file)?;
        }
    }
    Ok(())
}

fn hex(bytes: &[u8]) -> String {
    let mut text = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        let _infallible = write!(text, "{byte:02x}");
    }
    text
}

/// Prints one value of a fixed-width byte column: an address, a MAC, or hex.
fn fixed_text(bytes: &[u8]) -> String {
    if let Ok(octets) = <[u8; 16]>::try_from(bytes) {
        Addr16(octets).to_string()
    } else if let Ok(mac) = <[u8; 6]>::try_from(bytes) {
        mac_text(mac)
    } else {
        hex(bytes)
    }
}

/// Converts byte columns to text: 16-byte addresses as IP text, 6-byte MACs as
/// `aa:bb:..`, other binary as hex.
fn readable(batch: &RecordBatch) -> Result<RecordBatch, ArrowError> {
    let schema = batch.schema();
    let mut fields = Vec::with_capacity(schema.fields().len());
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
    for (field, column) in schema.fields().iter().zip(batch.columns()) {
        let text: Option<StringArray> = match field.data_type() {
            DataType::FixedSizeBinary(_) => {
                let array = column.as_any().downcast_ref::<FixedSizeBinaryArray>();
                array.map(|array| array.iter().map(|value| value.map(fixed_text)).collect())
            }
            DataType::Binary => column
                .as_any()
                .downcast_ref::<BinaryArray>()
                .map(|array| array.iter().map(|v| v.map(hex)).collect()),
            DataType::LargeBinary => column
                .as_any()
                .downcast_ref::<LargeBinaryArray>()
                .map(|array| array.iter().map(|v| v.map(hex)).collect()),
            _ => None,
        };
        match text {
            Some(text) => {
                fields.push(Field::new(
                    field.name(),
                    DataType::Utf8,
                    field.is_nullable(),
                ));
                columns.push(Arc::new(text));
            }
            None => {
                fields.push(field.as_ref().clone());
                columns.push(Arc::clone(column));
            }
        }
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)
}
