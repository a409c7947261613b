//! Zeek `conn.log` as a source of connection records: the TSV format with its
//! `#fields` header, and JSON lines (`LogAscii::use_json`), told apart by the
//! first non-blank character of the file.
//!
//! Mapping to [`FlowRecord`]: `ts` is the start, `ts + duration` the end;
//! `orig_pkts`/`orig_ip_bytes` and `resp_pkts`/`resp_ip_bytes` are the counters
//! (IP bytes, as hindsight counts); `conn_state` the state; `uid` is kept. TCP flags
//! are the union that `history` implies (`S` SYN, `H` SYN-ACK, `A`/`D` ACK, `F`
//! FIN, `R` RST, either case). ICMP connections carry Zeek's type and code
//! (`orig_p`, `resp_p`) as hindsight does: source port 0, destination port
//! `type << 8 | code`. A line that cannot be read is reported with its line
//! number and skipped; the rest of the file is still read.

use hindsight_model::{Addr16, FlowRecord, FlowSource, FlowState, ip_proto, tcp_flags};

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

/// Reads conn.log text line by line. Feed it lines with [`push_line`](Self::push_line).
#[derive(Debug, Default)]
pub struct ConnLogReader {
    line: u64,
    /// Column positions from `#fields` (TSV), once seen.
    columns: Option<Columns>,
    separator: Option<char>,
    unset: String,
    empty: String,
    json: Option<bool>,
}

/// Positions of the fields hindsight reads, by name.
#[derive(Clone, Debug, Default)]
struct Columns {
    ts: Option<usize>,
    uid: Option<usize>,
    orig_h: Option<usize>,
    orig_p: Option<usize>,
    resp_h: Option<usize>,
    resp_p: Option<usize>,
    proto: Option<usize>,
    duration: Option<usize>,
    conn_state: Option<usize>,
    history: Option<usize>,
    orig_pkts: Option<usize>,
    orig_ip_bytes: Option<usize>,
    resp_pkts: Option<usize>,
    resp_ip_bytes: Option<usize>,
}

impl Columns {
    fn from_names<'a>(names: impl Iterator<Item = &'a str>) -> Self {
        let mut columns = Self::default();
        for (i, name) in names.enumerate() {
            let slot = match name {
                "ts" => &mut columns.ts,
                "uid" => &mut columns.uid,
                "id.orig_h" => &mut columns.orig_h,
                "id.orig_p" => &mut columns.orig_p,
                "id.resp_h" => &mut columns.resp_h,
                "id.resp_p" => &mut columns.resp_p,
                "proto" => &mut columns.proto,
                "duration" => &mut columns.duration,
                "conn_state" => &mut columns.conn_state,
                "history" => &mut columns.history,
                "orig_pkts" => &mut columns.orig_pkts,
                "orig_ip_bytes" => &mut columns.orig_ip_bytes,
                "resp_pkts" => &mut columns.resp_pkts,
                "resp_ip_bytes" => &mut columns.resp_ip_bytes,
                _ => continue,
            };
            *slot = Some(i);
        }
        columns
    }
}

/// The fields of one connection, as text, before conversion.
#[derive(Debug, Default)]
struct Fields<'a> {
    ts: Option<&'a str>,
    uid: Option<&'a str>,
    orig_h: Option<&'a str>,
    orig_p: Option<&'a str>,
    resp_h: Option<&'a str>,
    resp_p: Option<&'a str>,
    proto: Option<&'a str>,
    duration: Option<&'a str>,
    conn_state: Option<&'a str>,
    history: Option<&'a str>,
    orig_pkts: Option<&'a str>,
    orig_ip_bytes: Option<&'a str>,
    resp_pkts: Option<&'a str>,
    resp_ip_bytes: Option<&'a str>,
}

impl ConnLogReader {
    /// Returns a reader at the start of a file.
    pub fn new() -> Self {
        Self {
            unset: "-".to_owned(),
            empty: "(empty)".to_owned(),
            ..Self::default()
        }
    }

