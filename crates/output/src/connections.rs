//! Connection records as an aligned table, CSV or JSON lines (`hindsight flows`,
//! `GET /api/v1/flows`). Counts are the ranges the index keeps (log2 scales).

use std::io::{self, Write};

use hindsight_model::connection::{ConnEntry, DEFAULT_COMMUNITY_SEED, scale_range};
use hindsight_model::{AppFields, FlowState, tcp_flags};
use serde_json::json;

use crate::packets::{proto_name, tcp_flags_text};
use crate::time::format_nanos;
use crate::{Answer, Format};

/// A count shown as the range its log2 scale stands for: `0`, `1`, `2-3`, `1024-2047`.
fn range_text(scale: u8) -> String {
    let (low, high) = scale_range(scale);
    if low == high {
        low.to_string()
    } else {
        format!("{low}-{high}")
    }
}

/// The Community ID (version 1) of a connection, hashed with `seed`.
pub fn community_id(e: &ConnEntry, seed: u16) -> String {
    let (src, src_port, dst, dst_port) = e.oriented();
    hindsight_model::FlowRecord {
        src,
        dst,
        src_port,
        dst_port,
        proto: e.proto,
        ..hindsight_model::FlowRecord::default()
    }
    .community_id(seed)
}

/// A connection as one JSON object (`--format jsonl`, `GET /api/v1/flows`),
/// its Community ID hashed with `community_seed`.
pub fn connection_json(e: &ConnEntry, community_seed: u16) -> serde_json::Value {
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
    let mut json = json!({
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
        "community_id": community_id(e, community_seed),
    });
    if let (Some(app), Some(object)) = (&e.app, json.as_object_mut()) {
        object.extend(app_json(app));
    }
    json
}

/// A connection's application fields as JSON members, named as the `flows`
/// table's columns; only the fields seen.
pub fn app_json(app: &AppFields) -> serde_json::Map<String, serde_json::Value> {
    let mut out = serde_json::Map::new();
    let mut put = |name: &str, value: serde_json::Value| {
        if !value.is_null() {
            out.insert(name.to_owned(), value);
        }
    };
    put("service", json!(app.service()));
    if let Some(dns) = &app.dns {
        put("dns_query", json!(dns.query));
        put("dns_qtype", json!(dns.qtype));
        put("dns_rcode", json!(dns.rcode));
        if !dns.answers.is_empty() {
            put("dns_answers", json!(dns.answers));
            put("dns_ttls", json!(dns.ttls));
        }
    }
    if let Some(tls) = &app.tls {
        put("tls_sni", json!(tls.sni));
        if !tls.alpn.is_empty() {
            put("tls_alpn", json!(tls.alpn));
        }
        put("tls_client_version", json!(tls.client_version));
        put("tls_version", json!(tls.version));
        put("tls_cipher", json!(tls.cipher));
        put("ja3", json!(tls.ja3));
        put("ja3s", json!(tls.ja3s));
        put("ja4", json!(tls.ja4));
    }
    if let Some(http) = &app.http {
        put("http_method", json!(http.method));
        put("http_host", json!(http.host));
        put("http_uri", json!(http.uri));
        put("http_user_agent", json!(http.user_agent));
        put("http_status", json!(http.status));
        put("http_content_type", json!(http.content_type));
    }
    put("quic_version", json!(app.quic_version));
    if let Some(ssh) = &app.ssh {
        put("ssh_client", json!(ssh.client));
        put("ssh_server", json!(ssh.server));
    }
    out
}

/// The name a connection is best known by: its TLS server name, HTTP host or
/// DNS query.
fn app_name(app: &AppFields) -> Option<&str> {
    let tls = app.tls.as_ref().and_then(|t| t.sni.as_deref());
    let http = app.http.as_ref().and_then(|h| h.host.as_deref());
    let dns = app.dns.as_ref().map(|d| d.query.as_str());
    tls.or(http).or(dns)
}

/// Writes connections in one format.
#[derive(Debug)]
pub struct ConnWriter {
    format: Format,
    rows: usize,
    /// The cluster node the next connections come from (a `node` column).
    node: Option<String>,
    /// The seed of the next connections' Community IDs.
    community_seed: u16,
}

