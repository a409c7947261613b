//! Packets as an aligned table for people, CSV and JSON lines for programs, pcap
//! and pcapng for Wireshark and tcpdump (`hindsight query`, `GET /api/v1/query`).

use std::io::{self, Write};

use hindsight_capture::{PcapWriter, PcapngWriter, TimestampPrecision};
use hindsight_model::{
    Addr16, DataForm, LinkType, PacketHeaders, PacketRecord, TunnelId, col, ip_proto, mac_text,
    tunnel,
};
use hindsight_model::{CoveredRow, CoveredRowsBuilder, decode_covered_rows};
use serde_json::{Map, Value};

use crate::time::format_nanos;
use crate::{Answer, Format};

/// Receives matching packets and writes them in one format.
pub trait PacketSink {
    /// Writes one packet.
    fn write(&mut self, record: &PacketRecord, data: &[u8]) -> io::Result<()>;
    /// Writes what remains and flushes.
    fn finish(&mut self) -> io::Result<()>;
    /// The node of a cluster the next packets come from: the table, CSV and
    /// JSON lines get a `node` column (from the first packet on, so call it
    /// before the first), pcapng an interface per node and link type named
    /// after the node; pcap has no place for it.
    fn set_node(&mut self, _node: &str) {}
}

/// Snap length written in exported capture headers: the largest tcpdump uses.
pub const SNAPLEN: u32 = 262_144;

/// Returns the sink for `format` writing to `out`; an error names the formats
/// of packets if `format` is not one.
pub fn packet_sink<'a>(
    format: Format,
    out: Box<dyn Write + 'a>,
) -> Result<Box<dyn PacketSink + 'a>, String> {
    let snaplen = SNAPLEN;
    Ok(match format {
        Format::Table => Box::new(TableSink {
            out,
            header_written: false,
            node: None,
        }),
        Format::Csv => Box::new(CsvSink {
            out,
            header_written: false,
            node: None,
        }),
        Format::Jsonl => Box::new(JsonlSink { out, node: None }),
        Format::Pcap => Box::new(PcapSink {
            out: Some(out),
            writer: None,
            link_type: None,
            snaplen,
        }),
        Format::Pcapng => Box::new(PcapngSink {
            out: Some(out),
            writer: None,
            snaplen,
            node: None,
        }),
        Format::Rows => Box::new(RowsSink {
            out,
            chunk: CoveredRowsBuilder::new(),
        }),
        Format::Parquet => return Err(format.check(Answer::Packets).err().unwrap_or_default()),
    })
}

/// Returns the conventional name of an IP protocol number (`TCP`, `UDP`...).
pub fn proto_name(proto: u8) -> String {
    match proto {
        ip_proto::ICMP => "ICMP".to_owned(),
        2 => "IGMP".to_owned(),
        4 => "IPIP".to_owned(),
        ip_proto::TCP => "TCP".to_owned(),
        ip_proto::UDP => "UDP".to_owned(),
        41 => "IPv6".to_owned(),
        47 => "GRE".to_owned(),
        50 => "ESP".to_owned(),
        51 => "AH".to_owned(),
        ip_proto::ICMPV6 => "ICMPv6".to_owned(),
        89 => "OSPF".to_owned(),
        ip_proto::SCTP => "SCTP".to_owned(),
        other => format!("proto-{other}"),
    }
}

/// Formats TCP flags as tcpdump does: `[S.]`, `[P.]`, `[F.]`, `[R]`, `[.]`.
pub fn tcp_flags_text(flags: u16) -> String {
    use hindsight_model::tcp_flags::{ACK, CWR, ECE, FIN, PSH, RST, SYN, URG};
    let mut text = String::from("[");
    for (bit, letter) in [
        (SYN, 'S'),
        (FIN, 'F'),
        (PSH, 'P'),
        (RST, 'R'),
        (URG, 'U'),
        (ECE, 'E'),
        (CWR, 'W'),
    ] {
        if flags & bit != 0 {
            text.push(letter);
        }
    }
    if flags & ACK != 0 {
        text.push('.');
    }
    if text.len() == 1 {
        text.push_str("none");
    }
    text.push(']');
    text
}

fn endpoint(addr: Option<Addr16>, port: Option<u16>) -> String {
    match (addr, port) {
        (Some(addr), Some(port)) if addr.is_v4() => format!("{addr}:{port}"),
        (Some(addr), Some(port)) => format!("[{addr}]:{port}"),
        (Some(addr), None) => addr.to_string(),
        (None, _) => "-".to_owned(),
    }
}

