//! Triggers (FlowScope): an [`Analyzer`] reads the capture ring behind the
//! producers and reports packets that match a trigger filter; [`dump`] writes the
//! packets of a time window around a trigger that match a dump filter, which a
//! [`DumpTemplate`] derives from the trigger packet (`host $src and port $dport`).
//! The dump pins the ring where it reads, so producers wait rather than overwrite
//! what it still needs.

#![cfg_attr(
    not(test),
    deny(
        clippy::indexing_slicing,
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic
    )
)]

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use hindsight_capture::{PcapWriter, TimestampPrecision};
use hindsight_filter::{Filter, ParseError};
use hindsight_model::{LinkType, PacketHeaders, PacketRecord};
use hindsight_ring::{Cursor, PacketRef, Ring, RingError};

/// What can go wrong with a trigger or a dump.
#[derive(Debug, thiserror::Error)]
pub enum TriggerError {
    /// A `$name` in a dump template that is not a known placeholder.
    #[error(
        "dump template {template:?}, column {column}: unknown placeholder ${name} (known: $src, $dst, $sport, $dport, $proto)"
    )]
    UnknownPlaceholder {
        /// The template.
        template: String,
        /// 1-based character position of the `$`.
        column: usize,
        /// The name after the `$`.
        name: String,
    },
    /// The trigger packet lacks a field the template needs.
    #[error("dump template {template:?} needs ${name}, which the trigger packet has not")]
    MissingField {
        /// The template.
        template: String,
        /// The placeholder's name.
        name: &'static str,
    },
    /// The rendered template is not a valid filter.
    #[error("dump template {template:?} gives an invalid filter: {error}")]
    Filter {
        /// The template.
        template: String,
        /// Why the filter does not parse.
        error: ParseError,
    },
    /// Writing the dump failed.
    #[error("writing dump {path}: {error}")]
    Io {
        /// The dump file.
        path: PathBuf,
        /// The error.
        error: std::io::Error,
    },
}

/// A field of the trigger packet a dump template can name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Placeholder {
    Src,
    Dst,
    SrcPort,
    DstPort,
    Proto,
}

/// Names, FlowScope's spellings included; longer names first so that `$srcPort`
/// is not read as `$src` followed by `Port`.
const PLACEHOLDERS: [(&str, Placeholder); 9] = [
    ("srcPort", Placeholder::SrcPort),
    ("dstPort", Placeholder::DstPort),
    ("sport", Placeholder::SrcPort),
    ("dport", Placeholder::DstPort),
    ("proto", Placeholder::Proto),
    ("srcIP", Placeholder::Src),
    ("dstIP", Placeholder::Dst),
    ("src", Placeholder::Src),
    ("dst", Placeholder::Dst),
];

impl Placeholder {
    fn name(self) -> &'static str {
        match self {
            Self::Src => "src",
            Self::Dst => "dst",
            Self::SrcPort => "sport",
            Self::DstPort => "dport",
            Self::Proto => "proto",
        }
    }

    fn value(self, headers: &PacketHeaders) -> Option<String> {
        match self {
            Self::Src => headers.src_addr.map(|a| a.to_string()),
            Self::Dst => headers.dst_addr.map(|a| a.to_string()),
            Self::SrcPort => headers.src_port.map(|p| p.to_string()),
            Self::DstPort => headers.dst_port.map(|p| p.to_string()),
            Self::Proto => headers.ip_proto.map(|p| p.to_string()),
        }
    }
}

#[derive(Clone, Debug)]
enum Piece {
    Text(String),
    Field(Placeholder),
}

/// A dump filter with placeholders filled from the trigger packet: `$src`,
/// `$dst` (addresses), `$sport`, `$dport` (ports), `$proto` (IP protocol number);
/// FlowScope's `$srcIP`, `$dstIP`, `$srcPort`, `$dstPort` too. Either filter
/// syntax: `host $src and port $dport` or `ip.addr == $src && tcp.port == $dport`.
#[derive(Clone, Debug)]
pub struct DumpTemplate {
    text: String,
    pieces: Vec<Piece>,
}

