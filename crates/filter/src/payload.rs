//! Wireshark's tests of a packet's bytes: byte fields and protocols as bytes
//! (`frame`, `eth`, `ip`, `ipv6`, `tcp`, `udp`, `tcp.payload`, `udp.payload`,
//! `eth.src`, `eth.dst`, `eth.addr`), their slices (`frame[12:2]`,
//! `tcp.payload[0:3]`, `ip[-4:]`), compared with `==`/`!=`, searched with
//! `contains` and regular expressions (`matches`, case-insensitive as in
//! Wireshark, bounded in size and linear in time).
//!
//! A protocol as bytes is, as Wireshark's protocol values are, its header where
//! it is sliced or compared (`ip[0]`, `tcp[13]`: the IPv4 header's length, the
//! TCP header's data offset, 8 bytes of UDP, 14 of Ethernet, 40 of IPv6), and
//! everything from its first byte to the end of its packet where it is searched
//! (`ip contains`, `tcp matches`: the IP packet by its length field, the TCP
//! segment, the UDP datagram by its length field, the whole Ethernet frame).
//! They are the innermost packet's; the Ethernet fields are Ethernet frames' only.

use std::fmt;

use hindsight_model::{DecodeStatus, LinkType, PacketRecord, ip_proto};

use super::offsets::Abort;

/// Longest regular expression accepted, in bytes.
pub const MAX_PATTERN_LEN: usize = 4096;
/// Memory a compiled regular expression may take.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// A field whose value is bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BytesField {
    /// `frame`: the kept bytes of the frame.
    Frame,
    /// `eth`: the Ethernet frame.
    Eth,
    /// `ip`: the IPv4 packet.
    Ip,
    /// `ipv6`: the IPv6 packet.
    Ipv6,
    /// `tcp`: the TCP segment, header first.
    Tcp,
    /// `udp`: the UDP datagram, header first.
    Udp,
    /// `tcp.payload`.
    TcpPayload,
    /// `udp.payload`.
    UdpPayload,
    /// `eth.src`.
    EthSrc,
    /// `eth.dst`.
    EthDst,
    /// `eth.addr`: either.
    EthAddr,
}

impl BytesField {
    /// The field of a name (`frame`, `tcp.payload`...).
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "frame" => BytesField::Frame,
            "eth" => BytesField::Eth,
            "ip" => BytesField::Ip,
            "ipv6" => BytesField::Ipv6,
            "tcp" => BytesField::Tcp,
            "udp" => BytesField::Udp,
            "tcp.payload" => BytesField::TcpPayload,
            "udp.payload" => BytesField::UdpPayload,
            "eth.src" => BytesField::EthSrc,
            "eth.dst" => BytesField::EthDst,
            "eth.addr" => BytesField::EthAddr,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            BytesField::Frame => "frame",
            BytesField::Eth => "eth",
            BytesField::Ip => "ip",
            BytesField::Ipv6 => "ipv6",
            BytesField::Tcp => "tcp",
            BytesField::Udp => "udp",
            BytesField::TcpPayload => "tcp.payload",
            BytesField::UdpPayload => "udp.payload",
            BytesField::EthSrc => "eth.src",
            BytesField::EthDst => "eth.dst",
            BytesField::EthAddr => "eth.addr",
        }
    }
}

/// `[start:length]`: `start` from the end when negative, `length` to the end
/// when `None`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Slice {
    /// First byte.
    pub start: i64,
    /// Bytes, or to the end.
    pub len: Option<u64>,
}

