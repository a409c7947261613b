//! Zeek logs as a source of connection records: `conn.log`, and the
//! application fields of `dns.log`, `ssl.log`, `http.log` and `ssh.log`, joined
//! to their connections by `uid` ([`UidJoin`]). Both of Zeek's formats are read:
//! TSV with its `#fields` header, and JSON lines (`LogAscii::use_json`), told
//! apart by the first non-blank character of the file. A log's kind is its
//! `#path` (TSV) or `_path` (JSON), else what its first record's fields show.
//!
//! Mapping to [`FlowRecord`]: `ts` is the start, `ts + duration` the end;
//! `orig_pkts`/`orig_ip_bytes` and `resp_pkts`/`resp_ip_bytes` are the counters
//! (IP bytes, as hindsight counts); `conn_state` the state; `uid` is kept. TCP flags
//! are the union that `history` implies (`S` SYN, `H` SYN-ACK, `A`/`D` ACK, `F`
//! FIN, `R` RST, either case). ICMP connections carry Zeek's type and code
//! (`orig_p`, `resp_p`) as hindsight does: source port 0, destination port
//! `type << 8 | code`. A line that cannot be read is reported with its line
//! number and skipped; the rest of the file is still read.

use hindsight_model::app::{DnsFields, HttpFields, SshFields, TlsFields};
use hindsight_model::{Addr16, AppFields, FlowRecord, FlowSource, FlowState, ip_proto, tcp_flags};

/// A line of a conn.log that could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZeekLineError {
    /// 1-based line number.
    pub line: u64,
    /// What is wrong.
    pub reason: String,
}

impl std::fmt::Display for ZeekLineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {}", self.line, self.reason)
    }
}

/// Longest line accepted; a longer one is an error, not an allocation.
const MAX_LINE: usize = 64 * 1024;

/// The kind of a Zeek log: its `#path` (TSV), its `_path` member (JSON), or
/// what its first record's fields show.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogKind {
    /// conn.log: connection records.
    Conn,
    /// dns.log: DNS transactions.
    Dns,
    /// ssl.log: TLS handshakes.
    Ssl,
    /// http.log: HTTP requests.
    Http,
    /// ssh.log: SSH connections.
    Ssh,
    /// Another log (its path), which hindsight does not read.
    Other(String),
}

impl LogKind {
    fn from_path(path: &str) -> Self {
        match path {
            "conn" => LogKind::Conn,
            "dns" => LogKind::Dns,
            "ssl" => LogKind::Ssl,
            "http" => LogKind::Http,
            "ssh" => LogKind::Ssh,
            other => LogKind::Other(other.to_owned()),
        }
    }

    /// The log's name, as Zeek's `#path`.
    pub fn name(&self) -> &str {
        match self {
            LogKind::Conn => "conn",
            LogKind::Dns => "dns",
            LogKind::Ssl => "ssl",
            LogKind::Http => "http",
            LogKind::Ssh => "ssh",
            LogKind::Other(path) => path,
        }
    }

    /// The kind of a record without a path, by the fields only one of the
    /// logs hindsight reads has.
    fn of_fields(has: impl Fn(&str) -> bool) -> Self {
        if has("conn_state") || has("history") || has("orig_pkts") {
            LogKind::Conn
        } else if has("trans_id") || has("qtype") || has("query") {
            LogKind::Dns
        } else if has("method") || has("trans_depth") || has("status_code") {
            LogKind::Http
        } else if has("cipher") || has("server_name") || has("curve") {
            LogKind::Ssl
        } else if has("auth_success") || (has("client") && has("server")) {
            LogKind::Ssh
        } else {
            LogKind::Other("unknown".to_owned())
        }
    }
}

/// Reads the lines of a Zeek log, TSV (with its `#` directives) or JSON lines,
/// into [`Row`]s. Feed it lines with [`push_line`](Self::push_line).
#[derive(Debug)]
pub struct LogReader {
    line: u64,
    /// Field names from `#fields` (TSV), once seen.
    names: Option<Vec<String>>,
    separator: char,
    set_separator: char,
    unset: String,
    empty: String,
    json: Option<bool>,
    kind: Option<LogKind>,
}

impl Default for LogReader {
    fn default() -> Self {
        Self::new()
    }
}

/// One record of a Zeek log: its fields by name, as text.
#[derive(Debug)]
pub struct Row<'a> {
    reader: &'a LogReader,
    form: RowForm<'a>,
}

#[derive(Debug)]
enum RowForm<'a> {
    Tsv {
        names: &'a [String],
        values: Vec<&'a str>,
    },
    Json(Vec<(String, json::Value)>),
}

