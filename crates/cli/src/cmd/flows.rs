//! `hindsight flows --ip ADDR|CIDR --archive DIR`: the connections of an address
//! or network, answered from the connection index alone (Diventi's lookup).

use std::io::{self, BufWriter, Write};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use hindsight_index::connections::scale_range;
use hindsight_index::{ConnEntry, ConnScan, ConnectionIndex};
use hindsight_model::{FlowState, tcp_flags};
use hindsight_query::filter::Filter;
use hindsight_store::Archive;
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
    /// The address or network whose connections to list: 10.1.2.3, 10.1.2.0/24, 2001:db8::/32.
    #[arg(long, value_name = "ADDR|CIDR")]
    ip: String,
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

/// Runs `hindsight flows`.
pub fn run(args: Args) -> Result<ExitCode> {
    let filter = Filter::parse(&format!("ip.addr == {}", args.ip)).map_err(|_| {
        anyhow::anyhow!(
            "--ip {:?} is not an IPv4 or IPv6 address or network",
            args.ip
        )
    })?;
    let Some(ranges) = filter.address_ranges() else {
        bail!(
            "--ip {:?} is not an IPv4 or IPv6 address or network",
            args.ip
        );
    };
    let time = args.window.range()?;
    let root = &args.archive.archive;
    let archive = Archive::open_reader(root)
        .with_context(|| format!("cannot open archive {}", root.display()))?;
    let index = ConnectionIndex::open_read_only(&archive.connections_dir())
        .with_context(|| format!("cannot open the connection index of {}", root.display()))?;
    let mut after = match &args.after {
        Some(cursor) => Some(decode_cursor(cursor)?),
        None => None,
    };
    let mut out = BufWriter::with_capacity(1 << 16, io::stdout().lock());
    let mut writer = FlowWriter::new(args.format);
    let mut left = args.limit;
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
            let page = index.scan(&scan, after.take().as_deref(), left)?;
            left -= page.entries.len();
            for entry in &page.entries {
                writer.write(&mut out, entry)?;
            }
            if page.next.is_some() {
                next = page.next;
                break;
            }
        }
    }
    writer.finish(&mut out)?;
    out.flush()?;
    if let Some(cursor) = next {
        eprintln!(
            "more connections: add --after {} to see the next {}",
            encode_cursor(&cursor),
            args.limit
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn encode_cursor(key: &[u8]) -> String {
    key.iter().map(|b| format!("{b:02x}")).collect()
}

fn decode_cursor(text: &str) -> Result<Vec<u8>> {
    let bad = || anyhow::anyhow!("--after {text:?} is not a cursor printed by hindsight flows");
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
            FlowFormat::Jsonl => {
                let range = |scale: u8| {
                    let (low, high) = scale_range(scale);
                    json!([low, high])
                };
                let line = json!({
                    "start": format_nanos(e.ts_ns),
                    "start_ns": e.ts_ns,
                    "duration": duration,
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
                });
                writeln!(out, "{line}")?;
            }
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