impl DumpTemplate {
    /// Reads a template; unknown placeholders are an error naming the column.
    pub fn new(text: &str) -> Result<Self, TriggerError> {
        let mut pieces = Vec::new();
        let mut literal = String::new();
        let mut rest = text;
        let mut column = 1;
        while let Some(dollar) = rest.find('$') {
            let (before, after) = rest.split_at(dollar);
            literal.push_str(before);
            column += before.chars().count();
            let name_len = after
                .get(1..)
                .unwrap_or_default()
                .find(|c: char| !c.is_ascii_alphanumeric() && c != '_')
                .unwrap_or(after.len().saturating_sub(1));
            let name = after.get(1..1 + name_len).unwrap_or_default();
            let Some((known, placeholder)) = PLACEHOLDERS.iter().find(|(known, _)| *known == name)
            else {
                return Err(TriggerError::UnknownPlaceholder {
                    template: text.to_owned(),
                    column,
                    name: name.to_owned(),
                });
            };
            if !literal.is_empty() {
                pieces.push(Piece::Text(std::mem::take(&mut literal)));
            }
            pieces.push(Piece::Field(*placeholder));
            column += 1 + known.len();
            rest = after.get(1 + known.len()..).unwrap_or_default();
        }
        literal.push_str(rest);
        if !literal.is_empty() {
            pieces.push(Piece::Text(literal));
        }
        let template = Self {
            text: text.to_owned(),
            pieces,
        };
        // Catch a template that cannot give a valid filter now, with sample values.
        let sample = PacketHeaders {
            src_addr: Some(std::net::Ipv4Addr::new(192, 0, 2, 1).into()),
            dst_addr: Some(std::net::Ipv4Addr::new(192, 0, 2, 2).into()),
            src_port: Some(1024),
            dst_port: Some(80),
            ip_proto: Some(6),
            ..PacketHeaders::default()
        };
        template.render(&sample)?;
        Ok(template)
    }

    /// The filter text for a trigger packet.
    pub fn render_text(&self, headers: &PacketHeaders) -> Result<String, TriggerError> {
        let mut out = String::with_capacity(self.text.len() + 32);
        for piece in &self.pieces {
            match piece {
                Piece::Text(text) => out.push_str(text),
                Piece::Field(field) => {
                    let value = field
                        .value(headers)
                        .ok_or_else(|| TriggerError::MissingField {
                            template: self.text.clone(),
                            name: field.name(),
                        })?;
                    out.push_str(&value);
                }
            }
        }
        Ok(out)
    }

    /// The filter for a trigger packet.
    pub fn render(&self, headers: &PacketHeaders) -> Result<Filter, TriggerError> {
        let text = self.render_text(headers)?;
        Filter::parse(&text).map_err(|error| TriggerError::Filter {
            template: self.text.clone(),
            error,
        })
    }
}

/// A packet that matched a trigger filter.
#[derive(Clone, Debug)]
pub struct TriggerPacket {
    /// Capture time, nanoseconds since the Unix epoch.
    pub ts_ns: i64,
    /// Length on the wire.
    pub wire_len: u32,
    /// Interface index.
    pub iface: u16,
    /// The decoded headers.
    pub headers: PacketHeaders,
    /// The captured bytes.
    pub data: Vec<u8>,
}

/// Watches the ring for packets that match a trigger filter.
#[derive(Debug)]
pub struct Analyzer {
    cursor: Cursor,
    filter: Filter,
    link_type: LinkType,
    holdoff_ns: i64,
    last_fired: Option<i64>,
    pending: VecDeque<TriggerPacket>,
    suppressed: u64,
}

impl Analyzer {
    /// An analyzer that reads what is published from now on. After a trigger, it
    /// ignores matches for `holdoff` of packet time (one dump per event, not one
    /// per packet of it).
    pub fn new(ring: &Ring, filter: Filter, link_type: LinkType, holdoff: Duration) -> Self {
        Self::with_cursor(ring.cursor_at_newest(), filter, link_type, holdoff)
    }

    /// An analyzer that starts at the oldest chunk the ring holds.
    pub fn from_oldest(
        ring: &Ring,
        filter: Filter,
        link_type: LinkType,
        holdoff: Duration,
    ) -> Self {
        Self::with_cursor(ring.cursor_at_oldest(), filter, link_type, holdoff)
    }

    fn with_cursor(cursor: Cursor, filter: Filter, link_type: LinkType, holdoff: Duration) -> Self {
        Self {
            cursor,
            filter,
            link_type,
            holdoff_ns: nanos(holdoff),
            last_fired: None,
            pending: VecDeque::new(),
            suppressed: 0,
        }
    }

    /// Ring chunks overwritten before the analyzer read them (matches it could
    /// not see).
    pub fn missed_chunks(&self) -> u64 {
        self.cursor.skipped()
    }

    /// Matches ignored because they came within the hold-off of a trigger.
    pub fn suppressed(&self) -> u64 {
        self.suppressed
    }

