//! The socket of a flow collector (`hindsight collect`): NetFlow and IPFIX
//! export packets over UDP.

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::Duration;

/// Receive buffer asked of the kernel: a burst of export packets must not be dropped.
const RECEIVE_BUFFER: libc::c_int = 8 << 20;

/// Why a collector cannot listen.
#[derive(Debug, thiserror::Error)]
#[error("--listen {url:?}: {reason}")]
pub struct ListenError {
    /// The URL given.
    pub url: String,
    /// What is wrong.
    pub reason: String,
}

/// A UDP socket bound to `url` (`udp://ADDRESS:PORT`) with a large receive
/// buffer and a 200 ms read timeout (so that the loop sees a stop flag).
pub fn bind(url: &str) -> Result<UdpSocket, ListenError> {
    let error = |reason: String| ListenError {
        url: url.to_owned(),
        reason,
    };
    let address = parse_listen(url).map_err(error)?;
    let socket = UdpSocket::bind(address)
        .map_err(|e| error(format!("cannot listen on udp://{address}: {e}")))?;
    set_receive_buffer(&socket);
    socket
        .set_read_timeout(Some(Duration::from_millis(200)))
        .map_err(|e| error(e.to_string()))?;
    Ok(socket)
}

/// One export packet from `socket` into `buffer`: its length and sender, or
/// `None` when the read timed out or was interrupted (the caller looks at its
/// stop flag and reads again).
pub fn receive(
    socket: &UdpSocket,
    buffer: &mut [u8],
) -> std::io::Result<Option<(usize, SocketAddr)>> {
    match socket.recv_from(buffer) {
        Ok(received) => Ok(Some(received)),
        Err(error)
            if matches!(
                error.kind(),
                std::io::ErrorKind::WouldBlock
                    | std::io::ErrorKind::TimedOut
                    | std::io::ErrorKind::Interrupted
            ) =>
        {
            Ok(None)
        }
        Err(error) => Err(error),
    }
}

fn parse_listen(url: &str) -> Result<SocketAddr, String> {
    let rest = url
        .strip_prefix("udp://")
        .ok_or_else(|| "expected udp://ADDRESS:PORT".to_owned())?;
    rest.parse()
        .map_err(|_| format!("{rest:?} is not ADDRESS:PORT"))
}

/// Asks for a larger socket receive buffer: SO_RCVBUFFORCE (root, or
/// CAP_NET_ADMIN) goes beyond `net.core.rmem_max`; otherwise the kernel grants what
/// SO_RCVBUF may, which only means more drops under bursts.
fn set_receive_buffer(socket: &UdpSocket) {
    let size = RECEIVE_BUFFER;
    for option in [libc::SO_RCVBUFFORCE, libc::SO_RCVBUF] {
        // SAFETY: the descriptor is open for the life of `socket`, and the
        // option value is a c_int of the size passed.
        let set = unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                option,
                (&raw const size).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if set == 0 {
            return;
        }
    }
}

/// What a collector decodes from the export packets it receives: one
/// decoder (its templates and counters) and the buffers of one packet.
#[derive(Debug)]
pub struct Collector {
    decoder: hindsight_flow::netflow::NetflowDecoder,
    records: Vec<hindsight_model::FlowRecord>,
    buffer: Vec<u8>,
}

impl Default for Collector {
    fn default() -> Self {
        Self {
            decoder: hindsight_flow::netflow::NetflowDecoder::new(),
            records: Vec::new(),
            buffer: vec![0u8; 65_536],
        }
    }
}

impl Collector {
    /// Receives one export packet from `socket` (waiting up to its read
    /// timeout) and decodes it. Returns its records, for the caller to drain,
    /// or `None` when none came; a malformed packet goes to `malformed` with
    /// its exporter.
    pub fn receive(
        &mut self,
        socket: &UdpSocket,
        malformed: &mut dyn FnMut(SocketAddr, hindsight_flow::netflow::NetflowError),
    ) -> std::io::Result<Option<&mut Vec<hindsight_model::FlowRecord>>> {
        let Some((len, exporter)) = receive(socket, &mut self.buffer)? else {
            return Ok(None);
        };
        let payload = self.buffer.get(..len).unwrap_or_default();
        if let Err(error) = self.decoder.decode(exporter, payload, &mut self.records) {
            malformed(exporter, error);
        }
        Ok(Some(&mut self.records))
    }

    /// What it has received so far.
    pub fn stats(&self) -> &hindsight_flow::netflow::NetflowStats {
        self.decoder.stats()
    }
}

/// Receives export packets on `socket` into `ingestor` until `stop`, sealing
/// what was received every `seal_every` (each seal's statistics to `notes`).
/// The first `report_errors` malformed export packets go to `notes` one by one,
/// the rest are only counted.
pub fn collect(
    socket: &UdpSocket,
    ingestor: &mut hindsight_ingest::Ingestor,
    stop: &std::sync::atomic::AtomicBool,
    seal_every: Duration,
    report_errors: u64,
    notes: &mut dyn FnMut(String),
) -> Result<hindsight_flow::netflow::NetflowStats, crate::LiveError> {
    let mut collector = Collector::default();
    let mut last_seal = std::time::Instant::now();
    let mut reported = 0u64;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let received = collector
            .receive(socket, &mut |_, error| {
                reported += 1;
                if reported <= report_errors {
                    notes(format!("malformed: {error}"));
                }
            })
            .map_err(crate::LiveError::Receive)?;
        if let Some(records) = received {
            ingestor.push_flow_records(records.drain(..))?;
        }
        if last_seal.elapsed() >= seal_every {
            ingestor.seal()?;
            last_seal = std::time::Instant::now();
            notes(stats_line(collector.stats()));
        }
    }
    Ok(collector.stats().clone())
}

/// What a collector has received, in a line.
pub fn stats_line(stats: &hindsight_flow::netflow::NetflowStats) -> String {
    let [v5, v9, ipfix] = stats.packets;
    format!(
        "export packets: {v5} v5, {v9} v9, {ipfix} IPFIX, {} malformed; {} flow records; \
         {} templates; {} data sets before their template; {} lost by sequence numbers",
        stats.malformed, stats.records, stats.templates, stats.unknown_template_sets, stats.lost
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_urls() {
        assert_eq!(
            parse_listen("udp://127.0.0.1:2055").unwrap(),
            "127.0.0.1:2055".parse().unwrap()
        );
        assert_eq!(
            parse_listen("udp://[::1]:0").unwrap(),
            "[::1]:0".parse().unwrap()
        );
        assert!(parse_listen("tcp://127.0.0.1:2055").is_err());
        assert!(parse_listen("udp://localhost").is_err());
    }
}
