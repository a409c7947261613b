//! SQL functions hindsight adds to DataFusion's: address literals and printing,
//! prefixes and networks (`ip_prefix`, `ip_in`, `ip_home`), and `time_bucket`.

use std::net::IpAddr;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, BooleanArray, FixedSizeBinaryArray, Int64Array, RecordBatch, StringArray,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::common::{ScalarValue, exec_err};
use datafusion::error::Result;
use datafusion::logical_expr::{ColumnarValue, ScalarUDF, Volatility, create_udf};
use datafusion::prelude::SessionContext;
use hindsight_model::{Addr16, network_range};
use hindsight_store::flows::{UID_INPUTS, flows_schema, uids};

/// Width of the address columns.
const ADDR_LEN: i32 = 16;

/// Networks as inclusive address ranges (`hindsight_model::network_range`).
pub type Networks = Vec<(Addr16, Addr16)>;

/// Every function hindsight adds, for an engine of its own (a distributed
/// one's scheduler and executors): those of [`register`], with `ip_home`
/// refusing for want of a home network, and `flow_uid`, which the `uid`
/// column of `flows` calls.
pub fn scalar_functions() -> Vec<ScalarUDF> {
    let mut functions = address_functions();
    functions.push(home_function(None));
    functions.push(flow_uid());
    functions.extend(crate::output_bound::functions());
    functions
}

/// Registers `ip`, `ip_str`, `ip_prefix`, `ip_in`, `ip_home` (no home network
/// yet: see [`register_home`]) and `time_bucket` with `context`, and
/// `repeat`, `lpad` and `rpad` bounded in what they make and
/// `approx_distinct` in what it holds (`output_bound`) over DataFusion's own.
pub fn register(context: &SessionContext) {
    for function in address_functions()
        .into_iter()
        .chain(crate::output_bound::functions())
    {
        context.register_udf(function);
    }
    for function in crate::output_bound::aggregate_functions() {
        context.register_udaf(function);
    }
    register_home(context, None);
}

/// `ip`, `ip_str`, `ip_prefix`, `ip_in` and `time_bucket`.
fn address_functions() -> Vec<ScalarUDF> {
    let date_bin = datafusion::functions::datetime::date_bin();
    vec![
        create_udf(
            "ip",
            vec![DataType::Utf8],
            DataType::FixedSizeBinary(ADDR_LEN),
            Volatility::Immutable,
            Arc::new(ip),
        ),
        create_udf(
            "ip_str",
            vec![DataType::FixedSizeBinary(ADDR_LEN)],
            DataType::Utf8,
            Volatility::Immutable,
            Arc::new(ip_str),
        ),
        create_udf(
            "ip_prefix",
            vec![DataType::FixedSizeBinary(ADDR_LEN), DataType::Int64],
            DataType::FixedSizeBinary(ADDR_LEN),
            Volatility::Immutable,
            Arc::new(ip_prefix),
        ),
        create_udf(
            "ip_in",
            vec![DataType::FixedSizeBinary(ADDR_LEN), DataType::Utf8],
            DataType::Boolean,
            Volatility::Immutable,
            Arc::new(ip_in),
        ),
        date_bin.as_ref().clone().with_aliases(["time_bucket"]),
    ]
}

/// Registers `ip_home(addr)`: whether `addr` is in one of the `home` networks;
/// without them, an error that says where a home network is set.
pub fn register_home(context: &SessionContext, home: Option<Networks>) {
    context.register_udf(home_function(home));
}

/// `ip_home(addr)` over `home` (see [`register_home`]).
fn home_function(home: Option<Networks>) -> ScalarUDF {
    create_udf(
        "ip_home",
        vec![DataType::FixedSizeBinary(ADDR_LEN)],
        DataType::Boolean,
        Volatility::Immutable,
        Arc::new(move |args: &[ColumnarValue]| {
            let Some(home) = &home else {
                return exec_err!(
                    "ip_home(): no home network is set ([network] home in the archive's \
                     config.toml, or --home)"
                );
            };
            let [addr] = args else {
                return exec_err!("ip_home() takes one argument");
            };
            map_addrs("ip_home", addr, |a| {
                Some(home.iter().any(|(low, high)| (low.0..=high.0).contains(&a)))
            })
        }),
    )
}

/// Applies `f` to each address of `arg` (NULL stays NULL), giving booleans.
fn map_addrs(
    name: &str,
    arg: &ColumnarValue,
    f: impl Fn([u8; 16]) -> Option<bool>,
) -> Result<ColumnarValue> {
    let as_addr = |bytes: &[u8]| <[u8; 16]>::try_from(bytes).ok();
    match arg {
        ColumnarValue::Scalar(ScalarValue::FixedSizeBinary(_, bytes)) => Ok(ColumnarValue::Scalar(
            ScalarValue::Boolean(bytes.as_deref().and_then(as_addr).and_then(&f)),
        )),
        ColumnarValue::Array(array) => {
            let Some(addrs) = array.as_any().downcast_ref::<FixedSizeBinaryArray>() else {
                return exec_err!(
                    "{name}() takes an address column, not {}",
                    array.data_type()
                );
            };
            let out: BooleanArray = addrs
                .iter()
                .map(|a| a.and_then(as_addr).and_then(&f))
                .collect();
            Ok(ColumnarValue::Array(Arc::new(out) as ArrayRef))
        }
        ColumnarValue::Scalar(other) => {
            exec_err!(
                "{name}() takes an address column, not {}",
                other.data_type()
            )
        }
    }
}

