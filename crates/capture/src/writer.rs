//! The capture writers: classic pcap with microsecond or nanosecond timestamps, as
//! Wireshark, tcpdump and every pcap tool read it, and pcapng for packets of several
//! link types in one file.

use std::io::{self, Write};

use hindsight_model::LinkType;

/// pcap magic numbers by resolution (written little-endian).
const MAGIC_MICROS: u32 = 0xa1b2_c3d4;
const MAGIC_NANOS: u32 = 0xa1b2_3c4d;
/// pcap format version 2.4.
const VERSION_MAJOR: u16 = 2;
const VERSION_MINOR: u16 = 4;

/// Timestamp resolution of a written pcap file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimestampPrecision {
    /// Microseconds (magic a1b2c3d4): what tcpdump writes.
    Micros,
    /// Nanoseconds (magic a1b23c4d): keeps hindsight's timestamps exactly.
    Nanos,
}

/// Writes frames to a classic pcap stream.
#[derive(Debug)]
pub struct PcapWriter<W: Write> {
    out: W,
    precision: TimestampPrecision,
}

impl<W: Write> PcapWriter<W> {
    /// Writes the pcap file header and returns the writer.
    pub fn new(
        mut out: W,
        link_type: LinkType,
        snaplen: u32,
        precision: TimestampPrecision,
    ) -> io::Result<Self> {
        let magic = match precision {
            TimestampPrecision::Micros => MAGIC_MICROS,
            TimestampPrecision::Nanos => MAGIC_NANOS,
        };
        let mut header = [0u8; 24];
        header[0..4].copy_from_slice(&magic.to_le_bytes());
        header[4..6].copy_from_slice(&VERSION_MAJOR.to_le_bytes());
        header[6..8].copy_from_slice(&VERSION_MINOR.to_le_bytes());
        // thiszone and sigfigs are zero, as every modern writer sets them.
        header[16..20].copy_from_slice(&snaplen.to_le_bytes());
        header[20..24].copy_from_slice(&u32::from(link_type.0).to_le_bytes());
        out.write_all(&header)?;
        Ok(Self { out, precision })
    }

    /// Writes one frame. Timestamps before 1970 or after 2106 do not fit pcap and are clamped.
    pub fn write_frame(&mut self, ts_nanos: i64, wire_len: u32, data: &[u8]) -> io::Result<()> {
        let ts = ts_nanos.max(0);
        let seconds = u32::try_from(ts / 1_000_000_000).unwrap_or(u32::MAX);
        let nanos = (ts % 1_000_000_000) as u32;
        let fraction = match self.precision {
            TimestampPrecision::Micros => nanos / 1000,
            TimestampPrecision::Nanos => nanos,
        };
        let captured = u32::try_from(data.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "frame larger than 4 GiB"))?;
        let mut header = [0u8; 16];
        header[0..4].copy_from_slice(&seconds.to_le_bytes());
        header[4..8].copy_from_slice(&fraction.to_le_bytes());
        header[8..12].copy_from_slice(&captured.to_le_bytes());
        header[12..16].copy_from_slice(&wire_len.max(captured).to_le_bytes());
        self.out.write_all(&header)?;
        self.out.write_all(data)
    }

    /// Flushes buffered output.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// Flushes and returns the underlying writer.
    pub fn into_inner(mut self) -> io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

/// pcapng block types and constants (draft-ietf-opsawg-pcapng).
const PCAPNG_SHB: u32 = 0x0a0d_0d0a;
const PCAPNG_IDB: u32 = 0x0000_0001;
const PCAPNG_EPB: u32 = 0x0000_0006;
const PCAPNG_BYTE_ORDER_MAGIC: u32 = 0x1a2b_3c4d;
/// Interface option `if_tsresol`.
const OPT_IF_TSRESOL: u16 = 9;
/// pcapng option if_name: the interface's name (here, a cluster node's).
const OPT_IF_NAME: u16 = 2;
/// `if_tsresol` value 9: timestamps count nanoseconds.
const TSRESOL_NANOS: u8 = 9;

/// Writes frames to a pcapng stream, one interface per link type, with nanosecond
/// timestamps: what to export when results mix link types, which classic pcap cannot.
#[derive(Debug)]
pub struct PcapngWriter<W: Write> {
    out: W,
    snaplen: u32,
    /// Link types (and names) of the interfaces described so far; the index
    /// is the interface id.
    interfaces: Vec<(LinkType, Option<String>)>,
}