impl Row<'_> {
    /// The kind of the log the record is from.
    pub fn kind(&self) -> &LogKind {
        const UNKNOWN: &LogKind = &LogKind::Other(String::new());
        self.reader.kind.as_ref().unwrap_or(UNKNOWN)
    }

    /// The field's value; `None` if it is absent, unset or empty.
    pub fn get(&self, name: &str) -> Option<&str> {
        match &self.form {
            RowForm::Tsv { names, values } => {
                let at = names.iter().position(|n| n == name)?;
                values
                    .get(at)
                    .copied()
                    .filter(|v| *v != self.reader.unset && *v != self.reader.empty)
            }
            RowForm::Json(fields) => match &fields.iter().find(|(key, _)| key == name)?.1 {
                json::Value::Text(text) => Some(text),
                json::Value::List(_) => None,
            },
        }
    }

    /// The elements of a set or vector field (TSV: split by `#set_separator`;
    /// JSON: an array's strings and numbers); empty if absent or unset.
    pub fn list(&self, name: &str) -> Vec<String> {
        match &self.form {
            RowForm::Tsv { .. } => self.get(name).map_or_else(Vec::new, |text| {
                text.split(self.reader.set_separator)
                    .map(str::to_owned)
                    .collect()
            }),
            RowForm::Json(fields) => match fields.iter().find(|(key, _)| key == name) {
                Some((_, json::Value::List(items))) => items.clone(),
                Some((_, json::Value::Text(text))) => vec![text.clone()],
                None => Vec::new(),
            },
        }
    }
}

impl LogReader {
    /// Returns a reader at the start of a file.
    pub fn new() -> Self {
        Self {
            line: 0,
            names: None,
            separator: '\t',
            set_separator: ',',
            unset: "-".to_owned(),
            empty: "(empty)".to_owned(),
            json: None,
            kind: None,
        }
    }

    /// Lines read so far.
    pub fn lines(&self) -> u64 {
        self.line
    }

    /// The log's kind, once its `#path` or first record is read.
    pub fn kind(&self) -> Option<&LogKind> {
        self.kind.as_ref()
    }

    /// Reads one line (without its newline). Returns the record it holds, `None`
    /// for header, comment and blank lines, or the reason it cannot be read.
    pub fn push_line<'a>(&'a mut self, text: &'a str) -> Result<Option<Row<'a>>, ZeekLineError> {
        self.line += 1;
        let line = self.line;
        let fail = |reason: String| ZeekLineError { line, reason };
        if text.len() > MAX_LINE {
            return Err(fail(format!("line longer than {MAX_LINE} bytes")));
        }
        let text = text.trim_end_matches('\r');
        if text.trim().is_empty() {
            return Ok(None);
        }
        let json = *self
            .json
            .get_or_insert_with(|| text.trim_start().starts_with('{'));
        if json {
            let fields = json::parse_object(text).map_err(fail)?;
            if self.kind.is_none() {
                let path = fields.iter().find_map(|(key, value)| match value {
                    json::Value::Text(path) if key == "_path" => Some(path),
                    _ => None,
                });
                self.kind = Some(match path {
                    Some(path) => LogKind::from_path(path),
                    None => LogKind::of_fields(|name| fields.iter().any(|(key, _)| key == name)),
                });
            }
            return Ok(Some(Row {
                reader: self,
                form: RowForm::Json(fields),
            }));
        }
        if let Some(directive) = text.strip_prefix('#') {
            self.directive(directive).map_err(fail)?;
            return Ok(None);
        }
        let Some(names) = &self.names else {
            return Err(fail("a data line before the #fields header".to_owned()));
        };
        Ok(Some(Row {
            reader: self,
            form: RowForm::Tsv {
                names,
                values: text.split(self.separator).collect(),
            },
        }))
    }

    fn directive(&mut self, directive: &str) -> Result<(), String> {
        if let Some(value) = directive.strip_prefix("separator ") {
            self.separator =
                escaped_char(value).ok_or_else(|| format!("unreadable #separator {value:?}"))?;
            return Ok(());
        }
        let mut parts = directive.split(self.separator);
        match parts.next() {
            Some("fields") => {
                let names: Vec<String> = parts.map(str::to_owned).collect();
                if self.kind.is_none() {
                    self.kind = Some(LogKind::of_fields(|name| names.iter().any(|n| n == name)));
                }
                self.names = Some(names);
            }
            Some("path") => self.kind = parts.next().map(LogKind::from_path),
            Some("set_separator") => {
                let value = parts.next().unwrap_or(",");
                self.set_separator = escaped_char(value)
                    .ok_or_else(|| format!("unreadable #set_separator {value:?}"))?;
            }
            Some("unset_field") => self.unset = parts.next().unwrap_or("-").to_owned(),
            Some("empty_field") => self.empty = parts.next().unwrap_or("(empty)").to_owned(),
            _ => {}
        }
        Ok(())
    }
}