fn protocol_text(record: &PacketRecord) -> String {
    let h = &record.headers;
    match (h.ip_proto, h.eth_type) {
        (Some(proto), _) if h.ip_version.is_some() => proto_name(proto),
        (_, Some(0x0806)) => "ARP".to_owned(),
        (_, Some(eth_type)) => format!("0x{eth_type:04x}"),
        (_, None) => "-".to_owned(),
    }
}

fn info_text(record: &PacketRecord) -> String {
    let h = &record.headers;
    if let Some(flags) = h.tcp_flags {
        return tcp_flags_text(flags);
    }
    if let (Some(kind), Some(code)) = (h.icmp_type, h.icmp_code) {
        return format!("type {kind} code {code}");
    }
    if h.frag_offset.is_some_and(|offset| offset > 0) {
        return format!(
            "fragment offset {}",
            u32::from(h.frag_offset.unwrap_or(0)) * 8
        );
    }
    h.status.name().to_owned()
}

struct TableSink<'a> {
    out: Box<dyn Write + 'a>,
    header_written: bool,
    node: Option<String>,
}

impl PacketSink for TableSink<'_> {
    fn write(&mut self, record: &PacketRecord, _data: &[u8]) -> io::Result<()> {
        if !self.header_written {
            self.header_written = true;
            if self.node.is_some() {
                write!(self.out, "{:<12} ", "node")?;
            }
            writeln!(
                self.out,
                "{:<30} {:<6} {:>45} {:<45} {:>6} info",
                "time", "proto", "source", "destination", "len"
            )?;
        }
        if let Some(node) = &self.node {
            write!(self.out, "{node:<12} ")?;
        }
        let h = &record.headers;
        writeln!(
            self.out,
            "{:<30} {:<6} {:>45} {:<45} {:>6} {}",
            format_nanos(record.ts_nanos),
            protocol_text(record),
            endpoint(h.src_addr, h.src_port),
            endpoint(h.dst_addr, h.dst_port),
            record.wire_len,
            info_text(record)
        )
    }

    fn finish(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    fn set_node(&mut self, node: &str) {
        set_node(&mut self.node, node);
    }
}

/// Remembers `node` in `slot` (without a new allocation when it is the same).
fn set_node(slot: &mut Option<String>, node: &str) {
    if slot.as_deref() != Some(node) {
        *slot = Some(node.to_owned());
    }
}

/// A header column's value as CSV and JSON print it.
trait Text {
    /// The value of the column named `column` as text.
    fn text(self, column: &str) -> String;
}

macro_rules! text_display {
    ($($ty:ty),*) => {$(
        impl Text for $ty {
            fn text(self, _: &str) -> String {
                self.to_string()
            }
        }
    )*};
}
text_display!(u8, u32, bool, Addr16);

impl Text for u16 {
    fn text(self, column: &str) -> String {
        match column {
            col::ETH_TYPE => format!("0x{self:04x}"),
            col::TUNNEL => tunnel::names(self),
            _ => self.to_string(),
        }
    }
}

impl Text for [u8; 6] {
    fn text(self, _: &str) -> String {
        mac_text(self)
    }
}

impl Text for TunnelId {
    fn text(self, _: &str) -> String {
        format!("{}:{}", tunnel::names(self.kind), self.id)
    }
}