/// The first `len` bits of `addr` (an IPv4 address's own bits for a mapped
/// one), the rest zero.
fn prefix_of(addr: [u8; 16], len: i64) -> Result<[u8; 16]> {
    let value = u128::from_be_bytes(addr);
    let v4 = Addr16(addr).is_v4();
    let family = if v4 { 32 } else { 128 };
    let Some(len) = u32::try_from(len).ok().filter(|&len| len <= family) else {
        return exec_err!(
            "ip_prefix(): the prefix length must be from 0 to {family} for an IPv{} address, not {len}",
            if v4 { 4 } else { 6 }
        );
    };
    let host_bits = family - len;
    let host_mask = if host_bits == 128 {
        u128::MAX
    } else {
        (1u128 << host_bits) - 1
    };
    Ok((value & !host_mask).to_be_bytes())
}

/// `ip_prefix(addr, len)`: the network of `addr` with a prefix of `len` bits
/// (`ip_prefix(ip('10.1.2.3'), 24)` is `10.1.2.0`), an address itself.
fn ip_prefix(args: &[ColumnarValue]) -> Result<ColumnarValue> {
    let [addr, len] = args else {
        return exec_err!("ip_prefix() takes an address and a prefix length");
    };
    let rows = match (addr, len) {
        (ColumnarValue::Scalar(_), ColumnarValue::Scalar(_)) => None,
        (ColumnarValue::Array(a), _) | (_, ColumnarValue::Array(a)) => Some(a.len()),
    };
    let addrs = addr.to_array(rows.unwrap_or(1))?;
    let lens = len.to_array(rows.unwrap_or(1))?;
    let (Some(addrs), Some(lens)) = (
        addrs.as_any().downcast_ref::<FixedSizeBinaryArray>(),
        lens.as_any().downcast_ref::<Int64Array>(),
    ) else {
        return exec_err!("ip_prefix() takes an address column and an integer");
    };
    let prefixes: Vec<Option<[u8; 16]>> = addrs
        .iter()
        .zip(lens.iter())
        .map(
            |(addr, len)| match (addr.and_then(|a| <[u8; 16]>::try_from(a).ok()), len) {
                (Some(addr), Some(len)) => prefix_of(addr, len).map(Some),
                _ => Ok(None),
            },
        )
        .collect::<Result<_>>()?;
    let array = if prefixes.iter().all(Option::is_none) {
        FixedSizeBinaryArray::new_null(ADDR_LEN, prefixes.len())
    } else {
        FixedSizeBinaryArray::try_from_sparse_iter_with_size(prefixes.into_iter(), ADDR_LEN)?
    };
    Ok(match rows {
        Some(_) => ColumnarValue::Array(Arc::new(array) as ArrayRef),
        None => ColumnarValue::Scalar(ScalarValue::try_from_array(&array, 0)?),
    })
}

/// `ip_in(addr, 'net')`: whether `addr` is in the network `net`
/// (`10.0.0.0/8`, `2001:db8::/32`, or one address), as tcpdump's `net`.
fn ip_in(args: &[ColumnarValue]) -> Result<ColumnarValue> {
    let [addr, net] = args else {
        return exec_err!("ip_in() takes an address and a network");
    };
    let parse = |text: &str| match network_range(text) {
        Ok((low, high)) => Ok((low.0, high.0)),
        Err(reason) => exec_err!("ip_in(): {reason}"),
    };
    match net {
        ColumnarValue::Scalar(ScalarValue::Utf8(Some(text))) => {
            let (low, high) = parse(text)?;
            map_addrs("ip_in", addr, |a| Some((low..=high).contains(&a)))
        }
        ColumnarValue::Scalar(ScalarValue::Utf8(None)) => map_addrs("ip_in", addr, |_| None),
        ColumnarValue::Array(nets) => {
            let rows = nets.len();
            let addrs = addr.to_array(rows)?;
            let (Some(addrs), Some(nets)) = (
                addrs.as_any().downcast_ref::<FixedSizeBinaryArray>(),
                nets.as_any().downcast_ref::<StringArray>(),
            ) else {
                return exec_err!("ip_in() takes an address column and text");
            };
            let out = addrs
                .iter()
                .zip(nets.iter())
                .map(|(addr, net)| {
                    let (Some(addr), Some(net)) =
                        (addr.and_then(|a| <[u8; 16]>::try_from(a).ok()), net)
                    else {
                        return Ok(None);
                    };
                    let (low, high) = parse(net)?;
                    Ok(Some((low..=high).contains(&addr)))
                })
                .collect::<Result<BooleanArray>>()?;
            Ok(ColumnarValue::Array(Arc::new(out) as ArrayRef))
        }
        ColumnarValue::Scalar(other) => {
            exec_err!("ip_in() takes a network as text, not {}", other.data_type())
        }
    }
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
