//! The `flows` table: its Arrow schema, a builder from [`FlowRecord`]s to record
//! batches, and the way back.
//!
//! Columns shared in meaning with `packets` share its names (`ts`, `src_addr`,
//! `dst_addr`, `src_port`, `dst_port`, `ip_proto`, `tcp_flags`), so time pruning,
//! address postings and the filter language work on both tables alike. `ts` is the
//! flow's first packet. `docs/formats/segment.md` documents every column.

use std::sync::{Arc, LazyLock};

use arrow::array::{
    Array, ArrayRef, FixedSizeBinaryArray, FixedSizeBinaryBuilder, RecordBatch, StringArray,
    StringBuilder, TimestampNanosecondArray, TimestampNanosecondBuilder, UInt8Array, UInt8Builder,
    UInt16Array, UInt16Builder, UInt64Array, UInt64Builder,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use hindsight_model::{Addr16, FlowRecord, FlowSource, FlowState};

/// Column names of the `flows` table, in schema order.
pub mod col {
    pub use crate::schema::col::{DST_ADDR, DST_PORT, IP_PROTO, SRC_ADDR, SRC_PORT, TCP_FLAGS, TS};
    /// Time of the last packet (timestamp, ns, UTC).
    pub const LAST_TS: &str = "last_ts";
    /// Packets from originator (`src_addr`) to responder.
    pub const PACKETS_OUT: &str = "packets_out";
    /// IP bytes from originator to responder.
    pub const BYTES_OUT: &str = "bytes_out";
    /// Packets from responder to originator.
    pub const PACKETS_IN: &str = "packets_in";
    /// IP bytes from responder to originator.
    pub const BYTES_IN: &str = "bytes_in";
    /// Connection state, Zeek's `conn_state` names (`SF`, `S0`, `REJ`…; `-` unknown).
    pub const STATE: &str = "state";
    /// Where the record came from: `packets`, `zeek`, `netflow5`, `netflow9`, `ipfix`.
    pub const SOURCE: &str = "source";
    /// Exporter address of NetFlow/IPFIX records (null for other sources).
    pub const EXPORTER: &str = "exporter";
    /// Zeek's `uid`; null for the records hindsight builds, whose uid is derived
    /// from the row when read ([`FlowRecord::uid`], and the SQL `flows` table's
    /// `uid`).
    pub const UID: &str = "uid";
}

const ADDR_LEN: i32 = 16;

static FLOWS_SCHEMA: LazyLock<SchemaRef> = LazyLock::new(|| {
    let ts_type = DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into()));
    let mut fields = vec![
        Field::new(col::TS, ts_type.clone(), false),
        Field::new(col::LAST_TS, ts_type, false),
        Field::new(col::SRC_ADDR, DataType::FixedSizeBinary(ADDR_LEN), false),
        Field::new(col::DST_ADDR, DataType::FixedSizeBinary(ADDR_LEN), false),
        Field::new(col::SRC_PORT, DataType::UInt16, false),
        Field::new(col::DST_PORT, DataType::UInt16, false),
        Field::new(col::IP_PROTO, DataType::UInt8, false),
        Field::new(col::PACKETS_OUT, DataType::UInt64, false),
        Field::new(col::BYTES_OUT, DataType::UInt64, false),
        Field::new(col::PACKETS_IN, DataType::UInt64, false),
        Field::new(col::BYTES_IN, DataType::UInt64, false),
        Field::new(col::TCP_FLAGS, DataType::UInt16, false),
        Field::new(col::STATE, DataType::Utf8, false),
        Field::new(col::SOURCE, DataType::Utf8, false),
        Field::new(col::EXPORTER, DataType::FixedSizeBinary(ADDR_LEN), true),
        Field::new(col::UID, DataType::Utf8, true),
    ];
    fields.extend(crate::app_columns::fields());
    Arc::new(Schema::new(fields))
});

/// Returns the Arrow schema of the `flows` table.
pub fn flows_schema() -> SchemaRef {
    Arc::clone(&FLOWS_SCHEMA)
}