/// A separator as a directive writes it: `\x09`, or the character itself.
fn escaped_char(value: &str) -> Option<char> {
    match value {
        "\\x09" | "\t" => Some('\t'),
        other if other.starts_with("\\x") => {
            u8::from_str_radix(other.get(2..)?, 16).ok().map(char::from)
        }
        other if other.chars().count() == 1 => other.chars().next(),
        _ => None,
    }
}

/// Reads conn.log text line by line into connection records. Feed it lines
/// with [`push_line`](Self::push_line).
#[derive(Debug, Default)]
pub struct ConnLogReader {
    log: LogReader,
}

impl ConnLogReader {
    /// Returns a reader at the start of a file.
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads one line (without its newline). Returns the record it holds, `None`
    /// for header, comment and blank lines, or the reason it cannot be read.
    pub fn push_line(&mut self, text: &str) -> Result<Option<FlowRecord>, ZeekLineError> {
        let line = self.log.line + 1;
        let Some(row) = self.log.push_line(text)? else {
            return Ok(None);
        };
        conn_record(&row)
            .map(Some)
            .map_err(|reason| ZeekLineError { line, reason })
    }
}

fn required<'a>(value: Option<&'a str>, name: &str) -> Result<&'a str, String> {
    value.ok_or_else(|| format!("{name} is missing"))
}

fn number<T: std::str::FromStr + Default>(value: Option<&str>, name: &str) -> Result<T, String> {
    match value {
        None => Ok(T::default()),
        Some(text) => text
            .parse()
            .map_err(|_| format!("{name} {text:?} is not a number")),
    }
}

/// Seconds (with a fraction, as Zeek writes `time` and `interval`) to nanoseconds,
/// exactly for plain decimals (`1379288667.706265`), through `f64` for exponents.
fn seconds_to_nanos(text: &str, name: &str) -> Result<i64, String> {
    let bad = || format!("{name} {text:?} is not a time in seconds");
    if text.contains(['e', 'E']) {
        let seconds: f64 = text.parse().map_err(|_| bad())?;
        if !seconds.is_finite() || seconds.abs() > 9.2e9 {
            return Err(format!("{name} {text:?} is out of range"));
        }
        return Ok((seconds * 1e9).round() as i64);
    }
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    if (whole.is_empty() && fraction.is_empty())
        || !whole.bytes().all(|b| b.is_ascii_digit())
        || !fraction.bytes().all(|b| b.is_ascii_digit())
    {
        return Err(bad());
    }
    let whole: i64 = if whole.is_empty() {
        0
    } else {
        whole
            .parse()
            .map_err(|_| format!("{name} {text:?} is out of range"))?
    };
    let mut nanos = 0i64;
    for (i, digit) in fraction.bytes().take(9).enumerate() {
        nanos += i64::from(digit - b'0') * 10i64.pow(8 - i as u32);
    }
    let total = whole
        .checked_mul(1_000_000_000)
        .and_then(|w| w.checked_add(nanos))
        .ok_or_else(|| format!("{name} {text:?} is out of range"))?;
    Ok(if negative { -total } else { total })
}

/// The connection record of a conn.log record (mapped as the module says).
pub fn conn_record(f: &Row<'_>) -> Result<FlowRecord, String> {
    let address = |value: Option<&str>, name: &str| -> Result<Addr16, String> {
        let text = required(value, name)?;
        text.parse::<std::net::IpAddr>()
            .map(Addr16::from)
            .map_err(|_| format!("{name} {text:?} is not an IP address"))
    };
    let src = address(f.get("id.orig_h"), "id.orig_h")?;
    let dst = address(f.get("id.resp_h"), "id.resp_h")?;
    let orig_p: u16 = number(f.get("id.orig_p"), "id.orig_p")?;
    let resp_p: u16 = number(f.get("id.resp_p"), "id.resp_p")?;
    let proto = match required(f.get("proto"), "proto")? {
        "tcp" => ip_proto::TCP,
        "udp" => ip_proto::UDP,
        "icmp" if src.is_v4() => ip_proto::ICMP,
        "icmp" => ip_proto::ICMPV6,
        "unknown_transport" => 0,
        other => return Err(format!("proto {other:?} is not tcp, udp or icmp")),
    };
    let (src_port, dst_port) = if matches!(proto, ip_proto::ICMP | ip_proto::ICMPV6) {
        let (kind, code) = (orig_p.min(255), resp_p.min(255));
        (0, kind << 8 | code)
    } else {
        (orig_p, resp_p)
    };
    let first_ns = seconds_to_nanos(required(f.get("ts"), "ts")?, "ts")?;
    let duration_ns = match f.get("duration") {
        Some(text) => seconds_to_nanos(text, "duration")?.max(0),
        None => 0,
    };
    let state = match f.get("conn_state") {
        None => FlowState::Unknown,
        Some(name) => {
            FlowState::from_name(name).ok_or_else(|| format!("conn_state {name:?} is unknown"))?
        }
    };
    let tcp_flags = if proto == ip_proto::TCP {
        f.get("history").map_or(0, history_flags)
    } else {
        0
    };
    Ok(FlowRecord {
        first_ns,
        last_ns: first_ns.saturating_add(duration_ns),
        src,
        dst,
        src_port,
        dst_port,
        proto,
        packets_out: number(f.get("orig_pkts"), "orig_pkts")?,
        bytes_out: number(f.get("orig_ip_bytes"), "orig_ip_bytes")?,
        packets_in: number(f.get("resp_pkts"), "resp_pkts")?,
        bytes_in: number(f.get("resp_ip_bytes"), "resp_ip_bytes")?,
        tcp_flags,
        state,
        source: FlowSource::Zeek,
        exporter: Addr16::default(),
        uid: f.get("uid").unwrap_or_default().chars().take(64).collect(),
        app: None,
    })
}