    /// The next trigger, waiting up to `timeout` for chunks to be published.
    /// `Ok(None)` when the time ran out; `Err(Closed)` at the end of a closed ring.
    pub fn next_trigger(&mut self, timeout: Duration) -> Result<Option<TriggerPacket>, RingError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(hit) = self.pending.pop_front() {
                return Ok(Some(hit));
            }
            let wait = deadline.saturating_duration_since(Instant::now());
            let Some(chunk) = self.cursor.next(wait)? else {
                return Ok(None);
            };
            for packet in chunk.iter() {
                let record = decoded(&packet, self.link_type);
                if !self.filter.passes(&record, packet.data) {
                    continue;
                }
                let held_off = self
                    .last_fired
                    .is_some_and(|fired| packet.ts_ns.saturating_sub(fired) < self.holdoff_ns);
                if held_off {
                    self.suppressed += 1;
                    continue;
                }
                self.last_fired = Some(packet.ts_ns);
                self.pending.push_back(TriggerPacket {
                    ts_ns: packet.ts_ns,
                    wire_len: packet.wire_len,
                    iface: packet.iface,
                    headers: record.headers,
                    data: packet.data.to_vec(),
                });
            }
        }
    }
}

/// A ring packet as the filters see it: decoded, with its capture metadata.
fn decoded(packet: &PacketRef<'_>, link_type: LinkType) -> PacketRecord {
    PacketRecord {
        ts_nanos: packet.ts_ns,
        wire_len: packet.wire_len,
        cap_len: u32::try_from(packet.data.len()).unwrap_or(u32::MAX),
        link_type,
        iface: u32::from(packet.iface),
        headers: hindsight_decode::decode(link_type, packet.data),
    }
}

/// A duration in signed nanoseconds, saturating.
fn nanos(duration: Duration) -> i64 {
    i64::try_from(duration.as_nanos()).unwrap_or(i64::MAX)
}

/// What to dump: the packets in `[at − before, at + after]` that match `filter`.
#[derive(Debug)]
pub struct DumpRequest {
    /// The trigger's time, nanoseconds since the Unix epoch.
    pub at_ns: i64,
    /// How far back from the trigger.
    pub before: Duration,
    /// How far on after the trigger.
    pub after: Duration,
    /// Which packets.
    pub filter: Filter,
    /// Link type of the ring's packets (one per ring).
    pub link_type: LinkType,
}

/// Bounds of one dump.
#[derive(Clone, Copy, Debug)]
pub struct DumpLimits {
    /// Most packet bytes a dump holds; the rest of the window is left out.
    pub max_bytes: u64,
    /// Longest wait for the ring to move on (from the start of the dump, then from
    /// each chunk read) before the dump gives up on the window's end: a capture
    /// that lags but goes on is waited for, a stuck one is not. Live capture wants
    /// `after` plus the ring's hold time.
    pub max_wait: Duration,
}

impl Default for DumpLimits {
    fn default() -> Self {
        Self {
            max_bytes: 256 << 20,
            max_wait: Duration::from_secs(60),
        }
    }
}

/// What a dump wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DumpReport {
    /// The pcap file.
    pub path: PathBuf,
    /// Packets written.
    pub packets: u64,
    /// Captured bytes written.
    pub bytes: u64,
    /// Packets of the window left out by `max_bytes`.
    pub left_out: u64,
    /// Chunks of the window the ring had overwritten before the dump could pin them.
    pub missed_chunks: u64,
    /// False when `limits.max_wait` passed without a chunk before every producer
    /// had published the window's end: the dump holds what was published by then.
    pub complete: bool,
}