    /// Reads one line (without its newline). Returns the record it holds, `None`
    /// for header, comment and blank lines, or the reason it cannot be read.
    pub fn push_line(&mut self, text: &str) -> Result<Option<FlowRecord>, ZeekLineError> {
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
            return self.json_line(text).map_err(fail);
        }
        if let Some(directive) = text.strip_prefix('#') {
            self.directive(directive).map_err(fail)?;
            return Ok(None);
        }
        self.tsv_line(text).map_err(fail)
    }

    fn directive(&mut self, directive: &str) -> Result<(), String> {
        if let Some(value) = directive.strip_prefix("separator ") {
            let separator = match value {
                "\\x09" | "\t" => '\t',
                other if other.starts_with("\\x") => {
                    let code = u8::from_str_radix(other.get(2..).unwrap_or(""), 16)
                        .map_err(|_| format!("unreadable #separator {other:?}"))?;
                    char::from(code)
                }
                other if other.chars().count() == 1 => other.chars().next().unwrap_or('\t'),
                other => return Err(format!("unreadable #separator {other:?}")),
            };
            self.separator = Some(separator);
            return Ok(());
        }
        let separator = self.separator.unwrap_or('\t');
        let mut parts = directive.split(separator);
        match parts.next() {
            Some("fields") => self.columns = Some(Columns::from_names(parts)),
            Some("unset_field") => self.unset = parts.next().unwrap_or("-").to_owned(),
            Some("empty_field") => self.empty = parts.next().unwrap_or("(empty)").to_owned(),
            _ => {}
        }
        Ok(())
    }

    fn tsv_line(&self, text: &str) -> Result<Option<FlowRecord>, String> {
        let Some(columns) = &self.columns else {
            return Err("a data line before the #fields header".to_owned());
        };
        let values: Vec<&str> = text.split(self.separator.unwrap_or('\t')).collect();
        let get = |index: Option<usize>| {
            index
                .and_then(|i| values.get(i).copied())
                .filter(|v| *v != self.unset && *v != self.empty)
        };
        let fields = Fields {
            ts: get(columns.ts),
            uid: get(columns.uid),
            orig_h: get(columns.orig_h),
            orig_p: get(columns.orig_p),
            resp_h: get(columns.resp_h),
            resp_p: get(columns.resp_p),
            proto: get(columns.proto),
            duration: get(columns.duration),
            conn_state: get(columns.conn_state),
            history: get(columns.history),
            orig_pkts: get(columns.orig_pkts),
            orig_ip_bytes: get(columns.orig_ip_bytes),
            resp_pkts: get(columns.resp_pkts),
            resp_ip_bytes: get(columns.resp_ip_bytes),
        };
        record(&fields).map(Some)
    }

    fn json_line(&self, text: &str) -> Result<Option<FlowRecord>, String> {
        let object = json::parse_object(text)?;
        let get = |name: &str| {
            object
                .iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| value.as_str())
        };
        let fields = Fields {
            ts: get("ts"),
            uid: get("uid"),
            orig_h: get("id.orig_h"),
            orig_p: get("id.orig_p"),
            resp_h: get("id.resp_h"),
            resp_p: get("id.resp_p"),
            proto: get("proto"),
            duration: get("duration"),
            conn_state: get("conn_state"),
            history: get("history"),
            orig_pkts: get("orig_pkts"),
            orig_ip_bytes: get("orig_ip_bytes"),
            resp_pkts: get("resp_pkts"),
            resp_ip_bytes: get("resp_ip_bytes"),
        };
        record(&fields).map(Some)
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

fn record(f: &Fields<'_>) -> Result<FlowRecord, String> {
    let address = |value: Option<&str>, name: &str| -> Result<Addr16, String> {
        let text = required(value, name)?;
        text.parse::<std::net::IpAddr>()
            .map(Addr16::from)
            .map_err(|_| format!("{name} {text:?} is not an IP address"))
    };
    let src = address(f.orig_h, "id.orig_h")?;
    let dst = address(f.resp_h, "id.resp_h")?;
    let orig_p: u16 = number(f.orig_p, "id.orig_p")?;
    let resp_p: u16 = number(f.resp_p, "id.resp_p")?;
    let proto = match required(f.proto, "proto")? {
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
    let first_ns = seconds_to_nanos(required(f.ts, "ts")?, "ts")?;
    let duration_ns = match f.duration {
        Some(text) => seconds_to_nanos(text, "duration")?.max(0),
        None => 0,
    };
    let state = match f.conn_state {
        None => FlowState::Unknown,
        Some(name) => {
            FlowState::from_name(name).ok_or_else(|| format!("conn_state {name:?} is unknown"))?
        }
    };
    let tcp_flags = if proto == ip_proto::TCP {
        f.history.map_or(0, history_flags)
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
        packets_out: number(f.orig_pkts, "orig_pkts")?,
        bytes_out: number(f.orig_ip_bytes, "orig_ip_bytes")?,
        packets_in: number(f.resp_pkts, "resp_pkts")?,
        bytes_in: number(f.resp_ip_bytes, "resp_ip_bytes")?,
        tcp_flags,
        state,
        source: FlowSource::Zeek,
        exporter: Addr16::default(),
        uid: f.uid.unwrap_or_default().chars().take(64).collect(),
        app: None,
    })
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

/// Just enough JSON for one flat Zeek log object: string, number, boolean, null
/// and array values (arrays and nested objects are skipped), no allocation beyond
/// the unescaped strings.
mod json {
    /// A value as text: strings unescaped, numbers and literals verbatim.
    #[derive(Debug)]
    pub struct Value(String);

    impl Value {
        pub fn as_str(&self) -> &str {
            &self.0
        }
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

        /// Returns the value, or `None` for arrays and objects (skipped).
        fn value(&mut self, depth: usize) -> Result<Option<Value>, String> {
            if depth > MAX_DEPTH {
                return Err(self.error("nested too deep"));
            }
            match self.peek() {
                Some(b'"') => Ok(Some(Value(self.string()?))),
                Some(open @ (b'[' | b'{')) => {
                    let close = if open == b'[' { b']' } else { b'}' };
                    self.at += 1;
                    self.space();
                    if self.peek() == Some(close) {
                        self.at += 1;
                        return Ok(None);
                    }
                    loop {
                        self.space();
                        if open == b'{' {
                            self.string()?;
                            self.space();
                            self.expect(b':')?;
                            self.space();
                        }
                        self.value(depth + 1)?;
                        self.space();
                        match self.next() {
                            Some(b',') => continue,
                            Some(byte) if byte == close => return Ok(None),
                            _ => return Err(self.error("unterminated array or object")),
                        }
                    }
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
                    Ok(Some(Value(text.to_owned())))
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