/// The application fields of one record of a dns, ssl, http or ssh log, for
/// the connection of its `uid`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AppRecord {
    /// The connection's uid (as its conn.log record has it).
    pub uid: String,
    /// The record's `ts`, in nanoseconds.
    pub ts_ns: i64,
    /// The fields it gives (one protocol's).
    pub fields: AppFields,
}

/// Reads the application fields of a record of a dns, ssl, http or ssh log,
/// in hindsight's fields:
/// - dns: `trans_id`, `query`, `qtype`, `rcode`, `answers` and `TTLs` (at most
///   [`DnsFields::MAX_ANSWERS`]);
/// - ssl: `server_name` (SNI), `version` and `cipher` (by name; a name
///   hindsight does not know leaves the field unset), `next_protocol`
///   (the ALPN protocol the server chose, as a list of one), and `ja3`, `ja3s`,
///   `ja4` where a Zeek package adds them;
/// - http: `method`, `host`, `uri`, `user_agent`, `status_code`, and the first
///   of `resp_mime_types` as the content type (Zeek logs the type it sniffs,
///   not the header);
/// - ssh: `client` and `server` (the identification strings).
///
/// `None` for a record without the field that makes it one (a DNS record
/// without a query) and for other kinds.
pub fn app_record(row: &Row<'_>) -> Result<Option<AppRecord>, String> {
    let text = |name: &str| row.get(name).map(str::to_owned);
    let mut fields = AppFields::default();
    match row.kind() {
        LogKind::Dns => {
            let Some(query) = text("query") else {
                return Ok(None);
            };
            let mut answers = row.list("answers");
            answers.truncate(DnsFields::MAX_ANSWERS);
            let mut ttls = Vec::new();
            for ttl in row.list("TTLs").iter().take(answers.len()) {
                let nanos = seconds_to_nanos(ttl, "TTLs")?;
                ttls.push(u32::try_from((nanos + 500_000_000) / 1_000_000_000).unwrap_or(0));
            }
            fields.dns = Some(DnsFields {
                id: number(row.get("trans_id"), "trans_id")?,
                query,
                qtype: number(row.get("qtype"), "qtype")?,
                rcode: row
                    .get("rcode")
                    .map(|code| number(Some(code), "rcode"))
                    .transpose()?,
                answers,
                ttls,
            });
        }
        LogKind::Ssl => {
            fields.tls = Some(TlsFields {
                sni: text("server_name"),
                alpn: row.list("next_protocol"),
                version: row.get("version").and_then(TlsFields::version_from_name),
                cipher: row.get("cipher").and_then(TlsFields::cipher_from_name),
                ja3: text("ja3"),
                ja3s: text("ja3s"),
                ja4: text("ja4"),
                ..TlsFields::default()
            });
        }
        LogKind::Http => {
            fields.http = Some(HttpFields {
                method: text("method"),
                host: text("host"),
                uri: text("uri"),
                user_agent: text("user_agent"),
                status: row
                    .get("status_code")
                    .map(|code| number(Some(code), "status_code"))
                    .transpose()?,
                content_type: row.list("resp_mime_types").into_iter().next(),
            });
        }
        LogKind::Ssh => {
            fields.ssh = Some(SshFields {
                client: text("client"),
                server: text("server"),
            });
        }
        LogKind::Conn | LogKind::Other(_) => return Ok(None),
    }
    let uid = required(row.get("uid"), "uid")?;
    let ts_ns = seconds_to_nanos(required(row.get("ts"), "ts")?, "ts")?;
    Ok(Some(AppRecord {
        uid: uid.chars().take(64).collect(),
        ts_ns,
        fields,
    }))
}

