//! Live recording: a capture thread copies packets from an interface (libpcap,
//! which on Linux is AF_PACKET with a TPACKET_V3 memory-mapped ring) into the
//! capture ring; behind it, the archiver reads every chunk of the ring into the
//! archive, and the analyzer watches for a trigger filter and writes a pcap dump
//! of the window around each trigger.
//!
//! ```text
//! interface ─► capture thread ─► ring ─┬─► archiver ─► Ingestor (segments, indexes)
//!                                      └─► analyzer ─► dump (pcap of [t − before, t + after])
//! ```
//!
//! Nothing waits on the archive or the dumps but the ring: a slow archiver falls
//! behind and loses the chunks the ring overwrote (counted), it never makes the
//! capture drop; a dump pins the ring where it reads (see `hindsight_ring::Pin`).

use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hindsight_ingest::{IngestError, Ingestor};
use hindsight_model::{Frame, LinkType};
use hindsight_query::Filter;
use hindsight_ring::{Ring, RingConfig, RingError, RingStats};
use hindsight_trigger::{
    Analyzer, DumpLimits, DumpReport, DumpRequest, DumpTemplate, TriggerError, dump,
};

/// What can go wrong while recording.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    /// The interface could not be opened or read.
    #[error("capture on {interface}: {message}")]
    Capture {
        /// The interface.
        interface: String,
        /// libpcap's message.
        message: String,
    },
    /// The ring's configuration is invalid.
    #[error(transparent)]
    Ring(#[from] RingError),
    /// The archive failed.
    #[error(transparent)]
    Ingest(#[from] IngestError),
    /// A dump failed.
    #[error(transparent)]
    Trigger(#[from] TriggerError),
}

/// A trigger: when a packet matches `filter`, dump the packets of
/// `[t − before, t + after]` that match `dump` rendered from that packet.
#[derive(Debug)]
pub struct TriggerConfig {
    /// The trigger filter.
    pub filter: Filter,
    /// The dump filter template.
    pub dump: DumpTemplate,
    /// Time before the trigger packet.
    pub before: Duration,
    /// Time after it.
    pub after: Duration,
    /// Directory of the dumps.
    pub dir: PathBuf,
    /// Bytes at most per dump.
    pub max_dump_bytes: u64,
}

/// What to record.
#[derive(Debug)]
pub struct RecordConfig {
    /// The interface (`eth0`, `any`...).
    pub interface: String,
    /// Bytes captured per packet (libpcap's snaplen).
    pub snaplen: u32,
    /// Kernel buffer of the capture, bytes.
    pub kernel_buffer: u32,
    /// The ring.
    pub ring: RingConfig,
    /// Seal the archive's open segment this often.
    pub seal_every: Duration,
    /// The trigger, if any.
    pub trigger: Option<TriggerConfig>,
}

/// What a recording did.
#[derive(Debug, Default)]
pub struct RecordSummary {
    /// Packets the capture thread put in the ring.
    pub captured: u64,
    /// libpcap's counters at the end: received by the filter, dropped for lack of
    /// buffer space in the kernel, dropped by the interface.
    pub kernel_received: u32,
    /// Dropped by the kernel.
    pub kernel_dropped: u32,
    /// Dropped by the interface or driver.
    pub interface_dropped: u32,
    /// The ring's counters.
    pub ring: RingStats,
    /// Packets the archiver wrote.
    pub archived: u64,
    /// Ring chunks the archiver missed (overwritten before it read them).
    pub archive_missed_chunks: u64,
    /// Dumps written.
    pub dumps: Vec<DumpReport>,
    /// Trigger matches suppressed by the hold-off.
    pub triggers_suppressed: u64,
    /// Triggers whose packet lacks a field the dump template names.
    pub triggers_without_dump: u64,
}

/// A recording in progress.
#[derive(Debug)]
pub struct Recorder {
    ring: Ring,
    stop: Arc<AtomicBool>,
    link_type: LinkType,
    capture: Option<JoinHandle<Result<CaptureCounts, LiveError>>>,
    archiver: Option<JoinHandle<Result<(u64, u64), LiveError>>>,
    analyzer: Option<JoinHandle<Result<Analyzed, LiveError>>>,
}

/// The analyzer's dumps, the matches its hold-off suppressed, and the triggers
/// whose packet could not fill the dump template.
type Analyzed = (Vec<DumpReport>, u64, u64);

#[derive(Debug, Default)]
struct CaptureCounts {
    captured: u64,
    received: u32,
    dropped: u32,
    if_dropped: u32,
}

/// How long the capture waits in the kernel before it looks at the stop flag and
/// the ring's hold time.
const POLL_MS: i32 = 50;

impl Recorder {
    /// Opens the interface and starts the capture, archiver and analyzer threads.
    /// The interface is open and capturing when this returns.
    pub fn start(config: RecordConfig, ingestor: Ingestor) -> Result<Self, LiveError> {
        let capture_error = |message: String| LiveError::Capture {
            interface: config.interface.clone(),
            message,
        };
        let mut capture = pcap::Capture::from_device(config.interface.as_str())
            .map_err(|e| capture_error(e.to_string()))?
            .snaplen(i32::try_from(config.snaplen).unwrap_or(i32::MAX))
            .buffer_size(i32::try_from(config.kernel_buffer).unwrap_or(i32::MAX))
            .timeout(POLL_MS)
            .promisc(true)
            .precision(pcap::Precision::Nano)
            .open()
            .and_then(pcap::Capture::setnonblock)
            .map_err(|e| capture_error(e.to_string()))?;
        let link_type = u16::try_from(capture.get_datalink().0)
            .map(LinkType)
            .map_err(|_| capture_error("link type out of range".to_owned()))?;
        let ring = Ring::new(config.ring)?;
        let stop = Arc::new(AtomicBool::new(false));

        // Readers first, so that they see the first chunk.
        let archiver = {
            let cursor = ring.cursor_at_oldest();
            let seal_every = config.seal_every;
            std::thread::Builder::new()
                .name("archiver".to_owned())
                .spawn(move || archive(cursor, ingestor, link_type, seal_every))
                .map_err(|e| capture_error(e.to_string()))?
        };
        let analyzer = config.trigger.map(|trigger| {
            let analyzer = Analyzer::new(&ring, trigger.filter.clone(), link_type, trigger.after);
            let ring = ring.clone();
            std::thread::Builder::new()
                .name("analyzer".to_owned())
                .spawn(move || analyze(analyzer, &ring, &trigger, link_type))
        });
        let analyzer = match analyzer {
            Some(Ok(handle)) => Some(handle),
            Some(Err(e)) => return Err(capture_error(e.to_string())),
            None => None,
        };
        let capture_thread = {
            let mut producer = ring.producer(0);
            let stop = Arc::clone(&stop);
            let interface = config.interface.clone();
            std::thread::Builder::new()
                .name("capture".to_owned())
                .spawn(move || {
                    let mut counts = CaptureCounts::default();
                    while !stop.load(Ordering::Relaxed) {
                        match capture.next_packet() {
                            Ok(packet) => {
                                // With nanosecond precision, `tv_usec` holds nanoseconds.
                                let (sec, nsec) =
                                    (packet.header.ts.tv_sec, packet.header.ts.tv_usec);
                                let ts = sec.saturating_mul(1_000_000_000).saturating_add(nsec);
                                producer.push(ts, packet.header.len, packet.data)?;
                                counts.captured += 1;
                            }
                            // Nothing to read: TPACKET_V3's poll does not time out
                            // while no packet arrives, so the capture is non-blocking
                            // and waits here, with a timeout, to see the stop flag.
                            Err(pcap::Error::TimeoutExpired) => {
                                producer.publish_if_stale();
                                wait_readable(capture.as_raw_fd(), POLL_MS);
                            }
                            Err(e) => {
                                return Err(LiveError::Capture {
                                    interface,
                                    message: e.to_string(),
                                });
                            }
                        }
                    }
                    producer.publish();
                    if let Ok(stats) = capture.stats() {
                        counts.received = stats.received;
                        counts.dropped = stats.dropped;
                        counts.if_dropped = stats.if_dropped;
                    }
                    Ok(counts)
                })
                .map_err(|e| capture_error(e.to_string()))?
        };
        Ok(Self {
            ring,
            stop,
            link_type,
            capture: Some(capture_thread),
            archiver: Some(archiver),
            analyzer,
        })
    }

    /// The link type of the interface.
    pub fn link_type(&self) -> LinkType {
        self.link_type
    }

    /// Stops capturing, lets the archiver and the analyzer finish what the ring
    /// holds, seals the archive and returns what was done.
    pub fn stop(mut self) -> Result<RecordSummary, LiveError> {
        self.stop.store(true, Ordering::Relaxed);
        let counts = join(self.capture.take());
        self.ring.close();
        let archived = join(self.archiver.take());
        let analyzed = self.analyzer.take().map(|h| join(Some(h)));
        let counts = counts?;
        let (archived, missed) = archived?;
        let (dumps, suppressed, unrenderable) = match analyzed {
            Some(result) => result?,
            None => (Vec::new(), 0, 0),
        };
        Ok(RecordSummary {
            captured: counts.captured,
            kernel_received: counts.received,
            kernel_dropped: counts.dropped,
            interface_dropped: counts.if_dropped,
            ring: self.ring.stats(),
            archived,
            archive_missed_chunks: missed,
            dumps,
            triggers_suppressed: suppressed,
            triggers_without_dump: unrenderable,
        })
    }
}

/// Waits until `fd` is readable or `timeout_ms` has passed.
fn wait_readable(fd: std::os::fd::RawFd, timeout_ms: i32) {
    let mut poll = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, and its count; the descriptor is open for the
    // life of the capture that lends it.
    unsafe { libc::poll(&raw mut poll, 1, timeout_ms) };
}

fn join<T: Default>(handle: Option<JoinHandle<Result<T, LiveError>>>) -> Result<T, LiveError> {
    match handle.map(JoinHandle::join) {
        Some(Ok(result)) => result,
        Some(Err(_)) => Err(LiveError::Capture {
            interface: String::new(),
            message: "a recording thread panicked".to_owned(),
        }),
        None => Ok(T::default()),
    }
}

/// The archiver: every packet of every chunk into the archive, sealed on a clock.
fn archive(
    mut cursor: hindsight_ring::Cursor,
    mut ingestor: Ingestor,
    link_type: LinkType,
    seal_every: Duration,
) -> Result<(u64, u64), LiveError> {
    let mut archived = 0u64;
    let mut last_seal = Instant::now();
    loop {
        match cursor.next(Duration::from_millis(200)) {
            Ok(Some(chunk)) => {
                for packet in chunk.iter() {
                    ingestor.push(&Frame {
                        ts_nanos: packet.ts_ns,
                        wire_len: packet.wire_len,
                        data: packet.data,
                        link_type,
                        iface: u32::from(packet.iface),
                    })?;
                    archived += 1;
                }
            }
            Ok(None) => {}
            Err(_) => break,
        }
        if last_seal.elapsed() >= seal_every {
            ingestor.seal()?;
            last_seal = Instant::now();
        }
    }
    ingestor.finish()?;
    Ok((archived, cursor.skipped()))
}

/// The analyzer: triggers, each followed by its dump.
fn analyze(
    mut analyzer: Analyzer,
    ring: &Ring,
    trigger: &TriggerConfig,
    link_type: LinkType,
) -> Result<Analyzed, LiveError> {
    let mut dumps = Vec::new();
    let mut unrenderable = 0u64;
    loop {
        let hit = match analyzer.next_trigger(Duration::from_millis(200)) {
            Ok(Some(hit)) => hit,
            Ok(None) => continue,
            Err(_) => break,
        };
        // A trigger packet without a field the template names (an ARP packet for
        // `host $src`) gives no dump; the recording goes on.
        let Ok(filter) = trigger.dump.render(&hit.headers) else {
            unrenderable += 1;
            continue;
        };
        let name = format!(
            "dump-{}-{}.pcap",
            hit.ts_ns,
            hit.headers
                .src_addr
                .map_or_else(|| "nonip".to_owned(), |a| a.to_string().replace(':', "_"))
        );
        let request = DumpRequest {
            at_ns: hit.ts_ns,
            before: trigger.before,
            after: trigger.after,
            filter,
            link_type,
        };
        let limits = DumpLimits {
            max_bytes: trigger.max_dump_bytes,
            max_wait: trigger.after + ring.config().max_hold * 4 + Duration::from_secs(1),
        };
        dumps.push(dump(ring, &request, &trigger.dir.join(name), limits)?);
    }
    Ok((dumps, analyzer.suppressed(), unrenderable))
}
