//! SQL rows as an aligned table, CSV, JSON lines or Parquet (`hindsight sql`,
//! `POST /api/v1/sql`). Addresses and MACs are printed in their usual text forms
//! and raw bytes in hex, in every text format.

use std::fmt::Write as _;
use std::io::Write;
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, BinaryArray, FixedSizeBinaryArray, LargeBinaryArray, RecordBatch, StringArray,
};
use arrow::datatypes::{DataType, Field, Schema};
use arrow::error::ArrowError;
use hindsight_model::{Addr16, mac_text};

use crate::{Answer, Format};

/// Errors writing rows.
#[derive(Debug)]
pub enum RowsError {
    /// The rows cannot be written in the format asked for.
    Format(String),
    /// The rows could not be formatted.
    Arrow(ArrowError),
    /// The output could not be written.
    Io(std::io::Error),
}

impl std::fmt::Display for RowsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Format(message) => f.write_str(message),
            Self::Arrow(error) => write!(f, "cannot format the result: {error}"),
            Self::Io(error) => write!(f, "cannot write the result: {error}"),
        }
    }
}

impl std::error::Error for RowsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Format(_) => None,
            Self::Arrow(error) => Some(error),
            Self::Io(error) => Some(error),
        }
    }
}

impl From<ArrowError> for RowsError {
    fn from(error: ArrowError) -> Self {
        Self::Arrow(error)
    }
}

impl From<std::io::Error> for RowsError {
    fn from(error: std::io::Error) -> Self {
        Self::Io(error)
    }
}

/// Writes `batches` to `out` in `format`.
pub fn write(
    batches: &[RecordBatch],
    format: Format,
    out: &mut dyn Write,
) -> Result<(), RowsError> {
    format.check(Answer::Rows).map_err(RowsError::Format)?;
    let batches = batches
        .iter()
        .map(readable)
        .collect::<Result<Vec<_>, _>>()?;
    match format {
        Format::Table => {
            let table = arrow::util::pretty::pretty_format_batches(&batches)?;
            writeln!(out, "{table}")?;
            let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
            writeln!(out, "{rows} row(s)")?;
        }
        Format::Csv => {
            let mut writer = arrow::csv::WriterBuilder::new()
                .with_header(true)
                .build(out);
            for batch in &batches {
                writer.write(batch)?;
            }
        }
        Format::Jsonl => {
            let mut writer = arrow::json::LineDelimitedWriter::new(out);
            for batch in &batches {
                writer.write(batch)?;
            }
            writer.finish()?;
        }
        Format::Parquet => {
            let schema = match batches.first() {
                Some(batch) => batch.schema(),
                None => Arc::new(Schema::empty()),
            };
            let properties = parquet::file::properties::WriterProperties::builder()
                .set_compression(parquet::basic::Compression::ZSTD(
                    parquet::basic::ZstdLevel::default(),
                ))
                .build();
            // The writer wants a `Send` sink; the result is bounded by the row limit.
            let mut file = Vec::new();
            let mut writer =
                parquet::arrow::ArrowWriter::try_new(&mut file, schema, Some(properties))
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
        Format::Pcap | Format::Pcapng | Format::Rows => {}
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