/// The application fields of dns, ssl, http and ssh logs, by uid, waiting for
/// the conn.log records they join. Of several records of one protocol for a
/// uid (a DNS connection's many transactions), the first by `ts` is kept, as
/// hindsight keeps a connection's first transaction. At most `limit` uids wait;
/// records of further uids are counted and dropped.
#[derive(Debug)]
pub struct UidJoin {
    pending: std::collections::HashMap<String, Pending>,
    limit: usize,
    over_limit: u64,
}

#[derive(Debug, Default)]
struct Pending {
    fields: AppFields,
    /// `ts` of the kept record of each protocol: dns, tls, http, ssh.
    kept_ts: [Option<i64>; 4],
}

impl UidJoin {
    /// An empty join holding at most `limit` uids.
    pub fn new(limit: usize) -> Self {
        Self {
            pending: std::collections::HashMap::new(),
            limit,
            over_limit: 0,
        }
    }

    /// Adds a record's fields to its uid's; false (and counted) if the uid is
    /// new and `limit` uids already wait.
    pub fn add(&mut self, record: AppRecord) -> bool {
        if !self.pending.contains_key(&record.uid) && self.pending.len() >= self.limit {
            self.over_limit += 1;
            return false;
        }
        let pending = self.pending.entry(record.uid).or_default();
        let ts = record.ts_ns;
        let newer = |kept: &mut Option<i64>| {
            let take = kept.is_none_or(|k| ts < k);
            if take {
                *kept = Some(ts);
            }
            take
        };
        let f = record.fields;
        let [dns, tls, http, ssh] = &mut pending.kept_ts;
        if f.dns.is_some() && newer(dns) {
            pending.fields.dns = f.dns;
        }
        if f.tls.is_some() && newer(tls) {
            pending.fields.tls = f.tls;
        }
        if f.http.is_some() && newer(http) {
            pending.fields.http = f.http;
        }
        if f.ssh.is_some() && newer(ssh) {
            pending.fields.ssh = f.ssh;
        }
        true
    }

    /// The fields waiting for `uid`, removed.
    pub fn take(&mut self, uid: &str) -> Option<AppFields> {
        self.pending.remove(uid).map(|p| p.fields)
    }

    /// The uids waiting.
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    /// True if no uid waits.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Records dropped because `limit` uids waited.
    pub fn over_limit(&self) -> u64 {
        self.over_limit
    }
}

/// The TCP flags Zeek's `history` letters imply (upper case originator, lower
/// case responder; both count in the union).
fn history_flags(history: &str) -> u16 {
    let mut flags = 0;
    for letter in history.chars() {
        flags |= match letter.to_ascii_uppercase() {
            'S' => tcp_flags::SYN,
            'H' => tcp_flags::SYN | tcp_flags::ACK,
            'A' | 'D' => tcp_flags::ACK,
            'F' => tcp_flags::FIN,
            'R' => tcp_flags::RST,
            _ => 0,
        };
    }
    flags
}

/// Just enough JSON for one flat Zeek log object: string, number, boolean and
/// null values, and arrays of them (a set or vector field); nested objects, and
/// arrays and objects inside arrays, are skipped.
mod json {
    /// A value: text (strings unescaped, numbers and literals verbatim), or an
    /// array's elements as text.
    #[derive(Debug)]
    pub enum Value {
        Text(String),
        List(Vec<String>),
    }

    const MAX_DEPTH: usize = 32;

    pub fn parse_object(text: &str) -> Result<Vec<(String, Value)>, String> {
        let mut parser = Parser {
            bytes: text.as_bytes(),
            at: 0,
        };
        parser.space();
        parser.expect(b'{')?;
        let mut fields = Vec::new();
        parser.space();
        if parser.peek() == Some(b'}') {
            parser.at += 1;
        } else {
            loop {
                parser.space();
                let key = parser.string()?;
                parser.space();
                parser.expect(b':')?;
                parser.space();
                if let Some(value) = parser.value(0)? {
                    fields.push((key, value));
                }
                parser.space();
                match parser.next() {
                    Some(b',') => continue,
                    Some(b'}') => break,
                    _ => return Err(parser.error("expected , or }")),
                }
            }
        }
        parser.space();
        if parser.at != parser.bytes.len() {
            return Err(parser.error("text after the object"));
        }
        Ok(fields)
    }