impl Slice {
    /// Parses the text between the brackets: `i`, `i:j`, `i-j`, `i:`, `:j`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let number = |part: &str| -> Result<i64, String> {
            part.trim()
                .parse::<i64>()
                .map_err(|_| format!("\"{part}\" is not a byte offset"))
        };
        let length = |part: &str| -> Result<u64, String> {
            part.trim()
                .parse::<u64>()
                .ok()
                .filter(|&len| len > 0)
                .ok_or_else(|| format!("\"{part}\" is not a slice length (a positive number)"))
        };
        let text = text.trim();
        if text.contains(',') {
            return Err("slices with several ranges are not supported".to_owned());
        }
        if let Some((start, len)) = text.split_once(':') {
            let start = if start.trim().is_empty() {
                0
            } else {
                number(start)?
            };
            let len = if len.trim().is_empty() {
                None
            } else {
                Some(length(len)?)
            };
            return Ok(Slice { start, len });
        }
        // `i-j` (inclusive), but not a negative start `-4`.
        if let Some(dash) = text
            .get(1..)
            .and_then(|rest| rest.find('-'))
            .map(|at| at + 1)
        {
            let (start, end) = (number(&text[..dash])?, number(&text[dash + 1..])?);
            if start < 0 || end < start {
                return Err(format!(
                    "\"{text}\" is not a range of bytes (start-end, end not before start)"
                ));
            }
            return Ok(Slice {
                start,
                len: Some((end - start + 1) as u64),
            });
        }
        Ok(Slice {
            start: number(text)?,
            len: Some(1),
        })
    }

    /// The slice of `value` (whose bytes past `value.len()` may exist but were
    /// not kept when `partial`): `Ok(None)` if it is not there.
    fn of<'v>(&self, value: &'v [u8], partial: bool) -> Result<Option<&'v [u8]>, Abort> {
        let start = if self.start < 0 {
            if partial {
                // Counted from an end that was not kept.
                return Err(Abort::PastKept);
            }
            match value.len().checked_sub(self.start.unsigned_abs() as usize) {
                Some(start) => start,
                None => return Ok(None),
            }
        } else {
            self.start as usize
        };
        let end = match self.len {
            Some(len) => start.saturating_add(len as usize),
            None if partial => return Err(Abort::PastKept),
            None => value.len(),
        };
        match value.get(start..end) {
            Some(slice) if end > start || self.len.is_none() => Ok(Some(slice)),
            Some(_) => Ok(None),
            None if partial => Err(Abort::PastKept),
            None => Ok(None),
        }
    }
}

impl fmt::Display for Slice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.len {
            Some(1) => write!(f, "[{}]", self.start),
            Some(len) => write!(f, "[{}:{len}]", self.start),
            None => write!(f, "[{}:]", self.start),
        }
    }
}

/// A compiled regular expression, compared by its text.
#[derive(Clone, Debug)]
pub struct Pattern {
    source: String,
    regex: regex::bytes::Regex,
}

impl Pattern {
    /// Compiles `source`, case-insensitive as Wireshark's `matches` is (`(?-i)`
    /// turns that off), over bytes.
    pub fn new(source: &str) -> Result<Self, String> {
        if source.len() > MAX_PATTERN_LEN {
            return Err(format!(
                "the regular expression is {} bytes long; the limit is {MAX_PATTERN_LEN}",
                source.len()
            ));
        }
        let regex = regex::bytes::RegexBuilder::new(source)
            .case_insensitive(true)
            .unicode(false)
            .size_limit(REGEX_SIZE_LIMIT)
            .dfa_size_limit(REGEX_SIZE_LIMIT)
            .build()
            .map_err(|error| match error {
                regex::Error::CompiledTooBig(_) => format!(
                    "the regular expression compiles to more than {} KiB",
                    REGEX_SIZE_LIMIT >> 10
                ),
                error => format!(
                    "not a regular expression: {}",
                    error.to_string().lines().last().unwrap_or("")
                ),
            })?;
        Ok(Self {
            source: source.to_owned(),
            regex,
        })
    }

    /// True if the expression matches somewhere in `bytes`.
    pub fn is_match(&self, bytes: &[u8]) -> bool {
        self.regex.is_match(bytes)
    }

    /// The expression's text.
    pub fn source(&self) -> &str {
        &self.source
    }
}