/// Accumulates flow records column by column and emits Arrow record batches.
#[derive(Debug)]
pub struct FlowBatchBuilder {
    ts: TimestampNanosecondBuilder,
    last_ts: TimestampNanosecondBuilder,
    src_addr: FixedSizeBinaryBuilder,
    dst_addr: FixedSizeBinaryBuilder,
    src_port: UInt16Builder,
    dst_port: UInt16Builder,
    ip_proto: UInt8Builder,
    packets_out: UInt64Builder,
    bytes_out: UInt64Builder,
    packets_in: UInt64Builder,
    bytes_in: UInt64Builder,
    tcp_flags: UInt16Builder,
    state: StringBuilder,
    source: StringBuilder,
    exporter: FixedSizeBinaryBuilder,
    uid: StringBuilder,
    app: crate::app_columns::AppColumnsBuilder,
    rows: usize,
}

impl Default for FlowBatchBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl FlowBatchBuilder {
    /// Returns an empty builder.
    pub fn new() -> Self {
        Self {
            ts: TimestampNanosecondBuilder::new().with_timezone("UTC"),
            last_ts: TimestampNanosecondBuilder::new().with_timezone("UTC"),
            src_addr: FixedSizeBinaryBuilder::new(ADDR_LEN),
            dst_addr: FixedSizeBinaryBuilder::new(ADDR_LEN),
            src_port: UInt16Builder::new(),
            dst_port: UInt16Builder::new(),
            ip_proto: UInt8Builder::new(),
            packets_out: UInt64Builder::new(),
            bytes_out: UInt64Builder::new(),
            packets_in: UInt64Builder::new(),
            bytes_in: UInt64Builder::new(),
            tcp_flags: UInt16Builder::new(),
            state: StringBuilder::new(),
            source: StringBuilder::new(),
            exporter: FixedSizeBinaryBuilder::new(ADDR_LEN),
            uid: StringBuilder::new(),
            app: crate::app_columns::AppColumnsBuilder::default(),
            rows: 0,
        }
    }

    /// Returns the number of rows appended since the last [`finish`](Self::finish).
    pub fn len(&self) -> usize {
        self.rows
    }

    /// Returns true if no row was appended since the last [`finish`](Self::finish).
    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    /// Appends one record.
    pub fn append(&mut self, r: &FlowRecord) {
        self.ts.append_value(r.first_ns);
        self.last_ts.append_value(r.last_ns);
        append_addr(&mut self.src_addr, Some(r.src));
        append_addr(&mut self.dst_addr, Some(r.dst));
        self.src_port.append_value(r.src_port);
        self.dst_port.append_value(r.dst_port);
        self.ip_proto.append_value(r.proto);
        self.packets_out.append_value(r.packets_out);
        self.bytes_out.append_value(r.bytes_out);
        self.packets_in.append_value(r.packets_in);
        self.bytes_in.append_value(r.bytes_in);
        self.tcp_flags.append_value(r.tcp_flags);
        self.state.append_value(r.state.name());
        self.source.append_value(r.source.name());
        let exporter = (r.exporter != Addr16::default()).then_some(r.exporter);
        append_addr(&mut self.exporter, exporter);
        if r.uid.is_empty() {
            self.uid.append_null();
        } else {
            self.uid.append_value(&r.uid);
        }
        self.app.append(r.app.as_deref());
        self.rows += 1;
    }

    /// Returns the rows appended so far as a record batch and resets the builder.
    pub fn finish(&mut self) -> RecordBatch {
        let mut columns: Vec<ArrayRef> = vec![
            Arc::new(self.ts.finish()),
            Arc::new(self.last_ts.finish()),
            Arc::new(self.src_addr.finish()),
            Arc::new(self.dst_addr.finish()),
            Arc::new(self.src_port.finish()),
            Arc::new(self.dst_port.finish()),
            Arc::new(self.ip_proto.finish()),
            Arc::new(self.packets_out.finish()),
            Arc::new(self.bytes_out.finish()),
            Arc::new(self.packets_in.finish()),
            Arc::new(self.bytes_in.finish()),
            Arc::new(self.tcp_flags.finish()),
            Arc::new(self.state.finish()),
            Arc::new(self.source.finish()),
            Arc::new(self.exporter.finish()),
            Arc::new(self.uid.finish()),
        ];
        columns.extend(self.app.finish());
        self.rows = 0;
        RecordBatch::try_new(flows_schema(), columns)
            .expect("builder columns match the flows schema by construction")
    }
}