impl ConnWriter {
    /// A writer of `format`; an error names the formats of connections if
    /// `format` is not one.
    pub fn new(format: Format) -> Result<Self, String> {
        Ok(Self {
            format: format.check(Answer::Connections)?,
            rows: 0,
            node: None,
            community_seed: DEFAULT_COMMUNITY_SEED,
        })
    }

    /// The seed the next connections' Community IDs are hashed with (their
    /// index's: `hindsight_index::ConnectionIndex::community_seed`).
    pub fn set_community_seed(&mut self, seed: u16) {
        self.community_seed = seed;
    }

    /// The node of a cluster the next connections come from: a `node` column
    /// from the first connection on (call it before the first).
    pub fn set_node(&mut self, node: &str) {
        if self.node.as_deref() != Some(node) {
            self.node = Some(node.to_owned());
        }
    }

    /// Writes one connection.
    pub fn write(&mut self, out: &mut dyn Write, e: &ConnEntry) -> io::Result<()> {
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
        if self.node.is_some() {
            match self.format {
                Format::Table if self.rows == 0 => write!(out, "{:<12} ", "node")?,
                Format::Csv if self.rows == 0 => write!(out, "node,")?,
                _ => {}
            }
        }
        // The node's value goes before the row's (after the header's line).
        let node_cell = |out: &mut dyn Write, format: Format| -> io::Result<()> {
            match (&self.node, format) {
                (Some(node), Format::Table) => write!(out, "{node:<12} "),
                (Some(node), Format::Csv) => write!(out, "{node},"),
                _ => Ok(()),
            }
        };
        match self.format {
            Format::Table => {
                if self.rows == 0 {
                    writeln!(
                        out,
                        "{:<30} {:>9} {:<6} {:>41} {:<2} {:<41} {:<6} {:<8} {:>13} {:>15} {:<8} service name",
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
                        "source",
                    )?;
                }
                let direction = if e.reverse { "<-" } else { "->" };
                node_cell(out, Format::Table)?;
                write!(
                    out,
                    "{:<30} {:>9.3} {:<6} {:>41} {:<2} {:<41} {:<6} {:<8} {:>13} {:>15} {:<8}",
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
                    s.source.name(),
                )?;
                let app = e.app.as_deref();
                let service = app.and_then(AppFields::service).unwrap_or("-");
                let name = app.and_then(app_name).unwrap_or("-");
                writeln!(out, " {service:<7} {}", name.escape_debug())?;
            }
            Format::Csv => {
                if self.rows == 0 {
                    writeln!(
                        out,
                        "start,duration,proto,orig_addr,orig_port,resp_addr,resp_port,address_is,state,tcp_flags,packets_out,packets_in,bytes_out,bytes_in,source,community_id,service,name"
                    )?;
                }
                node_cell(out, Format::Csv)?;
                writeln!(
                    out,
                    "{},{:.3},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
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
                    s.source.name(),
                    community_id(e, self.community_seed),
                    e.app.as_deref().and_then(AppFields::service).unwrap_or(""),
                    csv_text(e.app.as_deref().and_then(app_name).unwrap_or("")),
                )?;
            }
            Format::Jsonl => {
                let mut json = connection_json(e, self.community_seed);
                if let Some(node) = &self.node
                    && let Some(object) = json.as_object_mut()
                {
                    object.insert("node".to_owned(), serde_json::Value::String(node.clone()));
                }
                writeln!(out, "{json}")?;
            }
            Format::Pcap | Format::Pcapng | Format::Parquet | Format::Rows => {}
        }
        self.rows += 1;
        Ok(())
    }

    /// Ends the answer (a table says when there was nothing).
    pub fn finish(&mut self, out: &mut dyn Write) -> io::Result<()> {
        if self.rows == 0 && self.format == Format::Table {
            writeln!(out, "(no connections)")?;
        }
        Ok(())
    }
}

/// A CSV field: quoted (quotes doubled) when it holds a comma, a quote or a
/// line break.
fn csv_text(text: &str) -> String {
    match text.contains([',', '"', '\n', '\r']) {
        true => format!("\"{}\"", text.replace('"', "\"\"")),
        false => text.to_owned(),
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