impl PartialEq for Pattern {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl Eq for Pattern {}

/// What is done with the bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BytesOp {
    /// The field is there (`tcp.payload`).
    Exists,
    /// `==` the bytes.
    Eq(Vec<u8>),
    /// `!=` the bytes (every occurrence differs).
    Ne(Vec<u8>),
    /// `contains` the bytes.
    Contains(Vec<u8>),
    /// `matches` the expression.
    Matches(Pattern),
}

/// A test of a byte field or protocol, or of a slice of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BytesTest {
    /// Whose bytes.
    pub field: BytesField,
    /// Which of them, if not all.
    pub slice: Option<Slice>,
    /// The test.
    pub op: BytesOp,
}

/// Writes bytes as Wireshark reads them back: a quoted string if they are
/// printable ASCII, else hex pairs joined with `:`.
fn write_bytes(f: &mut fmt::Formatter<'_>, bytes: &[u8]) -> fmt::Result {
    if bytes.is_empty() {
        return f.write_str("\"\"");
    }
    if bytes.iter().all(|b| (0x20..0x7f).contains(b)) {
        write_quoted(f, bytes.iter().map(|&b| char::from(b)))
    } else if let [byte] = bytes {
        // Quoted, so that `tcp[13] == "\x12"` cannot read as tcpdump's `tcp[13] == 12`.
        write!(f, "\"\\x{byte:02x}\"")
    } else {
        for (i, b) in bytes.iter().enumerate() {
            if i > 0 {
                f.write_str(":")?;
            }
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

fn write_quoted(f: &mut fmt::Formatter<'_>, text: impl Iterator<Item = char>) -> fmt::Result {
    f.write_str("\"")?;
    for c in text {
        if c == '"' || c == '\\' {
            f.write_str("\\")?;
        }
        write!(f, "{c}")?;
    }
    f.write_str("\"")
}

impl fmt::Display for BytesTest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.field.name())?;
        if let Some(slice) = &self.slice {
            write!(f, "{slice}")?;
        }
        match &self.op {
            BytesOp::Exists => Ok(()),
            BytesOp::Eq(bytes) => {
                f.write_str(" == ")?;
                write_bytes(f, bytes)
            }
            BytesOp::Ne(bytes) => {
                f.write_str(" != ")?;
                write_bytes(f, bytes)
            }
            BytesOp::Contains(bytes) => {
                f.write_str(" contains ")?;
                write_bytes(f, bytes)
            }
            BytesOp::Matches(pattern) => {
                f.write_str(" matches ")?;
                write_quoted(f, pattern.source.chars())
            }
        }
    }
}

/// Parses a bytes value: a quoted string (with Wireshark's escapes `\\"`,
/// `\\\\`, `\\n`, `\\r`, `\\t`, `\\0`, `\\xhh`), or hex bytes joined by `:`,
/// `-` or `.` (`16:03:01`), or one or two hex digits (one byte).
pub fn parse_bytes(token: &str, quoted: bool) -> Result<Vec<u8>, String> {
    if quoted {
        return unescape(token);
    }
    let parts: Vec<&str> = token.split([':', '-', '.']).collect();
    let mut bytes = Vec::with_capacity(parts.len());
    for part in &parts {
        if part.is_empty()
            || part.len() > 2
            || (parts.len() > 1 && part.len() != 2 && part.len() != 1)
        {
            return Err(format!(
                "\"{token}\" is not a byte string (write hex bytes such as 16:03:01, or a quoted string)"
            ));
        }
        bytes.push(u8::from_str_radix(part, 16).map_err(|_| {
            format!("\"{token}\" is not a byte string (write hex bytes such as 16:03:01, or a quoted string)")
        })?);
    }
    Ok(bytes)
}

