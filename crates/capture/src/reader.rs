//! The capture file reader: pcap (µs and ns, both byte orders) and pcapng (multiple
//! sections and interfaces, EPB/SPB/OPB), optionally gzip-compressed, detected by
//! their magic numbers.
//!
//! Frames are handed out as slices of one large buffer (no allocation or syscall per
//! frame); the buffer is refilled by moving the unread tail to its front.

use std::fs::File;
use std::io::{ErrorKind, Read};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use flate2::read::MultiGzDecoder;
use hindsight_model::{Frame, LinkType};

use crate::error::CaptureError;

/// Size of the read buffer; also the largest block or record accepted.
const BUFFER_BYTES: usize = 16 << 20;
/// Bytes read from the source per refill, at most.
const READ_CHUNK_BYTES: usize = 1 << 20;
/// The largest pcap record accepted when the header's snaplen is smaller: libpcap's
/// MAXIMUM_SNAPLEN (262144).
const MAX_PCAP_RECORD_BYTES: u32 = 262_144;
/// The largest pcapng block accepted (16 MiB, as Wireshark's reader).
const MAX_PCAPNG_BLOCK_BYTES: u32 = 16 << 20;

/// pcap magic, microsecond timestamps (draft-ietf-opsawg-pcap §4).
const PCAP_MAGIC_MICROS: u32 = 0xa1b2_c3d4;
/// pcap magic, nanosecond timestamps.
const PCAP_MAGIC_NANOS: u32 = 0xa1b2_3c4d;
/// pcap file header length.
const PCAP_HEADER_BYTES: usize = 24;
/// pcap record header length: ts_sec, ts_frac, incl_len, orig_len.
const PCAP_RECORD_HEADER_BYTES: usize = 16;
/// pcapng Section Header Block type (draft-ietf-opsawg-pcapng §4.1); also the file magic.
const PCAPNG_SHB: u32 = 0x0a0d_0d0a;
/// pcapng byte-order magic inside the SHB.
const PCAPNG_BYTE_ORDER_MAGIC: u32 = 0x1a2b_3c4d;
/// pcapng Interface Description Block (§4.2).
const PCAPNG_IDB: u32 = 0x0000_0001;
/// pcapng obsolete Packet Block (Appendix A).
const PCAPNG_OPB: u32 = 0x0000_0002;
/// pcapng Simple Packet Block (§4.4).
const PCAPNG_SPB: u32 = 0x0000_0003;
/// pcapng Enhanced Packet Block (§4.3).
const PCAPNG_EPB: u32 = 0x0000_0006;
/// IDB option `if_tsresol`: timestamp resolution.
const OPT_IF_TSRESOL: u16 = 9;
/// IDB option `if_tsoffset`: seconds added to every timestamp.
const OPT_IF_TSOFFSET: u16 = 14;
/// gzip member magic (RFC 1952 §2.3.1).
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

const NANOS_PER_SECOND: i128 = 1_000_000_000;

/// The container format of a capture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaptureFormat {
    /// Classic pcap; `nanos` for the nanosecond-resolution magic.
    Pcap {
        /// True for nanosecond timestamps.
        nanos: bool,
    },
    /// pcapng.
    PcapNg,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Endian {
    Little,
    Big,
}

impl Endian {
    #[inline]
    fn u16(self, bytes: &[u8], at: usize) -> u16 {
        let b: [u8; 2] = bytes
            .get(at..at + 2)
            .and_then(|s| s.try_into().ok())
            .unwrap_or_default();
        match self {
            Self::Little => u16::from_le_bytes(b),
            Self::Big => u16::from_be_bytes(b),
        }
    }

    #[inline]
    fn u32(self, bytes: &[u8], at: usize) -> u32 {
        let b: [u8; 4] = bytes
            .get(at..at + 4)
            .and_then(|s| s.try_into().ok())
            .unwrap_or_default();
        match self {
            Self::Little => u32::from_le_bytes(b),
            Self::Big => u32::from_be_bytes(b),
        }
    }

    #[inline]
    fn u64(self, bytes: &[u8], at: usize) -> u64 {
        let b: [u8; 8] = bytes
            .get(at..at + 8)
            .and_then(|s| s.try_into().ok())
            .unwrap_or_default();
        match self {
            Self::Little => u64::from_le_bytes(b),
            Self::Big => u64::from_be_bytes(b),
        }
    }
}