macro_rules! header_texts {
    ($($(#[$doc:meta])* $konst:ident = $name:literal, $field:ident: $ty:ty;)*) => {
        /// The header columns' texts, in schema order.
        fn header_texts(h: &PacketHeaders) -> [(&'static str, Option<String>); col::HEADERS.len()] {
            [$((col::$konst, h.$field.map(|value| value.text(col::$konst)))),*]
        }
    };
}
hindsight_model::packet_header_columns!(header_texts);

/// Each printed column's name and text, in order: the time, the frame's
/// columns and the header columns.
fn record_fields(record: &PacketRecord) -> Vec<(&'static str, Option<String>)> {
    let h = &record.headers;
    let mut fields = vec![
        ("ts", Some(format_nanos(record.ts_nanos))),
        ("ts_nanos", Some(record.ts_nanos.to_string())),
        ("iface", Some(record.iface.to_string())),
        ("link_type", Some(record.link_type.0.to_string())),
        ("wire_len", Some(record.wire_len.to_string())),
        ("cap_len", Some(record.cap_len.to_string())),
        ("status", Some(h.status.name().to_owned())),
    ];
    fields.extend(header_texts(h));
    fields
}

struct CsvSink<'a> {
    out: Box<dyn Write + 'a>,
    header_written: bool,
    node: Option<String>,
}

impl PacketSink for CsvSink<'_> {
    fn write(&mut self, record: &PacketRecord, _data: &[u8]) -> io::Result<()> {
        let (names, values): (Vec<&str>, Vec<String>) = record_fields(record)
            .into_iter()
            .map(|(name, value)| (name, value.unwrap_or_default()))
            .unzip();
        if !self.header_written {
            self.header_written = true;
            if self.node.is_some() {
                write!(self.out, "node,")?;
            }
            writeln!(self.out, "{}", names.join(","))?;
        }
        if let Some(node) = &self.node {
            // Node names are letters, digits, '-', '_' and '.'.
            write!(self.out, "{node},")?;
        }
        // No field can hold a comma, quote or newline, so no quoting is needed.
        writeln!(self.out, "{}", values.join(","))
    }

    fn finish(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    fn set_node(&mut self, node: &str) {
        set_node(&mut self.node, node);
    }
}

struct JsonlSink<'a> {
    out: Box<dyn Write + 'a>,
    node: Option<String>,
}

impl PacketSink for JsonlSink<'_> {
    fn write(&mut self, record: &PacketRecord, _data: &[u8]) -> io::Result<()> {
        let mut object = Map::new();
        if let Some(node) = &self.node {
            object.insert("node".to_owned(), Value::String(node.clone()));
        }
        for (name, value) in record_fields(record) {
            let Some(value) = value else { continue };
            let json = match name {
                "ts" | "status" | "eth_src" | "eth_dst" | "eth_type" | "src_addr" | "dst_addr" => {
                    Value::String(value)
                }
                _ => serde_json::from_str(&value).unwrap_or(Value::String(value)),
            };
            object.insert(name.to_owned(), json);
        }
        serde_json::to_writer(&mut self.out, &Value::Object(object))?;
        self.out.write_all(b"\n")
    }

    fn finish(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    fn set_node(&mut self, node: &str) {
        set_node(&mut self.node, node);
    }
}

struct PcapSink<'a> {
    out: Option<Box<dyn Write + 'a>>,
    writer: Option<PcapWriter<Box<dyn Write + 'a>>>,
    link_type: Option<LinkType>,
    snaplen: u32,
}

impl PacketSink for PcapSink<'_> {
    fn write(&mut self, record: &PacketRecord, data: &[u8]) -> io::Result<()> {
        match self.link_type {
            Some(link_type) if link_type != record.link_type => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "the results mix link types {link_type} and {}, which one pcap file \
                         cannot hold; write pcapng (--format pcapng) or narrow the filter \
                         (e.g. frame.interface_id == N)",
                        record.link_type
                    ),
                ));
            }
            Some(_) => {}
            None => {
                self.link_type = Some(record.link_type);
                if let Some(out) = self.out.take() {
                    self.writer = Some(PcapWriter::new(
                        out,
                        record.link_type,
                        self.snaplen,
                        TimestampPrecision::Nanos,
                    )?);
                }
            }
        }
        match self.writer.as_mut() {
            Some(writer) => writer.write_frame(record.ts_nanos, record.wire_len, data),
            None => Ok(()),
        }
    }

    fn finish(&mut self) -> io::Result<()> {
        if let Some(writer) = self.writer.as_mut() {
            return writer.flush();
        }
        // No packet matched: still write a valid, empty pcap file.
        if let Some(out) = self.out.take() {
            let mut writer = PcapWriter::new(
                out,
                LinkType::ETHERNET,
                self.snaplen,
                TimestampPrecision::Nanos,
            )?;
            writer.flush()?;
        }
        Ok(())
    }
}

struct PcapngSink<'a> {
    out: Option<Box<dyn Write + 'a>>,
    writer: Option<PcapngWriter<Box<dyn Write + 'a>>>,
    snaplen: u32,
    node: Option<String>,
}

impl<'a> PcapngSink<'a> {
    fn writer(&mut self) -> io::Result<Option<&mut PcapngWriter<Box<dyn Write + 'a>>>> {
        if let Some(out) = self.out.take() {
            self.writer = Some(PcapngWriter::new(out, self.snaplen)?);
        }
        Ok(self.writer.as_mut())
    }
}

impl PacketSink for PcapngSink<'_> {
    fn write(&mut self, record: &PacketRecord, data: &[u8]) -> io::Result<()> {
        let node = self.node.clone();
        match self.writer()? {
            Some(writer) => writer.write_frame_named(
                record.link_type,
                node.as_deref(),
                record.ts_nanos,
                record.wire_len,
                data,
            ),
            None => Ok(()),
        }
    }

    fn set_node(&mut self, node: &str) {
        set_node(&mut self.node, node);
    }

    fn finish(&mut self) -> io::Result<()> {
        // With no packet, still a valid pcapng file: a section header alone.
        match self.writer()? {
            Some(writer) => writer.flush(),
            None => Ok(()),
        }
    }
}

