//! The pcap writer: classic pcap with microsecond or nanosecond timestamps, as
//! Wireshark, tcpdump and every pcap tool read it.

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