/// Timestamp resolution of a pcapng interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TsResolution {
    /// Units of 10^-n seconds.
    Decimal(u8),
    /// Units of 2^-n seconds.
    Binary(u8),
}

impl TsResolution {
    fn to_nanos(self, units: u64, offset_secs: i64) -> i64 {
        let units = i128::from(units);
        let nanos = match self {
            Self::Decimal(exp) if exp <= 9 => units * 10i128.pow(9 - u32::from(exp)),
            Self::Decimal(exp) => units / 10i128.pow(u32::from(exp.min(38)) - 9),
            Self::Binary(exp) => (units * NANOS_PER_SECOND) >> exp.min(127),
        };
        let total = nanos + i128::from(offset_secs) * NANOS_PER_SECOND;
        i64::try_from(total).unwrap_or(if total < 0 { i64::MIN } else { i64::MAX })
    }
}

#[derive(Clone, Copy, Debug)]
struct Interface {
    link_type: LinkType,
    snaplen: u32,
    resolution: TsResolution,
    offset_secs: i64,
    /// Interface number unique within the file (across sections).
    global_id: u32,
}

#[derive(Debug)]
enum State {
    Pcap {
        endian: Endian,
        nanos: bool,
        link_type: LinkType,
        max_record: u32,
    },
    PcapNg {
        endian: Endian,
        interfaces: Vec<Interface>,
        /// Interfaces of earlier sections, so interface numbers stay unique.
        interfaces_before: u32,
        last_ts_nanos: i64,
    },
    /// An error was returned; every later call returns `None`.
    Failed,
}

/// Counts bytes read from the underlying file, for progress reporting.
#[derive(Debug)]
struct CountingReader<R> {
    inner: R,
    count: Arc<AtomicU64>,
}

impl<R: Read> Read for CountingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// Reads frames from a capture file or stream; see the module documentation.
pub struct CaptureReader<R> {
    name: String,
    source: R,
    buffer: Vec<u8>,
    /// Start of the unread bytes in `buffer`.
    start: usize,
    /// End of the valid bytes in `buffer`.
    end: usize,
    /// Stream offset of `buffer[start]`.
    offset: u64,
    eof: bool,
    format: CaptureFormat,
    gzip: bool,
    state: State,
    frames: u64,
    source_bytes: Option<Arc<AtomicU64>>,
    link_types: Vec<LinkType>,
}

impl<R> std::fmt::Debug for CaptureReader<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaptureReader")
            .field("name", &self.name)
            .field("format", &self.format)
            .field("offset", &self.offset)
            .field("frames", &self.frames)
            .finish_non_exhaustive()
    }
}

impl CaptureReader<Box<dyn Read + Send>> {
    /// Opens a capture file: pcap or pcapng, plain or gzip-compressed.
    pub fn open(path: &Path) -> Result<Self, CaptureError> {
        let name = path.display().to_string();
        let file = File::open(path).map_err(|error| CaptureError::Io {
            file: name.clone(),
            offset: 0,
            error,
        })?;
        Self::open_stream(name, file)
    }

    /// Reads a capture from standard input (`tcpdump -w - | hindsight ingest -`),
    /// named `<stdin>` in errors.
    pub fn stdin() -> Result<Self, CaptureError> {
        Self::open_stream("<stdin>".to_owned(), std::io::stdin())
    }

    /// Reads a capture from a stream read once from its start (a file, a pipe):
    /// pcap or pcapng, plain or gzip-compressed.
    pub fn open_stream(
        name: String,
        mut stream: impl Read + Send + 'static,
    ) -> Result<Self, CaptureError> {
        let io_error = |error| CaptureError::Io {
            file: name.clone(),
            offset: 0,
            error,
        };
        let mut magic = [0u8; 2];
        let got = read_up_to(&mut stream, &mut magic).map_err(io_error)?;
        let count = Arc::new(AtomicU64::new(got as u64));
        let counting = CountingReader {
            inner: stream,
            count: Arc::clone(&count),
        };
        let head = std::io::Cursor::new(magic.get(..got).unwrap_or_default().to_vec());
        let chained = head.chain(counting);
        let gzip = got == 2 && magic == GZIP_MAGIC;
        let source: Box<dyn Read + Send> = if gzip {
            Box::new(MultiGzDecoder::new(chained))
        } else {
            Box::new(chained)
        };
        let mut reader = Self::from_reader(name, source)?;
        reader.gzip = gzip;
        reader.source_bytes = Some(count);
        Ok(reader)
    }
}