/// Writes the packets of `request` that the ring holds to the pcap file `path`
/// (nanosecond timestamps, in time order). The file appears under its name only
/// when complete. Reads chunk by chunk from the first that may hold the window's
/// start, with a pin on what it has not read; stops once every producer has
/// published the window's end and every chunk that can hold it has been read
/// ([`Ring::settled_through`]: with several producers a chunk past the window
/// can come before one that ends it), at the end of a closed ring, or when
/// `limits.max_wait` passes without a chunk to read.
pub fn dump(
    ring: &Ring,
    request: &DumpRequest,
    path: &Path,
    limits: DumpLimits,
) -> Result<DumpReport, TriggerError> {
    let from = request.at_ns.saturating_sub(nanos(request.before));
    let to = request.at_ns.saturating_add(nanos(request.after));
    let mut cursor = ring.cursor_at_time(from);
    let mut pin = ring.pin(cursor.position());
    let mut deadline = Instant::now() + limits.max_wait;
    // The kept packets: (time, wire length, offset, length) into one byte arena.
    let mut kept: Vec<(i64, u32, usize, usize)> = Vec::new();
    let mut arena: Vec<u8> = Vec::new();
    let (mut bytes, mut left_out) = (0u64, 0u64);
    // The chunk number below which every packet of the window lies, once known.
    let mut end = None;
    // Waits are cut short to see a producer report itself caught up.
    let poll = ring.config().max_hold.max(Duration::from_millis(1));
    let complete = loop {
        end = end.or_else(|| ring.settled_through(to));
        if end.is_some_and(|end| cursor.position() >= end) {
            break true;
        }
        let wait = deadline.saturating_duration_since(Instant::now()).min(poll);
        let chunk = match cursor.next(wait) {
            Ok(Some(chunk)) => chunk,
            Ok(None) if Instant::now() >= deadline => break false,
            Ok(None) => continue,
            Err(_) => break true,
        };
        deadline = Instant::now() + limits.max_wait;
        let (first, last) = chunk.time_range();
        if first > to || last < from {
            drop(chunk);
            pin.move_to(cursor.position());
            continue;
        }
        for packet in chunk.iter() {
            if packet.ts_ns < from || packet.ts_ns > to {
                continue;
            }
            if !request
                .filter
                .passes(&decoded(&packet, request.link_type), packet.data)
            {
                continue;
            }
            if bytes + packet.data.len() as u64 > limits.max_bytes {
                left_out += 1;
                continue;
            }
            bytes += packet.data.len() as u64;
            kept.push((
                packet.ts_ns,
                packet.wire_len,
                arena.len(),
                packet.data.len(),
            ));
            arena.extend_from_slice(packet.data);
        }
        drop(chunk);
        pin.move_to(cursor.position());
    };
    drop(pin);
    // Several producers interleave in time; a dump is read in time order.
    kept.sort_by_key(|&(ts, ..)| ts);
    let packets: Vec<(i64, u32, &[u8])> = kept
        .iter()
        .map(|&(ts, wire_len, at, len)| (ts, wire_len, arena.get(at..at + len).unwrap_or(&[])))
        .collect();
    write_pcap(path, request.link_type, &packets).map_err(|error| TriggerError::Io {
        path: path.to_owned(),
        error,
    })?;
    Ok(DumpReport {
        path: path.to_owned(),
        packets: packets.len() as u64,
        bytes,
        left_out,
        missed_chunks: cursor.skipped(),
        complete,
    })
}

/// Writes `packets` (time, wire length, captured bytes), in the order given, as a
/// pcap file with nanosecond timestamps: to `PATH.part`, whose blocks are reserved
/// first (a full disk fails the dump before a byte is copied, and the file does
/// not fragment as it grows), in 1 MiB writes, synced, then renamed to `path`, so
/// the file appears whole or not at all. (FlowScope copies into a mapping of the
/// reserved file instead; here that was slower: see docs/PERFORMANCE.md.)
pub fn write_pcap(
    path: &Path,
    link_type: LinkType,
    packets: &[(i64, u32, &[u8])],
) -> io::Result<()> {
    const FILE_HEADER: usize = 24;
    const RECORD_HEADER: usize = 16;
    let len = FILE_HEADER
        + packets
            .iter()
            .map(|(_, _, data)| RECORD_HEADER + data.len())
            .sum::<usize>();
    let snaplen = packets
        .iter()
        .map(|(_, _, data)| data.len())
        .max()
        .unwrap_or(0)
        .max(65_535);
    let mut temp = path.as_os_str().to_owned();
    temp.push(".part");
    let temp = PathBuf::from(temp);
    let file = File::create(&temp)?;
    reserve(&file, len)?;
    let mut writer = PcapWriter::new(
        BufWriter::with_capacity(1 << 20, file),
        link_type,
        u32::try_from(snaplen).unwrap_or(u32::MAX),
        TimestampPrecision::Nanos,
    )?;
    for &(ts, wire_len, data) in packets {
        writer.write_frame(ts, wire_len, data)?;
    }
    let mut out = writer.into_inner()?;
    out.flush()?;
    let file = out.into_inner().map_err(io::IntoInnerError::into_error)?;
    file.sync_all()?;
    std::fs::rename(&temp, path)
}

/// Reserves `len` bytes of blocks for `file` (`posix_fallocate`); a file system
/// that cannot is left to allocate as the file grows.
fn reserve(file: &File, len: usize) -> io::Result<()> {
    let Ok(len) = libc::off_t::try_from(len) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "dump too large",
        ));
    };
    if len == 0 {
        return Ok(());
    }
    // SAFETY: a descriptor the caller's `File` keeps open, and a valid range.
    match unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len) } {
        0 | libc::EOPNOTSUPP | libc::EINVAL => Ok(()),
        error => Err(io::Error::from_raw_os_error(error)),
    }
}