    struct Parser<'a> {
        bytes: &'a [u8],
        at: usize,
    }

    impl Parser<'_> {
        fn error(&self, what: &str) -> String {
            format!("JSON: {what} at column {}", self.at + 1)
        }

        fn peek(&self) -> Option<u8> {
            self.bytes.get(self.at).copied()
        }

        fn next(&mut self) -> Option<u8> {
            let byte = self.peek();
            self.at += 1;
            byte
        }

        fn space(&mut self) {
            while matches!(self.peek(), Some(b' ' | b'\t' | b'\r' | b'\n')) {
                self.at += 1;
            }
        }

        fn expect(&mut self, byte: u8) -> Result<(), String> {
            if self.next() == Some(byte) {
                Ok(())
            } else {
                Err(self.error(&format!("expected {:?}", char::from(byte))))
            }
        }

        fn string(&mut self) -> Result<String, String> {
            self.expect(b'"')?;
            let mut out = Vec::new();
            loop {
                match self.next() {
                    None => return Err(self.error("unterminated string")),
                    Some(b'"') => break,
                    Some(b'\\') => match self.next() {
                        Some(b'"') => out.push(b'"'),
                        Some(b'\\') => out.push(b'\\'),
                        Some(b'/') => out.push(b'/'),
                        Some(b'b') => out.push(8),
                        Some(b'f') => out.push(12),
                        Some(b'n') => out.push(b'\n'),
                        Some(b'r') => out.push(b'\r'),
                        Some(b't') => out.push(b'\t'),
                        Some(b'u') => {
                            let hex = self
                                .bytes
                                .get(self.at..self.at + 4)
                                .and_then(|h| std::str::from_utf8(h).ok())
                                .and_then(|h| u32::from_str_radix(h, 16).ok())
                                .ok_or_else(|| self.error("bad \\u escape"))?;
                            self.at += 4;
                            let c = char::from_u32(hex).unwrap_or('\u{fffd}');
                            let mut buffer = [0u8; 4];
                            out.extend_from_slice(c.encode_utf8(&mut buffer).as_bytes());
                        }
                        _ => return Err(self.error("bad escape")),
                    },
                    Some(byte) => out.push(byte),
                }
            }
            String::from_utf8(out).map_err(|_| self.error("string is not UTF-8"))
        }

        /// Returns the value, or `None` for null and objects (skipped).
        fn value(&mut self, depth: usize) -> Result<Option<Value>, String> {
            if depth > MAX_DEPTH {
                return Err(self.error("nested too deep"));
            }
            match self.peek() {
                Some(b'"') => Ok(Some(Value::Text(self.string()?))),
                Some(open @ (b'[' | b'{')) => {
                    let close = if open == b'[' { b']' } else { b'}' };
                    self.at += 1;
                    self.space();
                    let mut items = Vec::new();
                    if self.peek() == Some(close) {
                        self.at += 1;
                    } else {
                        loop {
                            self.space();
                            if open == b'{' {
                                self.string()?;
                                self.space();
                                self.expect(b':')?;
                                self.space();
                            }
                            if let Some(Value::Text(item)) = self.value(depth + 1)? {
                                items.push(item);
                            }
                            self.space();
                            match self.next() {
                                Some(b',') => continue,
                                Some(byte) if byte == close => break,
                                _ => return Err(self.error("unterminated array or object")),
                            }
                        }
                    }
                    Ok((open == b'[').then_some(Value::List(items)))
                }
                Some(_) => {
                    let start = self.at;
                    while matches!(
                        self.peek(),
                        Some(b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E' | b'a'..=b'z')
                    ) {
                        self.at += 1;
                    }
                    if self.at == start {
                        return Err(self.error("expected a value"));
                    }
                    let text = std::str::from_utf8(&self.bytes[start..self.at])
                        .map_err(|_| self.error("bad literal"))?;
                    if text == "null" {
                        return Ok(None);
                    }
                    Ok(Some(Value::Text(text.to_owned())))
                }
                None => Err(self.error("expected a value")),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(text: &str) -> (Vec<FlowRecord>, Vec<ZeekLineError>) {
        let mut reader = ConnLogReader::new();
        let (mut records, mut errors) = (Vec::new(), Vec::new());
        for line in text.lines() {
            match reader.push_line(line) {
                Ok(Some(record)) => records.push(record),
                Ok(None) => {}
                Err(error) => errors.push(error),
            }
        }
        (records, errors)
    }

    const TSV: &str = "#separator \\x09\n#set_separator\t,\n#empty_field\t(empty)\n#unset_field\t-\n#path\tconn\n#fields\tts\tuid\tid.orig_h\tid.orig_p\tid.resp_h\tid.resp_p\tproto\tservice\tduration\torig_bytes\tresp_bytes\tconn_state\tlocal_orig\tmissed_bytes\thistory\torig_pkts\torig_ip_bytes\tresp_pkts\tresp_ip_bytes\ttunnel_parents\n#types\ttime\tstring\taddr\tport\taddr\tport\tenum\tstring\tinterval\tcount\tcount\tstring\tbool\tcount\tstring\tcount\tcount\tcount\tcount\ttable[string]\n1379288667.706265\tCoyZrY2g74UvMMgp4a\t192.168.33.10\t1032\t54.245.228.191\t80\ttcp\thttp\t0.447460\t601\t38393\tRSTO\t-\t0\tShADadR\t22\t1489\t31\t39641\t(empty)\n1379288700.000001\tCx\tfe80::1\t135\tff02::1\t0\ticmp\t-\t-\t-\t-\tOTH\t-\t0\t-\t1\t72\t0\t0\t(empty)\n";

    #[test]
    fn tsv_lines_become_records() {
        let (records, errors) = read_all(TSV);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(records.len(), 2);
        let r = &records[0];
        assert_eq!(r.first_ns, 1_379_288_667_706_265_000);
        assert_eq!(r.last_ns - r.first_ns, 447_460_000);
        assert_eq!(r.src.to_string(), "192.168.33.10");
        assert_eq!((r.src_port, r.dst_port, r.proto), (1032, 80, ip_proto::TCP));
        assert_eq!(
            (r.packets_out, r.bytes_out, r.packets_in, r.bytes_in),
            (22, 1489, 31, 39641)
        );
        assert_eq!(r.state, FlowState::RSTO);
        assert_eq!(r.source, FlowSource::Zeek);
        assert_eq!(r.uid, "CoyZrY2g74UvMMgp4a");
        assert_eq!(
            r.tcp_flags,
            tcp_flags::SYN | tcp_flags::ACK | tcp_flags::RST
        );
        let icmp = &records[1];
        assert_eq!(icmp.proto, ip_proto::ICMPV6);
        assert_eq!((icmp.src_port, icmp.dst_port), (0, 135 << 8));
        assert_eq!(icmp.first_ns, icmp.last_ns);
    }

    #[test]
    fn json_lines_become_the_same_records() {
        let json = r#"{"ts":1379288667.706265,"uid":"CoyZrY2g74UvMMgp4a","id.orig_h":"192.168.33.10","id.orig_p":1032,"id.resp_h":"54.245.228.191","id.resp_p":80,"proto":"tcp","service":"http","duration":0.44746,"orig_bytes":601,"resp_bytes":38393,"conn_state":"RSTO","missed_bytes":0,"history":"ShADadR","orig_pkts":22,"orig_ip_bytes":1489,"resp_pkts":31,"resp_ip_bytes":39641,"tunnel_parents":[]}"#;
        let (records, errors) = read_all(json);
        assert!(errors.is_empty(), "{errors:?}");
        let (tsv, _) = read_all(TSV);
        assert_eq!(records[0], tsv[0]);
    }

    /// The application records of a log's text, with its kind.
    fn app_records(text: &str) -> (Option<LogKind>, Vec<AppRecord>) {
        let mut reader = LogReader::new();
        let mut records = Vec::new();
        for line in text.lines() {
            let row = reader.push_line(line).unwrap();
            if let Some(row) = row {
                records.extend(app_record(&row).unwrap());
            }
        }
        (reader.kind, records)
    }

    #[test]
    fn dns_ssl_http_and_ssh_records_give_their_fields() {
        let dns = "#separator \\x09\n#set_separator\t,\n#empty_field\t(empty)\n#unset_field\t-\n#path\tdns\n#fields\tts\tuid\tid.orig_h\tid.orig_p\tid.resp_h\tid.resp_p\tproto\ttrans_id\tquery\tqclass\tqclass_name\tqtype\tqtype_name\trcode\trcode_name\tAA\tTC\tRD\tRA\tZ\tanswers\tTTLs\trejected\n1379288667.696869\tCZ\t192.168.33.10\t1030\t4.2.2.3\t53\tudp\t50071\twww.guyspy.com\t1\tC_INTERNET\t1\tA\t0\tNOERROR\tF\tF\tT\tT\t0\tguyspy.com,54.245.228.191\t1000.000000,36.000000\tF\n";
        let (kind, records) = app_records(dns);
        assert_eq!(kind, Some(LogKind::Dns));
        let d = records[0].fields.dns.as_ref().unwrap();
        assert_eq!(records[0].uid, "CZ");
        assert_eq!(records[0].ts_ns, 1_379_288_667_696_869_000);
        assert_eq!(
            (d.id, d.query.as_str(), d.qtype, d.rcode),
            (50071, "www.guyspy.com", 1, Some(0))
        );
        assert_eq!(d.answers, ["guyspy.com", "54.245.228.191"]);
        assert_eq!(d.ttls, [1000, 36]);

        let ssl = r#"{"ts":1575413156.177305,"uid":"Cj","id.orig_h":"10.18.20.97","id.orig_p":49204,"id.resp_h":"69.147.64.34","id.resp_p":443,"version":"TLSv12","cipher":"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256","curve":"secp256r1","server_name":"mail.aol.com","next_protocol":"h2","cert_chain_fuids":["F1","F2"]}"#;
        let (kind, records) = app_records(ssl);
        assert_eq!(kind, Some(LogKind::Ssl));
        let t = records[0].fields.tls.as_ref().unwrap();
        assert_eq!(t.sni.as_deref(), Some("mail.aol.com"));
        assert_eq!((t.version, t.cipher), (Some(0x0303), Some(0xc02b)));
        assert_eq!(t.alpn, ["h2"]);

        let http = r#"{"_path":"http","ts":1575413155.938245,"uid":"Ct","method":"GET","host":"mail.aol.com","uri":"/","user_agent":"Mozilla/5.0","status_code":301,"tags":[],"resp_mime_types":["text/html"]}"#;
        let (kind, records) = app_records(http);
        assert_eq!(kind, Some(LogKind::Http));
        let h = records[0].fields.http.as_ref().unwrap();
        assert_eq!(
            (
                h.method.as_deref(),
                h.host.as_deref(),
                h.uri.as_deref(),
                h.status
            ),
            (Some("GET"), Some("mail.aol.com"), Some("/"), Some(301))
        );
        assert_eq!(h.content_type.as_deref(), Some("text/html"));

        let ssh = r#"{"ts":1.5,"uid":"Cs","auth_success":true,"client":"SSH-2.0-OpenSSH_9.2","server":"SSH-2.0-OpenSSH_8.4"}"#;
        let (kind, records) = app_records(ssh);
        assert_eq!(kind, Some(LogKind::Ssh));
        let s = records[0].fields.ssh.as_ref().unwrap();
        assert_eq!(s.client.as_deref(), Some("SSH-2.0-OpenSSH_9.2"));

        let (kind, records) = app_records("#path\tx509\n#fields\tts\tid\n1.0\tF\n");
        assert_eq!(kind, Some(LogKind::Other("x509".to_owned())));
        assert!(records.is_empty());
    }

    #[test]
    fn a_join_keeps_each_protocols_first_record_by_time_within_its_limit() {
        let dns = |uid: &str, ts: i64, query: &str| AppRecord {
            uid: uid.to_owned(),
            ts_ns: ts,
            fields: AppFields {
                dns: Some(DnsFields {
                    query: query.to_owned(),
                    ..DnsFields::default()
                }),
                ..AppFields::default()
            },
        };
        let mut join = UidJoin::new(2);
        assert!(join.add(dns("A", 20, "second")));
        assert!(join.add(dns("A", 10, "first")));
        assert!(join.add(dns("A", 30, "third")));
        let mut http = dns("A", 40, "");
        http.fields = AppFields {
            http: Some(HttpFields::default()),
            ..AppFields::default()
        };
        assert!(join.add(http));
        assert!(join.add(dns("B", 1, "b")));
        assert!(!join.add(dns("C", 1, "c")));
        assert_eq!((join.len(), join.over_limit()), (2, 1));
        let a = join.take("A").unwrap();
        assert_eq!(a.dns.unwrap().query, "first");
        assert!(a.http.is_some());
        assert!(join.take("A").is_none());
        assert!(join.add(dns("C", 1, "c")));
    }

    #[test]
    fn bad_lines_are_reported_with_their_number_and_skipped() {
        let text = format!(
            "{TSV}garbage\n1379288667.7\tC\t10.0.0.300\t1\t10.0.0.1\t2\ttcp\n1379288667.7\tC\t10.0.0.3\t1\t10.0.0.1\t99999\ttcp\n"
        );
        let (records, errors) = read_all(&text);
        assert_eq!(records.len(), 2);
        let lines: Vec<u64> = errors.iter().map(|e| e.line).collect();
        assert_eq!(lines, [10, 11, 12]);
        assert!(errors[1].reason.contains("10.0.0.300"), "{}", errors[1]);
        assert!(errors[2].reason.contains("99999"), "{}", errors[2]);
        let (_, errors) = read_all("{\"ts\":1,\"uid\":\"C\"\n{\"ts\":\"x\"}");
        assert_eq!(errors.len(), 2);
        let (_, errors) = read_all("1.0\tC\n");
        assert!(errors[0].reason.contains("#fields"));
    }
}
