//! SQL functions hindsight adds to DataFusion's: address literals and printing, and
//! `time_bucket`.

use std::net::IpAddr;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, FixedSizeBinaryArray, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::common::{ScalarValue, exec_err};
use datafusion::error::Result;
use datafusion::logical_expr::{ColumnarValue, ScalarUDF, Volatility, create_udf};
use datafusion::prelude::SessionContext;
use hindsight_model::Addr16;
use hindsight_store::flows::{UID_INPUTS, flows_schema, uids};

/// Width of the address columns.
const ADDR_LEN: i32 = 16;

/// Registers `ip`, `ip_str` and `time_bucket` with `context`.
pub fn register(context: &SessionContext) {
    context.register_udf(create_udf(
        "ip",
        vec![DataType::Utf8],
        DataType::FixedSizeBinary(ADDR_LEN),
        Volatility::Immutable,
        Arc::new(ip),
    ));
    context.register_udf(create_udf(
        "ip_str",
        vec![DataType::FixedSizeBinary(ADDR_LEN)],
        DataType::Utf8,
        Volatility::Immutable,
        Arc::new(ip_str),
    ));
    let date_bin = datafusion::functions::datetime::date_bin();
    context.register_udf(date_bin.as_ref().clone().with_aliases(["time_bucket"]));
}

/// Parses an address literal, IPv4 or IPv6, into an [`Addr16`].
fn parse_addr(text: &str) -> Result<Addr16> {
    match text.trim().parse::<IpAddr>() {
        Ok(ip) => Ok(Addr16::from(ip)),
        Err(_) => exec_err!("ip(): {text:?} is not an IPv4 or IPv6 address"),
    }
}

/// `ip(text)`: the 16-byte form of an address, IPv4 mapped into IPv6.
fn ip(args: &[ColumnarValue]) -> Result<ColumnarValue> {
    let [arg] = args else {
        return exec_err!("ip() takes one argument");
    };
    match arg {
        ColumnarValue::Scalar(ScalarValue::Utf8(text)) => {
            let value = text.as_deref().map(parse_addr).transpose()?;
            Ok(ColumnarValue::Scalar(ScalarValue::FixedSizeBinary(
                ADDR_LEN,
                value.map(|addr| addr.0.to_vec()),
            )))
        }
        ColumnarValue::Scalar(other) => exec_err!("ip() takes text, not {}", other.data_type()),
        ColumnarValue::Array(array) => {
            let Some(strings) = array.as_any().downcast_ref::<StringArray>() else {
                return exec_err!("ip() takes text, not {}", array.data_type());
            };
            let parsed: Result<Vec<Option<[u8; 16]>>> = strings
                .iter()
                .map(|text| text.map(|t| parse_addr(t).map(|a| a.0)).transpose())
                .collect();
            let array = FixedSizeBinaryArray::try_from_sparse_iter_with_size(
                parsed?.into_iter(),
                ADDR_LEN,
            )?;
            Ok(ColumnarValue::Array(Arc::new(array) as ArrayRef))
        }
    }
}

fn addr_text(bytes: &[u8]) -> Option<String> {
    let octets: [u8; 16] = bytes.try_into().ok()?;
    Some(Addr16(octets).to_string())
}

/// `ip_str(addr)`: the text form of a 16-byte address (IPv4 dotted for mapped ones);
/// NULL where the address is NULL (non-IP rows).
fn ip_str(args: &[ColumnarValue]) -> Result<ColumnarValue> {
    let [arg] = args else {
        return exec_err!("ip_str() takes one argument");
    };
    match arg {
        ColumnarValue::Scalar(ScalarValue::FixedSizeBinary(_, bytes)) => Ok(ColumnarValue::Scalar(
            ScalarValue::Utf8(bytes.as_deref().and_then(addr_text)),
        )),
        ColumnarValue::Scalar(other) => {
            exec_err!(
                "ip_str() takes an address column, not {}",
                other.data_type()
            )
        }
        ColumnarValue::Array(array) => {
            let Some(addrs) = array.as_any().downcast_ref::<FixedSizeBinaryArray>() else {
                return exec_err!(
                    "ip_str() takes an address column, not {}",
                    array.data_type()
                );
            };
            let text: StringArray = addrs.iter().map(|a| a.and_then(addr_text)).collect();
            Ok(ColumnarValue::Array(Arc::new(text) as ArrayRef))
        }
    }
}

/// `flow_uid(uid, source, ts, src_addr, dst_addr, src_port, dst_port, ip_proto,
/// exporter)`: the `flows` table's `uid`, the kept one or the one derived from the
/// row (see `hindsight_store::flows::uids`). Not registered: the `flows` table
/// calls it for its `uid` column.
pub(crate) fn flow_uid() -> ScalarUDF {
    let schema = flows_schema();
    let inputs = UID_INPUTS
        .iter()
        .filter_map(|name| schema.field_with_name(name).ok())
        .map(|field| field.data_type().clone())
        .collect();
    create_udf(
        "flow_uid",
        inputs,
        DataType::Utf8,
        Volatility::Immutable,
        Arc::new(flow_uids),
    )
}

fn flow_uids(args: &[ColumnarValue]) -> Result<ColumnarValue> {
    let arrays = ColumnarValue::values_to_arrays(args)?;
    if arrays.len() != UID_INPUTS.len() {
        return exec_err!("flow_uid() takes {} arguments", UID_INPUTS.len());
    }
    let fields: Vec<Field> = UID_INPUTS
        .iter()
        .zip(&arrays)
        .map(|(name, array)| Field::new(*name, array.data_type().clone(), true))
        .collect();
    let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays)?;
    match uids(&batch) {
        Some(uids) => Ok(ColumnarValue::Array(Arc::new(uids) as ArrayRef)),
        None => exec_err!(
            "flow_uid() takes the flows table's uid, source, ts, address, port, protocol and exporter columns"
        ),
    }
}