/// The bytes of a quoted string's inside.
fn unescape(text: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            let mut buffer = [0u8; 4];
            out.extend_from_slice(c.encode_utf8(&mut buffer).as_bytes());
            continue;
        }
        match chars.next() {
            Some('n') => out.push(b'\n'),
            Some('r') => out.push(b'\r'),
            Some('t') => out.push(b'\t'),
            Some('0') => out.push(0),
            Some('x') => {
                let high = chars.next().and_then(|c| c.to_digit(16));
                let low = chars.next().and_then(|c| c.to_digit(16));
                match (high, low) {
                    (Some(high), Some(low)) => out.push((high * 16 + low) as u8),
                    _ => return Err("\\x needs two hex digits".to_owned()),
                }
            }
            Some(c @ ('"' | '\\')) => out.push(c as u8),
            Some(other) => return Err(format!("unknown escape \\{other} in a string")),
            None => return Err("a string ends with a lone \\".to_owned()),
        }
    }
    Ok(out)
}

/// The occurrences of a field's bytes in a packet (at most two, for
/// `eth.addr`), each with whether bytes past it were captured but not kept.
/// `searched`: the protocols as searched (to the end of their packet), else
/// as sliced and compared (their header).
fn values<'f>(
    field: BytesField,
    record: &PacketRecord,
    frame: &'f [u8],
    macs: &'f [[u8; 6]; 2],
    searched: bool,
) -> [Option<(&'f [u8], bool)>; 2] {
    let cut = (frame.len() as u64) < u64::from(record.cap_len);
    let h = &record.headers;
    let range = |range: Option<(usize, usize)>| {
        let (start, end) = range?;
        let end = end.min(frame.len());
        frame
            .get(start..end)
            .map(|bytes| (bytes, cut && end == frame.len()))
    };
    let layout = || hindsight_decode::layout(record.link_type, frame).1;
    let fragment = h.status == DecodeStatus::Fragment;
    // A protocol's header: from its start, `len` bytes (within its packet).
    let header = |range: Option<(usize, usize)>, len: Option<usize>| {
        let (start, end) = range?;
        let len = len?;
        Some((start, end.min(start.saturating_add(len))))
    };
    let transport = |proto: u8| {
        if h.ip_proto != Some(proto) || fragment {
            return None;
        }
        let layout = layout();
        match (searched, proto) {
            (true, _) => layout.transport,
            (false, ip_proto::TCP) => {
                let start = layout.transport?.0;
                header(
                    layout.transport,
                    Some(layout.payload?.saturating_sub(start)),
                )
            }
            (false, _) => header(layout.transport, Some(8)),
        }
    };
    let network = || {
        let layout = layout();
        if searched {
            return layout.network;
        }
        let len = match h.ip_version {
            Some(4) => layout
                .network
                .and_then(|(start, _)| frame.get(start))
                .map(|&first| usize::from(first & 0x0f) * 4),
            _ => Some(40),
        };
        header(layout.network, len)
    };
    let ethernet = record.link_type == LinkType::ETHERNET;
    let payload = |proto: u8| {
        if h.ip_proto != Some(proto) || fragment {
            return None;
        }
        let layout = layout();
        let (start, end) = (layout.payload?, layout.transport?.1);
        range(Some((start, end))).filter(|(bytes, partial)| !bytes.is_empty() || *partial)
    };
    match field {
        BytesField::Frame => [Some((frame, cut)), None],
        BytesField::Eth if ethernet && searched => [Some((frame, cut)), None],
        BytesField::Eth if ethernet => [range(Some((0, 14))), None],
        BytesField::Eth => [None, None],
        BytesField::Ip if h.ip_version == Some(4) => [range(network()), None],
        BytesField::Ipv6 if h.ip_version == Some(6) => [range(network()), None],
        BytesField::Ip | BytesField::Ipv6 => [None, None],
        BytesField::Tcp => [range(transport(ip_proto::TCP)), None],
        BytesField::Udp => [range(transport(ip_proto::UDP)), None],
        BytesField::TcpPayload => [payload(ip_proto::TCP), None],
        BytesField::UdpPayload => [payload(ip_proto::UDP), None],
        BytesField::EthSrc | BytesField::EthDst | BytesField::EthAddr if !ethernet => [None, None],
        BytesField::EthSrc => [h.src_mac.map(|_| (&macs[1][..], false)), None],
        BytesField::EthDst => [h.dst_mac.map(|_| (&macs[0][..], false)), None],
        BytesField::EthAddr => [
            h.dst_mac.map(|_| (&macs[0][..], false)),
            h.src_mac.map(|_| (&macs[1][..], false)),
        ],
    }
}

/// Whether a test reads its protocol as searched (to the end of its packet).
fn searched_of(test: &BytesTest) -> bool {
    test.slice.is_none() && matches!(test.op, BytesOp::Contains(_) | BytesOp::Matches(_))
}

/// Whether the record's decoded headers say the packet has the field's layer.
fn present(field: BytesField, record: &PacketRecord) -> bool {
    let h = &record.headers;
    let transport = |proto: u8| h.ip_proto == Some(proto) && h.status != DecodeStatus::Fragment;
    match field {
        BytesField::Frame => true,
        BytesField::Eth | BytesField::EthSrc | BytesField::EthDst | BytesField::EthAddr => {
            record.link_type == LinkType::ETHERNET
        }
        BytesField::Ip => h.ip_version == Some(4),
        BytesField::Ipv6 => h.ip_version == Some(6),
        BytesField::Tcp | BytesField::TcpPayload => transport(ip_proto::TCP),
        BytesField::Udp | BytesField::UdpPayload => transport(ip_proto::UDP),
    }
}

impl BytesTest {
    /// Evaluates the test over a packet and its (kept) bytes.
    pub fn eval(&self, record: &PacketRecord, frame: &[u8]) -> Result<bool, Abort> {
        let macs = [
            record.headers.dst_mac.unwrap_or_default(),
            record.headers.src_mac.unwrap_or_default(),
        ];
        let mut seen = 0usize;
        let mut unknown = false;
        let mut all_differ = true;
        let occurrences = values(self.field, record, frame, &macs, searched_of(self));
        if occurrences.iter().all(Option::is_none)
            && (frame.len() as u64) < u64::from(record.cap_len)
            && present(self.field, record)
        {
            // The layer is in the packet but not in the bytes kept of it.
            return Err(Abort::PastKept);
        }
        for (value, partial) in occurrences.into_iter().flatten() {
            let value = match &self.slice {
                None => Some(value),
                Some(slice) => match slice.of(value, partial) {
                    Ok(value) => value,
                    Err(abort) => {
                        unknown |= abort != Abort::Reject;
                        continue;
                    }
                },
            };
            let Some(value) = value else {
                continue;
            };
            // A slice that fits in the kept bytes is whole; the field itself
            // is whole only if nothing past it was cut off.
            let partial = partial && self.slice.is_none();
            seen += 1;
            let hit = match &self.op {
                BytesOp::Exists => true,
                BytesOp::Eq(bytes) | BytesOp::Ne(bytes) if partial => {
                    // Cut short: unequal if what was kept already differs.
                    if value.len() > bytes.len() || !bytes.starts_with(value) {
                        false
                    } else {
                        unknown = true;
                        continue;
                    }
                }
                BytesOp::Eq(bytes) | BytesOp::Ne(bytes) => value == bytes.as_slice(),
                BytesOp::Contains(bytes) => {
                    let found = bytes.is_empty()
                        || value
                            .windows(bytes.len())
                            .any(|window| window == bytes.as_slice());
                    if !found && partial {
                        unknown = true;
                        continue;
                    }
                    found
                }
                BytesOp::Matches(pattern) => {
                    let found = pattern.regex.is_match(value);
                    if !found && partial {
                        unknown = true;
                        continue;
                    }
                    found
                }
            };
            match self.op {
                BytesOp::Ne(_) => all_differ &= !hit,
                _ if hit => return Ok(true),
                _ => {}
            }
        }
        if unknown {
            return Err(Abort::PastKept);
        }
        Ok(match self.op {
            BytesOp::Ne(_) => seen > 0 && all_differ,
            _ => false,
        })
    }
}