impl<W: Write> PcapngWriter<W> {
    /// Writes the section header block and returns the writer.
    pub fn new(mut out: W, snaplen: u32) -> io::Result<Self> {
        let mut block = Vec::with_capacity(28);
        block.extend_from_slice(&PCAPNG_SHB.to_le_bytes());
        block.extend_from_slice(&28u32.to_le_bytes());
        block.extend_from_slice(&PCAPNG_BYTE_ORDER_MAGIC.to_le_bytes());
        block.extend_from_slice(&1u16.to_le_bytes());
        block.extend_from_slice(&0u16.to_le_bytes());
        // Section length unknown (-1): the file is written as a stream.
        block.extend_from_slice(&(-1i64).to_le_bytes());
        block.extend_from_slice(&28u32.to_le_bytes());
        out.write_all(&block)?;
        Ok(Self {
            out,
            snaplen,
            interfaces: Vec::new(),
        })
    }

    /// Returns the interface id of `link_type` named `name`, describing a new
    /// interface if needed.
    fn interface(&mut self, link_type: LinkType, name: Option<&str>) -> io::Result<u32> {
        if let Some(id) = self
            .interfaces
            .iter()
            .position(|(l, n)| *l == link_type && n.as_deref() == name)
        {
            return Ok(id as u32);
        }
        let mut options = Vec::new();
        if let Some(name) = name {
            // if_name (2), padded to 32 bits.
            let bytes = name.as_bytes().get(..1024).unwrap_or(name.as_bytes());
            options.extend_from_slice(&OPT_IF_NAME.to_le_bytes());
            options.extend_from_slice(&(bytes.len() as u16).to_le_bytes());
            options.extend_from_slice(bytes);
            options.resize(options.len() + (4 - bytes.len() % 4) % 4, 0);
        }
        options.extend_from_slice(&OPT_IF_TSRESOL.to_le_bytes());
        options.extend_from_slice(&1u16.to_le_bytes());
        options.extend_from_slice(&[TSRESOL_NANOS, 0, 0, 0]);
        options.extend_from_slice(&[0, 0, 0, 0]); // opt_endofopt
        let total = (20 + options.len()) as u32;
        let mut block = Vec::with_capacity(total as usize);
        block.extend_from_slice(&PCAPNG_IDB.to_le_bytes());
        block.extend_from_slice(&total.to_le_bytes());
        block.extend_from_slice(&link_type.0.to_le_bytes());
        block.extend_from_slice(&0u16.to_le_bytes());
        block.extend_from_slice(&self.snaplen.to_le_bytes());
        block.extend_from_slice(&options);
        block.extend_from_slice(&total.to_le_bytes());
        self.out.write_all(&block)?;
        self.interfaces.push((link_type, name.map(str::to_owned)));
        Ok((self.interfaces.len() - 1) as u32)
    }

    /// Writes one frame of `link_type`. Timestamps before 1970 are clamped to 1970.
    pub fn write_frame(
        &mut self,
        link_type: LinkType,
        ts_nanos: i64,
        wire_len: u32,
        data: &[u8],
    ) -> io::Result<()> {
        self.write_frame_named(link_type, None, ts_nanos, wire_len, data)
    }

    /// Writes one frame of `link_type` on the interface named `name` (with
    /// `None`, the unnamed interface of the link type).
    pub fn write_frame_named(
        &mut self,
        link_type: LinkType,
        name: Option<&str>,
        ts_nanos: i64,
        wire_len: u32,
        data: &[u8],
    ) -> io::Result<()> {
        let interface = self.interface(link_type, name)?;
        let captured = u32::try_from(data.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "frame larger than 4 GiB"))?;
        let padding = (4 - data.len() % 4) % 4;
        let total = u32::try_from(32 + data.len() + padding)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "frame larger than 4 GiB"))?;
        let ts = ts_nanos.max(0) as u64;
        let mut header = [0u8; 28];
        header[0..4].copy_from_slice(&PCAPNG_EPB.to_le_bytes());
        header[4..8].copy_from_slice(&total.to_le_bytes());
        header[8..12].copy_from_slice(&interface.to_le_bytes());
        header[12..16].copy_from_slice(&((ts >> 32) as u32).to_le_bytes());
        header[16..20].copy_from_slice(&(ts as u32).to_le_bytes());
        header[20..24].copy_from_slice(&captured.to_le_bytes());
        header[24..28].copy_from_slice(&wire_len.max(captured).to_le_bytes());
        self.out.write_all(&header)?;
        self.out.write_all(data)?;
        self.out
            .write_all([0u8; 3].get(..padding).unwrap_or_default())?;
        self.out.write_all(&total.to_le_bytes())
    }

    /// Flushes buffered output.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}