fn append_addr(builder: &mut FixedSizeBinaryBuilder, value: Option<Addr16>) {
    match value {
        Some(addr) => builder
            .append_value(addr.0)
            .expect("addresses are 16 bytes by construction"),
        None => builder.append_null(),
    }
}

/// The address in row `row` of an address column; `::` where null.
fn addr(array: &FixedSizeBinaryArray, row: usize) -> Addr16 {
    if array.is_null(row) {
        return Addr16::default();
    }
    Addr16(array.value(row).try_into().unwrap_or_default())
}

/// The source named `name` (`packets` where unknown).
fn source_of(name: &str) -> FlowSource {
    FlowSource::ALL
        .into_iter()
        .find(|s| s.name() == name)
        .unwrap_or_default()
}

pub(crate) fn column<'a, T: 'static>(batch: &'a RecordBatch, name: &str) -> Option<&'a T> {
    batch
        .column_by_name(name)
        .and_then(|array| array.as_any().downcast_ref::<T>())
}

/// Reads the rows of a `flows` record batch back into records. Returns `None` if
/// a column is missing or has another type (not a whole `flows` batch). A null
/// `uid` reads as an empty one (derived: see [`FlowRecord::uid`]).
pub fn flow_records(batch: &RecordBatch) -> Option<Vec<FlowRecord>> {
    let identity = IdentityColumns::of(batch)?;
    let last_ts = column::<TimestampNanosecondArray>(batch, col::LAST_TS)?;
    let packets_out = column::<UInt64Array>(batch, col::PACKETS_OUT)?;
    let bytes_out = column::<UInt64Array>(batch, col::BYTES_OUT)?;
    let packets_in = column::<UInt64Array>(batch, col::PACKETS_IN)?;
    let bytes_in = column::<UInt64Array>(batch, col::BYTES_IN)?;
    let tcp_flags = column::<UInt16Array>(batch, col::TCP_FLAGS)?;
    let state = column::<StringArray>(batch, col::STATE)?;
    let app = crate::app_columns::AppColumns::of(batch);
    let records = (0..batch.num_rows())
        .map(|row| FlowRecord {
            last_ns: last_ts.value(row),
            packets_out: packets_out.value(row),
            bytes_out: bytes_out.value(row),
            packets_in: packets_in.value(row),
            bytes_in: bytes_in.value(row),
            tcp_flags: tcp_flags.value(row),
            state: FlowState::from_name(state.value(row)).unwrap_or_default(),
            app: app.row(row),
            ..identity.record(row)
        })
        .collect();
    Some(records)
}

/// The columns [`uids`] reads: every column [`FlowRecord::derived_uid`] depends
/// on, and the kept `uid`.
pub const UID_INPUTS: [&str; 9] = [
    col::UID,
    col::SOURCE,
    col::TS,
    col::SRC_ADDR,
    col::DST_ADDR,
    col::SRC_PORT,
    col::DST_PORT,
    col::IP_PROTO,
    col::EXPORTER,
];

/// Returns each row's uid ([`FlowRecord::uid`]): the kept one, or the one derived
/// from the row. `batch` needs the columns of [`UID_INPUTS`] only. Returns `None`
/// if one is missing or has another type.
pub fn uids(batch: &RecordBatch) -> Option<StringArray> {
    let identity = IdentityColumns::of(batch)?;
    let mut out = StringBuilder::with_capacity(batch.num_rows(), 18 * batch.num_rows());
    for row in 0..batch.num_rows() {
        if identity.uid.is_valid(row) {
            out.append_value(identity.uid.value(row));
        } else {
            out.append_value(identity.record(row).derived_uid());
        }
    }
    Some(out.finish())
}

/// The columns of [`UID_INPUTS`]: what identifies a record.
struct IdentityColumns<'a> {
    uid: &'a StringArray,
    source: &'a StringArray,
    ts: &'a TimestampNanosecondArray,
    src: &'a FixedSizeBinaryArray,
    dst: &'a FixedSizeBinaryArray,
    src_port: &'a UInt16Array,
    dst_port: &'a UInt16Array,
    proto: &'a UInt8Array,
    exporter: &'a FixedSizeBinaryArray,
}

