//! Packets as an aligned table for people, CSV and JSON lines for programs, pcap
//! and pcapng for Wireshark and tcpdump (`hindsight query`, `GET /api/v1/query`).

use std::io::{self, Write};

use hindsight_capture::{PcapWriter, PcapngWriter, TimestampPrecision};
use hindsight_model::{Addr16, LinkType, PacketRecord, ip_proto, mac_text};
use serde_json::{Map, Value};

use crate::time::format_nanos;
use crate::{Answer, Format};

/// Receives matching packets and writes them in one format.
pub trait PacketSink {
    /// Writes one packet.
    fn write(&mut self, record: &PacketRecord, data: &[u8]) -> io::Result<()>;
    /// Writes what remains and flushes.
    fn finish(&mut self) -> io::Result<()>;
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
        }),
        Format::Csv => Box::new(CsvSink {
            out,
            header_written: false,
        }),
        Format::Jsonl => Box::new(JsonlSink { out }),
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
}

impl PacketSink for TableSink<'_> {
    fn write(&mut self, record: &PacketRecord, _data: &[u8]) -> io::Result<()> {
        if !self.header_written {
            self.header_written = true;
            writeln!(
                self.out,
                "{:<30} {:<6} {:>45} {:<45} {:>6} info",
                "time", "proto", "source", "destination", "len"
            )?;
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
}

/// The columns of CSV output, in order.
const CSV_COLUMNS: &[&str] = &[
    "ts",
    "ts_nanos",
    "iface",
    "link_type",
    "wire_len",
    "cap_len",
    "status",
    "eth_src",
    "eth_dst",
    "eth_type",
    "vlan_outer",
    "vlan_inner",
    "ip_version",
    "src_addr",
    "dst_addr",
    "ip_proto",
    "ip_ttl",
    "ip_id",
    "frag_offset",
    "more_fragments",
    "dont_fragment",
    "src_port",
    "dst_port",
    "tcp_flags",
    "icmp_type",
    "icmp_code",
];

fn record_fields(record: &PacketRecord) -> Vec<(&'static str, Option<String>)> {
    fn some<T: ToString>(value: Option<T>) -> Option<String> {
        value.map(|v| v.to_string())
    }
    let h = &record.headers;
    vec![
        ("ts", Some(format_nanos(record.ts_nanos))),
        ("ts_nanos", Some(record.ts_nanos.to_string())),
        ("iface", Some(record.iface.to_string())),
        ("link_type", Some(record.link_type.0.to_string())),
        ("wire_len", Some(record.wire_len.to_string())),
        ("cap_len", Some(record.cap_len.to_string())),
        ("status", Some(h.status.name().to_owned())),
        ("eth_src", h.src_mac.map(mac_text)),
        ("eth_dst", h.dst_mac.map(mac_text)),
        ("eth_type", h.eth_type.map(|t| format!("0x{t:04x}"))),
        ("vlan_outer", some(h.vlan_outer)),
        ("vlan_inner", some(h.vlan_inner)),
        ("ip_version", some(h.ip_version)),
        ("src_addr", some(h.src_addr)),
        ("dst_addr", some(h.dst_addr)),
        ("ip_proto", some(h.ip_proto)),
        ("ip_ttl", some(h.ip_ttl)),
        ("ip_id", some(h.ip_id)),
        ("frag_offset", some(h.frag_offset)),
        ("more_fragments", some(h.more_fragments)),
        ("dont_fragment", some(h.dont_fragment)),
        ("src_port", some(h.src_port)),
        ("dst_port", some(h.dst_port)),
        ("tcp_flags", some(h.tcp_flags)),
        ("icmp_type", some(h.icmp_type)),
        ("icmp_code", some(h.icmp_code)),
    ]
}

struct CsvSink<'a> {
    out: Box<dyn Write + 'a>,
    header_written: bool,
}

impl PacketSink for CsvSink<'_> {
    fn write(&mut self, record: &PacketRecord, _data: &[u8]) -> io::Result<()> {
        if !self.header_written {
            self.header_written = true;
            writeln!(self.out, "{}", CSV_COLUMNS.join(","))?;
        }
        let line: Vec<String> = record_fields(record)
            .into_iter()
            .map(|(_, value)| value.unwrap_or_default())
            .collect();
        // No field can hold a comma, quote or newline, so no quoting is needed.
        writeln!(self.out, "{}", line.join(","))
    }

    fn finish(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

struct JsonlSink<'a> {
    out: Box<dyn Write + 'a>,
}

impl PacketSink for JsonlSink<'_> {
    fn write(&mut self, record: &PacketRecord, _data: &[u8]) -> io::Result<()> {
        let mut object = Map::new();
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
        match self.writer()? {
            Some(writer) => {
                writer.write_frame(record.link_type, record.ts_nanos, record.wire_len, data)
            }
            None => Ok(()),
        }
    }

    fn finish(&mut self) -> io::Result<()> {
        // With no packet, still a valid pcapng file: a section header alone.
        match self.writer()? {
            Some(writer) => writer.flush(),
            None => Ok(()),
        }
    }
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
    fn csv_header_matches_fields() {
        let names: Vec<&str> = record_fields(&PacketRecord::default())
            .into_iter()
            .map(|(name, _)| name)
            .collect();
        assert_eq!(names, CSV_COLUMNS);
    }
}
