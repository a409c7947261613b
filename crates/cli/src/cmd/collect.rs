//! `hindsight collect --listen udp://127.0.0.1:2055 --archive DIR`: a NetFlow v5,
//! v9 and IPFIX collector writing into the `flows` table and the connection index.

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use hindsight_flow::netflow::{NetflowDecoder, NetflowStats};
use hindsight_ingest::{IngestOptions, Ingestor};

use crate::ArchiveArg;

/// Arguments of `hindsight collect`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Where to listen: `udp://ADDRESS:PORT` (port 0 picks a free one and prints it).
    #[arg(long, default_value = "udp://127.0.0.1:2055", value_name = "URL")]
    listen: String,
    #[command(flatten)]
    archive: ArchiveArg,
    /// Seal (make durable and queryable) what was received every this many seconds.
    #[arg(long, default_value_t = 60, value_name = "SECONDS")]
    seal_secs: u64,
    /// Keep at least the N newest connections in the connection index and never
    /// more than N + k (Diventi's count-based expiration; 0 keeps everything).
    /// Overrides `[connections] keep` of the archive's config.toml for this run;
    /// see docs/ARCHITECTURE.md for k.
    #[arg(long, value_name = "N")]
    keep_connections: Option<u64>,
    /// Malformed export packets reported one by one before only counting them.
    #[arg(long, default_value_t = 20, value_name = "N")]
    report_errors: u64,
}

/// Socket receive buffer asked for, so bursts of export packets are not dropped.
const RECEIVE_BUFFER: libc::c_int = 8 << 20;

/// Runs the collector until SIGINT or SIGTERM, then seals and exits.
pub fn run(args: Args) -> Result<ExitCode> {
    anyhow::ensure!(args.seal_secs > 0, "--seal-secs must be positive");
    let address = parse_listen(&args.listen)?;
    let socket =
        UdpSocket::bind(address).with_context(|| format!("cannot listen on udp://{address}"))?;
    set_receive_buffer(&socket);
    socket.set_read_timeout(Some(Duration::from_millis(200)))?;
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, Arc::clone(&stop))
            .context("cannot install the signal handlers")?;
    }
    let options = IngestOptions {
        expiry: hindsight_ingest::settings::archive_expiry(
            &args.archive.archive,
            args.keep_connections,
        )?,
        ..IngestOptions::default()
    };
    let root = &args.archive.archive;
    let (mut ingestor, _opened) = Ingestor::open(root, options)
        .with_context(|| format!("cannot open archive {}", root.display()))?;
    eprintln!("listening on udp://{}", socket.local_addr()?);

    let mut decoder = NetflowDecoder::new();
    let mut records = Vec::new();
    let mut buffer = vec![0u8; 65_536];
    let seal_every = Duration::from_secs(args.seal_secs);
    let mut last_seal = Instant::now();
    let mut reported = 0u64;
    while !stop.load(Ordering::Relaxed) {
        match socket.recv_from(&mut buffer) {
            Ok((len, exporter)) => {
                let payload = buffer.get(..len).unwrap_or_default();
                if let Err(error) = decoder.decode(exporter, payload, &mut records) {
                    reported += 1;
                    if reported <= args.report_errors {
                        eprintln!("malformed: {error}");
                    }
                }
                ingestor.push_flow_records(records.drain(..))?;
            }
            Err(error)
                if matches!(
                    error.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) => {}
            Err(error) => return Err(error).context("receiving export packets"),
        }
        if last_seal.elapsed() >= seal_every {
            ingestor.seal()?;
            last_seal = Instant::now();
            eprintln!("{}", summary(decoder.stats()));
        }
    }
    ingestor.finish()?;
    eprintln!("stopped; {}", summary(decoder.stats()));
    Ok(ExitCode::SUCCESS)
}

fn summary(stats: &NetflowStats) -> String {
    let [v5, v9, ipfix] = stats.packets;
    format!(
        "export packets: {v5} v5, {v9} v9, {ipfix} IPFIX, {} malformed; {} flow records; \
         {} templates; {} data sets before their template; {} lost by sequence numbers",
        stats.malformed, stats.records, stats.templates, stats.unknown_template_sets, stats.lost
    )
}

fn parse_listen(url: &str) -> Result<SocketAddr> {
    let rest = url
        .strip_prefix("udp://")
        .with_context(|| format!("--listen {url:?}: expected udp://ADDRESS:PORT"))?;
    rest.parse()
        .with_context(|| format!("--listen {url:?}: {rest:?} is not ADDRESS:PORT"))
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