impl<'a> IdentityColumns<'a> {
    fn of(batch: &'a RecordBatch) -> Option<Self> {
        Some(Self {
            uid: column(batch, col::UID)?,
            source: column(batch, col::SOURCE)?,
            ts: column(batch, col::TS)?,
            src: column(batch, col::SRC_ADDR)?,
            dst: column(batch, col::DST_ADDR)?,
            src_port: column(batch, col::SRC_PORT)?,
            dst_port: column(batch, col::DST_PORT)?,
            proto: column(batch, col::IP_PROTO)?,
            exporter: column(batch, col::EXPORTER)?,
        })
    }

    /// Row `row` as a record with its identifying fields only (the kept uid, or
    /// an empty one where it is null); the counters and state are zero.
    fn record(&self, row: usize) -> FlowRecord {
        FlowRecord {
            first_ns: self.ts.value(row),
            src: addr(self.src, row),
            dst: addr(self.dst, row),
            src_port: self.src_port.value(row),
            dst_port: self.dst_port.value(row),
            proto: self.proto.value(row),
            source: source_of(self.source.value(row)),
            exporter: addr(self.exporter, row),
            uid: if self.uid.is_null(row) {
                String::new()
            } else {
                self.uid.value(row).to_owned()
            },
            ..FlowRecord::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hindsight_model::app::{AppFields, DnsFields, HttpFields, SshFields, TlsFields};
    use hindsight_model::ip_proto;

    #[test]
    fn records_round_trip_through_a_batch() {
        let record = FlowRecord {
            first_ns: 1_000,
            last_ns: 9_000,
            src: Addr16::from_v4_bytes([10, 0, 0, 1]),
            dst: Addr16::from_v4_bytes([10, 0, 0, 2]),
            src_port: 40_000,
            dst_port: 443,
            proto: ip_proto::TCP,
            packets_out: 5,
            bytes_out: 700,
            packets_in: 4,
            bytes_in: 5_000,
            tcp_flags: 0x1b,
            state: FlowState::SF,
            source: FlowSource::Ipfix,
            exporter: Addr16::from_v4_bytes([192, 0, 2, 9]),
            uid: "CabcdefghijklmnopQ".to_owned(),
            app: Some(Box::new(AppFields {
                dns: Some(DnsFields {
                    id: 0,
                    query: "www.example.com".into(),
                    qtype: 1,
                    rcode: Some(0),
                    answers: vec!["web.example.com".into(), "192.0.2.1".into()],
                    ttls: vec![60, 30],
                }),
                tls: Some(TlsFields {
                    sni: Some("example.com".into()),
                    alpn: vec!["h2".into(), "http/1.1".into()],
                    client_version: Some(0x0303),
                    version: Some(0x0304),
                    cipher: Some(0x1301),
                    ja3: Some("a".into()),
                    ja3s: Some("b".into()),
                    ja4: Some("t13d1516h2_8daaf6152771_e5627efa2ab1".into()),
                }),
                http: Some(HttpFields {
                    status: Some(200),
                    ..HttpFields::default()
                }),
                quic_version: Some(1),
                ssh: Some(SshFields {
                    client: None,
                    server: Some("SSH-2.0-x".into()),
                }),
            })),
        };
        let plain = FlowRecord {
            source: FlowSource::Packets,
            exporter: Addr16::default(),
            state: FlowState::Unknown,
            app: None,
            ..record.clone()
        };
        let mut builder = FlowBatchBuilder::new();
        builder.append(&record);
        builder.append(&plain);
        let batch = builder.finish();
        assert_eq!(batch.schema(), flows_schema());
        assert_eq!(flow_records(&batch), Some(vec![record, plain]));
        assert!(builder.is_empty());
    }
}