/// Rows of one chunk of the `rows` format.
const ROWS_PER_CHUNK: u32 = 512;
/// The largest chunk a reader takes, bytes.
const MAX_ROWS_CHUNK: usize = 64 << 20;

/// The `rows` format: chunks of up to 512 packets, each a little-endian `u32`
/// length and the packets in the covering-row encoding
/// (`hindsight_model::covering`: every stored field, then the packet's bytes as
/// captured), rows numbered from 0 in each chunk.
struct RowsSink<'a> {
    out: Box<dyn Write + 'a>,
    chunk: CoveredRowsBuilder,
}

impl RowsSink<'_> {
    fn flush_chunk(&mut self) -> io::Result<()> {
        if self.chunk.rows() == 0 {
            return Ok(());
        }
        let chunk = std::mem::take(&mut self.chunk).finish();
        let length = u32::try_from(chunk.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a chunk over 4 GiB"))?;
        self.out.write_all(&length.to_le_bytes())?;
        self.out.write_all(&chunk)
    }
}

impl PacketSink for RowsSink<'_> {
    fn write(&mut self, record: &PacketRecord, data: &[u8]) -> io::Result<()> {
        let row = u64::from(self.chunk.rows());
        self.chunk.push(row, record, DataForm::VERBATIM, data);
        if self.chunk.rows() >= ROWS_PER_CHUNK {
            self.flush_chunk()?;
        }
        Ok(())
    }

    fn finish(&mut self) -> io::Result<()> {
        self.flush_chunk()?;
        self.out.flush()
    }
}

/// Reads the next chunk of a `rows` stream: `None` at its clean end, an error
/// if it is cut short or its bytes are not rows (nothing read from the network
/// is trusted).
pub fn read_rows_chunk(source: &mut dyn io::Read) -> io::Result<Option<Vec<CoveredRow>>> {
    let mut length = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match source.read(&mut length[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the rows stream ends inside a chunk's length",
                ));
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let length = u32::from_le_bytes(length) as usize;
    if length > MAX_ROWS_CHUNK {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a rows chunk of {length} bytes, over the {MAX_ROWS_CHUNK} a chunk may hold"),
        ));
    }
    let mut bytes = vec![0u8; length];
    source.read_exact(&mut bytes)?;
    decode_covered_rows(&bytes)
        .map(Some)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "a rows chunk that is not rows"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_flags_print_like_tcpdump() {
        assert_eq!(tcp_flags_text(0x002), "[S]");
        assert_eq!(tcp_flags_text(0x012), "[S.]");
        assert_eq!(tcp_flags_text(0x018), "[P.]");
        assert_eq!(tcp_flags_text(0x010), "[.]");
        assert_eq!(tcp_flags_text(0x004), "[R]");
        assert_eq!(tcp_flags_text(0), "[none]");
    }

    #[test]
    fn rows_travel_whole_and_damage_is_an_error() {
        let record = PacketRecord {
            ts_nanos: 1_353_690_039_425_111_000,
            wire_len: 60,
            cap_len: 60,
            link_type: LinkType::ETHERNET,
            iface: 2,
            headers: hindsight_model::PacketHeaders::default(),
        };
        let mut bytes = Vec::new();
        {
            let mut sink = packet_sink(Format::Rows, Box::new(&mut bytes)).unwrap();
            for i in 0..1000 {
                let mut r = record;
                r.ts_nanos += i;
                sink.write(&r, &[i as u8; 60]).unwrap();
            }
            sink.finish().unwrap();
        }
        let mut source = bytes.as_slice();
        let mut rows = Vec::new();
        while let Some(chunk) = read_rows_chunk(&mut source).unwrap() {
            rows.extend(chunk);
        }
        assert_eq!(rows.len(), 1000);
        assert_eq!(rows[999].record.ts_nanos, record.ts_nanos + 999);
        assert_eq!(rows[999].record.iface, 2);
        assert_eq!(rows[999].data, vec![231u8; 60]);
        // Cut short, and bytes that are not rows.
        let mut cut = &bytes[..bytes.len() - 7];
        assert!(std::iter::from_fn(|| read_rows_chunk(&mut cut).transpose()).any(|r| r.is_err()));
        let mut garbage: &[u8] = &[8, 0, 0, 0, 99, 1, 2, 3, 4, 5, 6, 7];
        assert!(read_rows_chunk(&mut garbage).is_err());
        let mut huge: &[u8] = &[0xff, 0xff, 0xff, 0xff];
        assert!(read_rows_chunk(&mut huge).is_err());
    }
}
