//! One capture socket on an interface: libpcap (on Linux, a TPACKET_V3
//! memory-mapped ring), opened non-blocking with nanosecond timestamps. A
//! build without the `capture` feature links no libpcap, and opening an
//! interface says so.

/// A packet as the socket gives it: time (ns), length on the wire, bytes kept.
pub(crate) type Packet<'a> = (i64, u32, &'a [u8]);

/// How long a capture waits for its socket before it looks at its stop flag.
pub(crate) const POLL_MS: i32 = 50;

/// libpcap's counters of a socket: received, dropped by the kernel, dropped
/// by the interface.
pub(crate) type Stats = (u32, u32, u32);

#[cfg(feature = "capture")]
mod imp {
    use std::os::fd::{AsRawFd, RawFd};

    use super::{POLL_MS, Packet, Stats};

    /// An open capture socket.
    pub(crate) struct Socket(pcap::Capture<pcap::Active>);

    impl Socket {
        /// Opens `interface` (promiscuous, non-blocking, nanosecond timestamps).
        pub(crate) fn open(
            interface: &str,
            snaplen: u32,
            kernel_buffer: u32,
        ) -> Result<Self, String> {
            pcap::Capture::from_device(interface)
                .map_err(|e| e.to_string())?
                .snaplen(i32::try_from(snaplen).unwrap_or(i32::MAX))
                .buffer_size(i32::try_from(kernel_buffer).unwrap_or(i32::MAX))
                .timeout(POLL_MS)
                .promisc(true)
                .precision(pcap::Precision::Nano)
                .open()
                .and_then(pcap::Capture::setnonblock)
                .map(Self)
                .map_err(|e| e.to_string())
        }

        /// The interface's link type (DLT).
        pub(crate) fn link_type(&self) -> i32 {
            self.0.get_datalink().0
        }

        /// The socket's descriptor.
        pub(crate) fn fd(&self) -> RawFd {
            self.0.as_raw_fd()
        }

        /// The next packet, or `None` when none is waiting.
        pub(crate) fn next(&mut self) -> Result<Option<Packet<'_>>, String> {
            match self.0.next_packet() {
                // With nanosecond precision, `tv_usec` holds nanoseconds.
                Ok(packet) => {
                    let (sec, nsec) = (packet.header.ts.tv_sec, packet.header.ts.tv_usec);
                    let ts = sec.saturating_mul(1_000_000_000).saturating_add(nsec);
                    Ok(Some((ts, packet.header.len, packet.data)))
                }
                Err(pcap::Error::TimeoutExpired) => Ok(None),
                Err(e) => Err(e.to_string()),
            }
        }

        /// libpcap's counters, if it gives them.
        pub(crate) fn stats(&mut self) -> Option<Stats> {
            let stats = self.0.stats().ok()?;
            Some((stats.received, stats.dropped, stats.if_dropped))
        }
    }
}

#[cfg(not(feature = "capture"))]
mod imp {
    use std::os::fd::RawFd;

    use super::{Packet, Stats};

    /// No socket can be opened: this build has no libpcap.
    pub(crate) enum Socket {}

    impl Socket {
        pub(crate) fn open(_: &str, _: u32, _: u32) -> Result<Self, String> {
            Err(
                "this hindsight was built without live capture (the `live-capture` feature)"
                    .to_owned(),
            )
        }

        pub(crate) fn link_type(&self) -> i32 {
            match *self {}
        }

        pub(crate) fn fd(&self) -> RawFd {
            match *self {}
        }

        pub(crate) fn next(&mut self) -> Result<Option<Packet<'_>>, String> {
            match *self {}
        }

        pub(crate) fn stats(&mut self) -> Option<Stats> {
            match *self {}
        }
    }
}

pub(crate) use imp::Socket;
