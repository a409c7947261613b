//! `hindsight flows [FILTER] --ip ADDR|CIDR --archive DIR`: the connections of an
//! address or network, answered from the connection index alone (Diventi's
//! lookup), optionally narrowed by a filter in the query language.

use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use hindsight_index::connections::scale_range;
use hindsight_index::{ConnEntry, ConnScan, ConnectionIndex};
use hindsight_model::{FlowState, PacketHeaders, PacketRecord, ip_proto, tcp_flags};
use hindsight_query::filter::Filter;
use hindsight_store::{Archive, TimeRange};
use serde_json::json;

use crate::ArchiveArg;
use crate::cmd::query::WindowArgs;
use crate::output::{proto_name, tcp_flags_text};
use crate::timearg::format_nanos;

/// Output formats of `hindsight flows`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum FlowFormat {
    /// An aligned, human-readable table.
    Table,
    /// Comma-separated values with a header line.
    Csv,
    /// One JSON object per line.
    Jsonl,
}

/// Arguments of `hindsight flows`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Keep the connections that match this filter (Wireshark or tcpdump syntax,
    /// as for `query`), on their addresses, ports, protocol and TCP flags; `ip.src`
    /// is the originator. Without --ip, the filter must name addresses.
    #[arg(value_name = "FILTER")]
    filter: Option<String>,
    /// The address or network whose connections to list: 10.1.2.3, 10.1.2.0/24, 2001:db8::/32.
    #[arg(long, value_name = "ADDR|CIDR")]
    ip: Option<String>,
    #[command(flatten)]
    archive: ArchiveArg,
    #[command(flatten)]
    window: WindowArgs,
    /// Output format.
    #[arg(long, short = 'F', value_enum, default_value = "table")]
    format: FlowFormat,
    /// Print at most N connections (one page); the command to get the next page is
    /// printed to stderr.
    #[arg(long, short = 'n', value_name = "N", default_value_t = 1000)]
    limit: usize,
    /// Resume after the page that ended with this cursor (printed by the previous page).
    #[arg(long, value_name = "CURSOR")]
    after: Option<String>,
}

/// A connection lookup: what `hindsight flows` and `GET /api/v1/flows` ask.
#[derive(Debug)]
pub struct Lookup<'a> {
    /// A filter on the connections (either syntax).
    pub filter: Option<&'a str>,
    /// The address or network whose connections to list.
    pub ip: Option<&'a str>,
    /// The window on the connections' start times.
    pub time: TimeRange,
    /// Connections at most.
    pub limit: usize,
    /// The cursor a previous page ended with.
    pub after: Option<&'a str>,
}

/// A page of connections, and the cursor of the next page if there is one.
pub type Page = (Vec<ConnEntry>, Option<String>);

/// Answers `lookup` from the connection index of the archive at `root`.
pub fn lookup(root: &Path, lookup: &Lookup<'_>) -> Result<Page> {
    let filter = match lookup.filter {
        Some(text) => Some(Filter::parse(text)?),
        None => None,
    };
    let ranges = match (lookup.ip, &filter) {
        (Some(ip), _) => {
            let not_an_address =
                || anyhow::anyhow!("ip {ip:?} is not an IPv4 or IPv6 address or network");
            Filter::parse(&format!("ip.addr == {ip}"))
                .map_err(|_| not_an_address())?
                .address_ranges()
                .ok_or_else(not_an_address)?
        }
        (None, Some(filter)) => filter.address_ranges().ok_or_else(|| {
            anyhow::anyhow!(
                "the connection index is keyed by address: give an ip, or a filter that \
                 names the addresses every connection must have (such as `host 10.1.2.3 \
                 and port 53`)"
            )
        })?,
        (None, None) => bail!("give an ip (ADDR or CIDR), or a filter that names addresses"),
    };
    let keep = |entry: &ConnEntry| filter.as_ref().is_none_or(|f| f.matches(&as_packet(entry)));
    let time = lookup.time;
    let archive = Archive::open_reader(root)
        .with_context(|| format!("cannot open archive {}", root.display()))?;
    let index = ConnectionIndex::open_read_only(&archive.connections_dir())
        .with_context(|| format!("cannot open the connection index of {}", root.display()))?;
    let mut after = match lookup.after {
        Some(cursor) => Some(decode_cursor(cursor)?),
        None => None,
    };
    let mut entries = Vec::new();
    let mut next = None;
    if let Some(index) = &index {
        for &(low, high) in &ranges {
            // A cursor belongs to the range that holds its address.
            if let Some(cursor) = &after
                && cursor.get(..16).is_some_and(|a| a > &high.0[..])
            {
                continue;
            }
            let scan = ConnScan {
                low,
                high,
                start_ns: time.start_nanos,
                end_ns: time.end_nanos,
            };
            let left = lookup.limit - entries.len();
            let page = index.scan_where(&scan, after.take().as_deref(), left, &keep)?;
            entries.extend(page.entries);
            if let Some(cursor) = page.next {
                next = Some(encode_cursor(&cursor));
                break;
            }
        }
    }
    Ok((entries, next))
}