fn read_up_to(reader: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match reader.read(buf.get_mut(filled..).unwrap_or_default()) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

impl<R: Read> CaptureReader<R> {
    /// Reads the file header of a capture stream; `name` appears in errors.
    pub fn from_reader(name: impl Into<String>, source: R) -> Result<Self, CaptureError> {
        let mut reader = Self {
            name: name.into(),
            source,
            buffer: Vec::new(),
            start: 0,
            end: 0,
            offset: 0,
            eof: false,
            format: CaptureFormat::PcapNg,
            gzip: false,
            state: State::Failed,
            frames: 0,
            source_bytes: None,
            link_types: Vec::new(),
        };
        reader.fill(4)?;
        let head = reader.available();
        if head.len() < 4 {
            return Err(reader.unknown_format());
        }
        let le = Endian::Little.u32(head, 0);
        let be = Endian::Big.u32(head, 0);
        if le == PCAPNG_SHB {
            reader.format = CaptureFormat::PcapNg;
            reader.state = State::PcapNg {
                endian: Endian::Little,
                interfaces: Vec::new(),
                interfaces_before: 0,
                last_ts_nanos: 0,
            };
            return Ok(reader);
        }
        let (endian, nanos) = match (le, be) {
            (PCAP_MAGIC_MICROS, _) => (Endian::Little, false),
            (PCAP_MAGIC_NANOS, _) => (Endian::Little, true),
            (_, PCAP_MAGIC_MICROS) => (Endian::Big, false),
            (_, PCAP_MAGIC_NANOS) => (Endian::Big, true),
            _ => return Err(reader.unknown_format()),
        };
        reader.fill(PCAP_HEADER_BYTES)?;
        let header = reader.available();
        if header.len() < PCAP_HEADER_BYTES {
            return Err(reader.truncated(format!(
                "pcap file header needs {PCAP_HEADER_BYTES} bytes, found {}",
                header.len()
            )));
        }
        let snaplen = endian.u32(header, 16);
        // The upper bits of the link-type field carry FCS information; the type is the low 16.
        let link_type = LinkType((endian.u32(header, 20) & 0xffff) as u16);
        reader.consume(PCAP_HEADER_BYTES);
        reader.format = CaptureFormat::Pcap { nanos };
        reader.link_types.push(link_type);
        reader.state = State::Pcap {
            endian,
            nanos,
            link_type,
            max_record: snaplen.clamp(MAX_PCAP_RECORD_BYTES, MAX_PCAPNG_BLOCK_BYTES),
        };
        Ok(reader)
    }

    /// Returns the container format.
    pub fn format(&self) -> CaptureFormat {
        self.format
    }

    /// Returns true if the file is gzip-compressed.
    pub fn is_gzip(&self) -> bool {
        self.gzip
    }

    /// Returns the offset of the next unread byte, in the uncompressed stream.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Returns the number of frames returned so far.
    pub fn frames_read(&self) -> u64 {
        self.frames
    }

    /// Returns the bytes consumed from the file itself (compressed bytes for gzip);
    /// for readers made with [`from_reader`](Self::from_reader), the stream offset.
    pub fn source_bytes_read(&self) -> u64 {
        self.source_bytes
            .as_ref()
            .map_or(self.offset, |count| count.load(Ordering::Relaxed))
    }

    /// Returns the link types of the interfaces seen so far.
    pub fn link_types(&self) -> &[LinkType] {
        &self.link_types
    }

    /// Returns the next frame, `None` at the clean end of the capture, or the error
    /// that stops reading (after which every call returns `None`).
    pub fn next_frame(&mut self) -> Option<Result<Frame<'_>, CaptureError>> {
        let located = match self.state {
            State::Pcap { .. } => self.next_pcap(),
            State::PcapNg { .. } => self.next_pcapng(),
            State::Failed => return None,
        };
        match located {
            Ok(Some(found)) => {
                self.frames += 1;
                let data = self
                    .buffer
                    .get(found.data_start..found.data_end)
                    .unwrap_or_default();
                Some(Ok(Frame {
                    ts_nanos: found.ts_nanos,
                    wire_len: found.wire_len,
                    data,
                    link_type: found.link_type,
                    iface: found.iface,
                }))
            }
            Ok(None) => {
                self.state = State::Failed;
                None
            }
            Err(error) => {
                self.state = State::Failed;
                Some(Err(error))
            }
        }
    }

    fn next_pcap(&mut self) -> Result<Option<Located>, CaptureError> {
        let State::Pcap {
            endian,
            nanos,
            link_type,
            max_record,
        } = self.state
        else {
            return Ok(None);
        };
        self.fill(PCAP_RECORD_HEADER_BYTES)?;
        let header = self.available();
        if header.is_empty() {
            return Ok(None);
        }
        if header.len() < PCAP_RECORD_HEADER_BYTES {
            return Err(self.truncated(format!(
                "file ends inside packet record {} header: {} of {PCAP_RECORD_HEADER_BYTES} bytes present",
                self.frames + 1,
                header.len()
            )));
        }
        let seconds = endian.u32(header, 0);
        let fraction = endian.u32(header, 4);
        let incl_len = endian.u32(header, 8);
        let orig_len = endian.u32(header, 12);
        if incl_len > max_record {
            return Err(self.corrupt(format!(
                "packet record {} claims {incl_len} captured bytes, more than the {max_record} any pcap writer produces",
                self.frames + 1
            )));
        }
        let total = PCAP_RECORD_HEADER_BYTES + incl_len as usize;
        self.fill(total)?;
        if self.available().len() < total {
            return Err(self.truncated(format!(
                "file ends inside packet record {}: expected {incl_len} bytes of packet data, found {}",
                self.frames + 1,
                self.available().len() - PCAP_RECORD_HEADER_BYTES
            )));
        }
        let fraction_nanos = if nanos {
            i64::from(fraction)
        } else {
            i64::from(fraction) * 1000
        };
        let data_start = self.start + PCAP_RECORD_HEADER_BYTES;
        let found = Located {
            ts_nanos: i64::from(seconds) * 1_000_000_000 + fraction_nanos,
            wire_len: orig_len,
            data_start,
            data_end: data_start + incl_len as usize,
            link_type,
            iface: 0,
        };
        self.consume(total);
        Ok(Some(found))
    }

    fn next_pcapng(&mut self) -> Result<Option<Located>, CaptureError> {
        loop {
            self.fill(12)?;
            let head = self.available();
            if head.is_empty() {
                return Ok(None);
            }
            if head.len() < 12 {
                return Err(self.truncated(format!(
                    "file ends inside a block header: {} of 12 bytes present",
                    head.len()
                )));
            }
            let mut endian = match &self.state {
                State::PcapNg { endian, .. } => *endian,
                _ => return Ok(None),
            };
            let block_type = endian.u32(head, 0);
            if block_type == PCAPNG_SHB {
                endian = match (Endian::Little.u32(head, 8), Endian::Big.u32(head, 8)) {
                    (PCAPNG_BYTE_ORDER_MAGIC, _) => Endian::Little,
                    (_, PCAPNG_BYTE_ORDER_MAGIC) => Endian::Big,
                    _ => {
                        return Err(self.corrupt(
                            "section header block without the byte-order magic 0x1a2b3c4d"
                                .to_owned(),
                        ));
                    }
                };
            }
            let total = endian.u32(head, 4);
            if total < 12 || total % 4 != 0 || total > MAX_PCAPNG_BLOCK_BYTES {
                return Err(self.corrupt(format!(
                    "block of type 0x{block_type:08x} has length {total}: must be a multiple of 4 between 12 and {MAX_PCAPNG_BLOCK_BYTES}"
                )));
            }
            let total = total as usize;
            self.fill(total)?;
            let block = self.available();
            if block.len() < total {
                return Err(self.truncated(format!(
                    "file ends inside a block of type 0x{block_type:08x}: expected {total} bytes, found {}",
                    block.len()
                )));
            }
            let trailer = endian.u32(block, total - 4) as usize;
            if trailer != total {
                return Err(self.corrupt(format!(
                    "block of type 0x{block_type:08x} has length {total} at its start but {trailer} at its end"
                )));
            }
            let body = block.get(8..total - 4).unwrap_or_default();
            let found = match block_type {
                PCAPNG_SHB => {
                    self.start_section(endian);
                    None
                }
                PCAPNG_IDB => {
                    let interface = self.parse_idb(endian, body)?;
                    if let State::PcapNg { interfaces, .. } = &mut self.state {
                        interfaces.push(interface);
                    }
                    self.link_types.push(interface.link_type);
                    None
                }
                PCAPNG_EPB | PCAPNG_OPB => Some(self.parse_packet_block(endian, block_type, body)?),
                PCAPNG_SPB => Some(self.parse_simple_block(endian, body)?),
                _ => None,
            };
            let block_start = self.start;
            self.consume(total);
            if let (Some(found), true) = (found, block_type != PCAPNG_SPB)
                && let State::PcapNg { last_ts_nanos, .. } = &mut self.state
            {
                *last_ts_nanos = found.ts_nanos;
            }
            if let Some(mut found) = found {
                // Packet positions were computed relative to the block start.
                found.data_start += block_start + 8;
                found.data_end += block_start + 8;
                return Ok(Some(found));
            }
        }
    }

    fn start_section(&mut self, endian: Endian) {
        if let State::PcapNg {
            endian: current,
            interfaces,
            interfaces_before,
            ..
        } = &mut self.state
        {
            *current = endian;
            *interfaces_before += u32::try_from(interfaces.len()).unwrap_or(u32::MAX);
            interfaces.clear();
        }
    }

    fn parse_idb(&self, endian: Endian, body: &[u8]) -> Result<Interface, CaptureError> {
        if body.len() < 8 {
            return Err(self.corrupt("interface description block shorter than 8 bytes".to_owned()));
        }
        let link_type = LinkType(endian.u16(body, 0));
        let snaplen = endian.u32(body, 4);
        let mut resolution = TsResolution::Decimal(6);
        let mut offset_secs = 0i64;
        let mut at = 8usize;
        while at + 4 <= body.len() {
            let code = endian.u16(body, at);
            let len = usize::from(endian.u16(body, at + 2));
            let value = body.get(at + 4..at + 4 + len).unwrap_or_default();
            match code {
                0 => break,
                OPT_IF_TSRESOL if len >= 1 => {
                    let raw = value.first().copied().unwrap_or(6);
                    resolution = if raw & 0x80 == 0 {
                        TsResolution::Decimal(raw)
                    } else {
                        TsResolution::Binary(raw & 0x7f)
                    };
                }
                OPT_IF_TSOFFSET if len >= 8 => {
                    offset_secs = endian.u64(value, 0) as i64;
                }
                _ => {}
            }
            at += 4 + len.div_ceil(4) * 4;
        }
        let State::PcapNg {
            interfaces,
            interfaces_before,
            ..
        } = &self.state
        else {
            return Err(self.corrupt("interface block outside a section".to_owned()));
        };
        let local = u32::try_from(interfaces.len()).unwrap_or(u32::MAX);
        Ok(Interface {
            link_type,
            snaplen,
            resolution,
            offset_secs,
            global_id: interfaces_before.saturating_add(local),
        })
    }

    fn interface(&self, id: u32) -> Result<Interface, CaptureError> {
        match &self.state {
            State::PcapNg { interfaces, .. } => {
                interfaces.get(id as usize).copied().ok_or_else(|| {
                    self.corrupt(format!(
                    "packet refers to interface {id}, but the section describes {} interface(s)",
                    interfaces.len()
                ))
                })
            }
            _ => Err(self.corrupt("packet block outside a section".to_owned())),
        }
    }

    /// Parses an EPB or OPB body; positions are relative to the body start.
    fn parse_packet_block(
        &self,
        endian: Endian,
        block_type: u32,
        body: &[u8],
    ) -> Result<Located, CaptureError> {
        if body.len() < 20 {
            return Err(self.corrupt(format!(
                "packet block of {} bytes is shorter than its 20-byte header",
                body.len()
            )));
        }
        let iface_id = if block_type == PCAPNG_EPB {
            endian.u32(body, 0)
        } else {
            u32::from(endian.u16(body, 0))
        };
        let units = (u64::from(endian.u32(body, 4)) << 32) | u64::from(endian.u32(body, 8));
        let captured = endian.u32(body, 12) as usize;
        let wire_len = endian.u32(body, 16);
        if 20 + captured > body.len() {
            return Err(self.corrupt(format!(
                "packet block claims {captured} captured bytes but holds only {}",
                body.len() - 20
            )));
        }
        let interface = self.interface(iface_id)?;
        let ts_nanos = interface.resolution.to_nanos(units, interface.offset_secs);
        Ok(Located {
            ts_nanos,
            wire_len,
            data_start: 20,
            data_end: 20 + captured,
            link_type: interface.link_type,
            iface: interface.global_id,
        })
    }

    /// Parses an SPB body (no timestamp: the last one seen is used).
    fn parse_simple_block(&self, endian: Endian, body: &[u8]) -> Result<Located, CaptureError> {
        if body.len() < 4 {
            return Err(self.corrupt("simple packet block shorter than 4 bytes".to_owned()));
        }
        let interface = self.interface(0)?;
        let wire_len = endian.u32(body, 0);
        let mut captured = (body.len() - 4).min(wire_len as usize);
        if interface.snaplen > 0 {
            captured = captured.min(interface.snaplen as usize);
        }
        let ts_nanos = match &self.state {
            State::PcapNg { last_ts_nanos, .. } => *last_ts_nanos,
            _ => 0,
        };
        Ok(Located {
            ts_nanos,
            wire_len,
            data_start: 4,
            data_end: 4 + captured,
            link_type: interface.link_type,
            iface: interface.global_id,
        })
    }

    fn available(&self) -> &[u8] {
        self.buffer.get(self.start..self.end).unwrap_or_default()
    }

    fn consume(&mut self, bytes: usize) {
        self.start = (self.start + bytes).min(self.end);
        self.offset += bytes as u64;
    }

    /// Makes at least `need` unread bytes available unless the stream ends first.
    fn fill(&mut self, need: usize) -> Result<(), CaptureError> {
        if self.end - self.start >= need || self.eof {
            return Ok(());
        }
        if self.buffer.len() < BUFFER_BYTES.min(need.max(READ_CHUNK_BYTES) * 2) {
            self.buffer.resize(
                BUFFER_BYTES
                    .min(need.max(READ_CHUNK_BYTES) * 2)
                    .max(self.buffer.len()),
                0,
            );
        }
        if self.start + need > self.buffer.len() {
            self.buffer.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        while self.end - self.start < need {
            let room = self.buffer.len() - self.end;
            if room == 0 {
                break;
            }
            let want = room.min(READ_CHUNK_BYTES.max(need));
            let target = self
                .buffer
                .get_mut(self.end..self.end + want)
                .unwrap_or_default();
            match self.source.read(target) {
                Ok(0) => {
                    self.eof = true;
                    break;
                }
                Ok(n) => self.end += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(error) => {
                    return Err(CaptureError::Io {
                        file: self.name.clone(),
                        offset: self.offset + (self.end - self.start) as u64,
                        error,
                    });
                }
            }
        }
        Ok(())
    }

    fn unknown_format(&self) -> CaptureError {
        let magic: Vec<String> = self
            .available()
            .iter()
            .take(4)
            .map(|b| format!("{b:02x}"))
            .collect();
        CaptureError::UnknownFormat {
            file: self.name.clone(),
            magic: if magic.is_empty() {
                "nothing (the file is empty)".to_owned()
            } else {
                magic.join(" ")
            },
        }
    }

    fn truncated(&self, what: String) -> CaptureError {
        CaptureError::Truncated {
            file: self.name.clone(),
            offset: self.offset,
            what,
        }
    }

    fn corrupt(&self, reason: String) -> CaptureError {
        CaptureError::Corrupt {
            file: self.name.clone(),
            offset: self.offset,
            reason,
        }
    }
}

/// Where the next frame lies in the buffer, and its metadata.
#[derive(Clone, Copy, Debug)]
struct Located {
    ts_nanos: i64,
    wire_len: u32,
    data_start: usize,
    data_end: usize,
    link_type: LinkType,
    iface: u32,
}