/// Runs `hindsight flows`.
pub fn run(args: Args) -> Result<ExitCode> {
    let request = Lookup {
        filter: args.filter.as_deref(),
        ip: args.ip.as_deref(),
        time: args.window.range()?,
        limit: args.limit,
        after: args.after.as_deref(),
    };
    let (entries, next) = lookup(&args.archive.archive, &request)?;
    let mut out = BufWriter::with_capacity(1 << 16, io::stdout().lock());
    let mut writer = FlowWriter::new(args.format);
    for entry in &entries {
        writer.write(&mut out, entry)?;
    }
    writer.finish(&mut out)?;
    out.flush()?;
    if let Some(cursor) = next {
        eprintln!(
            "more connections: add --after {cursor} to see the next {}",
            args.limit
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The fields of a connection a filter can test, as a packet of it would have
/// them: originator → responder, protocol, the union of TCP flags; ICMP type and
/// code from NetFlow's destination port.
fn as_packet(entry: &ConnEntry) -> PacketRecord {
    let (src, src_port, dst, dst_port) = entry.oriented();
    let proto = entry.proto;
    let has_ports = matches!(proto, ip_proto::TCP | ip_proto::UDP | ip_proto::SCTP);
    let icmp = matches!(proto, ip_proto::ICMP | ip_proto::ICMPV6);
    PacketRecord {
        ts_nanos: entry.ts_ns,
        headers: PacketHeaders {
            ip_version: Some(if src.is_v4() && dst.is_v4() { 4 } else { 6 }),
            src_addr: Some(src),
            dst_addr: Some(dst),
            ip_proto: Some(proto),
            src_port: has_ports.then_some(src_port),
            dst_port: has_ports.then_some(dst_port),
            tcp_flags: (proto == ip_proto::TCP).then_some(entry.summary.tcp_flags),
            icmp_type: icmp.then_some((dst_port >> 8) as u8),
            icmp_code: icmp.then_some(dst_port as u8),
            ..PacketHeaders::default()
        },
        ..PacketRecord::default()
    }
}

fn encode_cursor(key: &[u8]) -> String {
    key.iter().map(|b| format!("{b:02x}")).collect()
}

fn decode_cursor(text: &str) -> Result<Vec<u8>> {
    let bad =
        || anyhow::anyhow!("cursor {text:?} is not one that a page of connections ended with");
    if !text.len().is_multiple_of(2) || text.len() > 256 {
        return Err(bad());
    }
    (0..text.len())
        .step_by(2)
        .map(|i| {
            text.get(i..i + 2)
                .and_then(|pair| u8::from_str_radix(pair, 16).ok())
                .ok_or_else(bad)
        })
        .collect()
}

/// A count shown as the range its log2 scale stands for: `0`, `1`, `2-3`, `1024-2047`.
fn range_text(scale: u8) -> String {
    let (low, high) = scale_range(scale);
    if low == high {
        low.to_string()
    } else {
        format!("{low}-{high}")
    }
}

/// A connection as one JSON object (`--format jsonl`, `GET /api/v1/flows`).
pub fn connection_json(e: &ConnEntry) -> serde_json::Value {
    let (orig, orig_port, resp, resp_port) = e.oriented();
    let s = &e.summary;
    let state = if s.state == FlowState::Unknown {
        "-"
    } else {
        s.state.name()
    };
    let range = |scale: u8| {
        let (low, high) = scale_range(scale);
        json!([low, high])
    };
    json!({
        "start": format_nanos(e.ts_ns),
        "start_ns": e.ts_ns,
        "duration": f64::from(s.duration_ms) / 1e3,
        "proto": e.proto,
        "orig_addr": orig.to_string(),
        "orig_port": orig_port,
        "resp_addr": resp.to_string(),
        "resp_port": resp_port,
        "address_is": if e.reverse { "resp" } else { "orig" },
        "state": state,
        "tcp_flags": s.tcp_flags,
        "packets_out": range(s.packets_out_scale),
        "packets_in": range(s.packets_in_scale),
        "bytes_out": range(s.bytes_out_scale),
        "bytes_in": range(s.bytes_in_scale),
        "source": s.source.name(),
    })
}

struct FlowWriter {
    format: FlowFormat,
    rows: usize,
}

impl FlowWriter {
    fn new(format: FlowFormat) -> Self {
        Self { format, rows: 0 }
    }

    fn write(&mut self, out: &mut dyn Write, e: &ConnEntry) -> io::Result<()> {
        let (orig, orig_port, resp, resp_port) = e.oriented();
        let s = &e.summary;
        let flags = if e.proto == hindsight_model::ip_proto::TCP && s.tcp_flags != 0 {
            tcp_flags_text(
                s.tcp_flags
                    & (tcp_flags::SYN
                        | tcp_flags::FIN
                        | tcp_flags::RST
                        | tcp_flags::PSH
                        | tcp_flags::ACK
                        | tcp_flags::URG),
            )
        } else {
            String::new()
        };
        let state = if s.state == FlowState::Unknown {
            "-"
        } else {
            s.state.name()
        };
        let duration = f64::from(s.duration_ms) / 1e3;
        match self.format {
            FlowFormat::Table => {
                if self.rows == 0 {
                    writeln!(
                        out,
                        "{:<30} {:>9} {:<6} {:>41} {:<2} {:<41} {:<6} {:<8} {:>13} {:>15} source",
                        "start",
                        "duration",
                        "proto",
                        "address",
                        "",
                        "peer",
                        "state",
                        "flags",
                        "packets o/r",
                        "bytes o/r",
                    )?;
                }
                let direction = if e.reverse { "<-" } else { "->" };
                writeln!(
                    out,
                    "{:<30} {:>9.3} {:<6} {:>41} {:<2} {:<41} {:<6} {:<8} {:>13} {:>15} {}",
                    format_nanos(e.ts_ns),
                    duration,
                    proto_name(e.proto),
                    endpoint(e.addr, e.port),
                    direction,
                    endpoint(e.peer, e.peer_port),
                    state,
                    flags,
                    format!(
                        "{}/{}",
                        range_text(s.packets_out_scale),
                        range_text(s.packets_in_scale)
                    ),
                    format!(
                        "{}/{}",
                        range_text(s.bytes_out_scale),
                        range_text(s.bytes_in_scale)
                    ),
                    s.source.name()
                )?;
            }
            FlowFormat::Csv => {
                if self.rows == 0 {
                    writeln!(
                        out,
                        "start,duration,proto,orig_addr,orig_port,resp_addr,resp_port,address_is,state,tcp_flags,packets_out,packets_in,bytes_out,bytes_in,source"
                    )?;
                }
                writeln!(
                    out,
                    "{},{:.3},{},{},{},{},{},{},{},{},{},{},{},{},{}",
                    format_nanos(e.ts_ns),
                    duration,
                    proto_name(e.proto),
                    orig,
                    orig_port,
                    resp,
                    resp_port,
                    if e.reverse { "resp" } else { "orig" },
                    state,
                    flags,
                    range_text(s.packets_out_scale),
                    range_text(s.packets_in_scale),
                    range_text(s.bytes_out_scale),
                    range_text(s.bytes_in_scale),
                    s.source.name()
                )?;
            }
            FlowFormat::Jsonl => writeln!(out, "{}", connection_json(e))?,
        }
        self.rows += 1;
        Ok(())
    }

    fn finish(&mut self, out: &mut dyn Write) -> io::Result<()> {
        if self.rows == 0 && self.format == FlowFormat::Table {
            writeln!(out, "(no connections)")?;
        }
        Ok(())
    }
}

/// `10.1.2.3:443`, `[2001:db8::1]:443`, or the bare address when the port is 0.
fn endpoint(addr: hindsight_model::Addr16, port: u16) -> String {
    match (addr.is_v4(), port) {
        (_, 0) => addr.to_string(),
        (true, _) => format!("{addr}:{port}"),
        (false, _) => format!("[{addr}]:{port}"),
    }
}
