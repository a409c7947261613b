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

pub mod collector;
mod socket;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hindsight_filter::Filter;
use hindsight_ingest::{IngestError, Ingestor};
use hindsight_model::{Frame, LinkType};
use hindsight_ring::{Ring, RingConfig, RingError, RingStats};
use hindsight_trigger::{
    Analyzer, DumpLimits, DumpReport, DumpRequest, DumpTemplate, TriggerError, dump,
};
use socket::{POLL_MS, Socket};

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
    /// A collector could not receive export packets.
    #[error("receiving export packets: {0}")]
    Receive(std::io::Error),
    /// The ring's configuration is invalid.
    #[error(transparent)]
    Ring(#[from] RingError),
    /// The archive failed.
    #[error(transparent)]
    Ingest(#[from] IngestError),
    /// A dump failed.
    #[error(transparent)]
    Trigger(#[from] TriggerError),
    /// The archive's `config.toml` is not valid.
    #[error(transparent)]
    Settings(#[from] hindsight_store::settings::SettingsError),
    /// A dump was asked of a time before 1970, which no dump name can hold.
    #[error("a dump's time must be at or after 1970-01-01T00:00:00Z ({at_ns} ns is before)")]
    DumpTime {
        /// The time asked.
        at_ns: i64,
    },
    /// The dump directory could not be created.
    #[error("cannot create the dump directory {}: {source}", dir.display())]
    DumpDir {
        /// The directory.
        dir: std::path::PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
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
}

/// Where dumps go and how much they may hold.
#[derive(Clone, Debug)]
pub struct DumpConfig {
    /// Directory of the dumps.
    pub dir: PathBuf,
    /// Bytes at most per dump.
    pub max_dump_bytes: u64,
    /// Bytes at most of all dumps in `dir`: after each dump, the oldest dumps
    /// are deleted until the rest fit (0: no bound).
    pub max_total_bytes: u64,
}

/// What to record.
#[derive(Debug)]
pub struct RecordConfig {
    /// The interface (`eth0`, `any`...).
    pub interface: String,
    /// Bytes captured per packet (libpcap's snaplen).
    pub snaplen: u32,
    /// Kernel buffer of the capture, bytes (per capture thread).
    pub kernel_buffer: u32,
    /// Capture threads, each a producer of the ring with its own AF_PACKET
    /// socket; more than one joins them in a fanout group (by flow hash).
    pub fanout: usize,
    /// The ring.
    pub ring: RingConfig,
    /// Seal the archive's open segment this often.
    pub seal_every: Duration,
    /// Keep the unsealed rows in memory, up to about this many bytes of packet
    /// batches, for readers in this process ([`Recorder::tail`]); 0 keeps none.
    pub tail_bytes: usize,
    /// The trigger, if any.
    pub trigger: Option<TriggerConfig>,
    /// The dumps of triggers and of [`Dumper`] requests.
    pub dumps: DumpConfig,
}

/// Counters of a recording, updated while it runs (for `/metrics`).
#[derive(Debug, Default)]
pub struct LiveCounters {
    /// Capture threads reading the interface now.
    pub capture_threads: AtomicU64,
    /// Packets the capture thread put in the ring.
    pub captured: AtomicU64,
    /// Wire bytes of those packets.
    pub captured_bytes: AtomicU64,
    /// libpcap's count of packets received (all sockets), refreshed about once a second.
    pub kernel_received: AtomicU64,
    /// libpcap's count of packets the kernel dropped for lack of buffer space.
    pub kernel_dropped: AtomicU64,
    /// libpcap's count of packets the interface or driver dropped.
    pub interface_dropped: AtomicU64,
    /// Packets the archiver wrote.
    pub archived: AtomicU64,
    /// Ring chunks the archiver missed (overwritten before it read them).
    pub archive_missed_chunks: AtomicU64,
    /// Times the archiver sealed its open segments.
    pub seals: AtomicU64,
    /// Set when the archiver has stopped before it was asked to (an error: a
    /// full disk); [`Recorder::stop`] returns why.
    pub archiver_failed: std::sync::atomic::AtomicBool,
    /// Dumps written (triggers and requests).
    pub dumps: AtomicU64,
    /// Trigger matches suppressed by the hold-off.
    pub triggers_suppressed: AtomicU64,
    /// Triggers whose packet lacks a field the dump template names.
    pub triggers_without_dump: AtomicU64,
    /// Ring chunks the trigger analyzer missed (overwritten before it read
    /// them): traffic no trigger could see.
    pub trigger_missed_chunks: AtomicU64,
}

fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

/// What a recording did.
#[derive(Debug, Default)]
pub struct RecordSummary {
    /// Packets the capture threads put in the ring.
    pub captured: u64,
    /// The same, per capture thread (one per fanout socket).
    pub captured_per_thread: Vec<u64>,
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
    /// Ring chunks the trigger analyzer missed (overwritten before it read them).
    pub trigger_missed_chunks: u64,
}

impl RecordSummary {
    /// What `record` says of the recording at its end, a line each;
    /// `dump_template` is its `--dump`.
    pub fn lines(&self, dump_template: &str) -> Vec<String> {
        let mut lines = Vec::new();
        lines.push(format!(
            "captured {} packets ({} dropped by the kernel, {} by the interface); archived {} \
             ({} ring chunks missed); ring: {} chunks, {} overwritten",
            self.captured,
            self.kernel_dropped,
            self.interface_dropped,
            self.archived,
            self.archive_missed_chunks,
            self.ring.chunks,
            self.ring.overwritten
        ));
        if self.captured_per_thread.len() > 1 {
            let shares: Vec<String> = self
                .captured_per_thread
                .iter()
                .map(u64::to_string)
                .collect();
            lines.push(format!("capture threads (fanout): {}", shares.join(" + ")));
        }
        if self.trigger_missed_chunks > 0 {
            lines.push(format!(
                "the trigger analyzer fell behind: {} ring chunks were overwritten before \
                 it read them (raise --ring-mib)",
                self.trigger_missed_chunks
            ));
        }
        if self.triggers_without_dump > 0 {
            lines.push(format!(
                "{} trigger(s) gave no dump: their packet lacks a field --dump {:?} names",
                self.triggers_without_dump, dump_template
            ));
        }
        for dump in &self.dumps {
            lines.push(format!(
                "dump {}: {} packets, {}{}",
                dump.path.display(),
                dump.packets,
                hindsight_output::human_bytes(dump.bytes),
                if dump.complete {
                    ""
                } else {
                    " (incomplete: the capture did not reach the window's end in time)"
                }
            ));
        }
        lines
    }
}

/// A recording in progress.
#[derive(Debug)]
pub struct Recorder {
    ring: Ring,
    stop: Arc<AtomicBool>,
    link_type: LinkType,
    counters: Arc<LiveCounters>,
    dumper: Dumper,
    tail: Option<Arc<hindsight_store::Tail>>,
    capture: Vec<JoinHandle<Result<CaptureCounts, LiveError>>>,
    archiver: Option<JoinHandle<Result<(u64, u64), LiveError>>>,
    analyzer: Option<JoinHandle<Result<Analyzed, LiveError>>>,
    /// New retention bounds for the archiver.
    retention: RetentionControl,
}

/// Changes the retention bounds a recorder's archiver runs with.
#[derive(Clone, Debug)]
pub struct RetentionControl(std::sync::mpsc::Sender<RetentionChange>);

impl RetentionControl {
    /// Has the archiver expire by `retention` from its next seal on (`serve`
    /// reloading the archive's config.toml), and waits until it has taken
    /// it. New bounds are taken; new classes are refused, saying what
    /// changed, and nothing is.
    pub fn set_retention(&self, retention: hindsight_ingest::Retention) -> Result<(), LiveError> {
        let (answer, answered) = std::sync::mpsc::channel();
        let stopped = || LiveError::Ingest(IngestError::SinkStopped);
        self.0.send((retention, answer)).map_err(|_| stopped())?;
        match answered.recv_timeout(RETENTION_ANSWER) {
            Ok(result) => result.map_err(LiveError::Ingest),
            Err(_) => Err(stopped()),
        }
    }
}

/// New retention bounds, and where the archiver says whether it took them.
type RetentionChange = (
    hindsight_ingest::Retention,
    std::sync::mpsc::Sender<Result<(), IngestError>>,
);

/// How long [`RetentionControl::set_retention`] waits for the archiver to answer (it
/// looks for changes between chunks, at least every 200 ms).
const RETENTION_ANSWER: Duration = Duration::from_secs(10);

/// The analyzer's dumps, the matches its hold-off suppressed, the triggers whose
/// packet could not fill the dump template, and the ring chunks it missed.
type Analyzed = (Vec<DumpReport>, u64, u64, u64);

/// What one capture thread did: packets into the ring, and its socket's
/// libpcap counters at the end.
#[derive(Debug, Default)]
struct CaptureCounts {
    captured: u64,
    kernel: KernelSeen,
}

/// How often the capture thread copies libpcap's counters into [`LiveCounters`].
const KERNEL_STATS_EVERY: Duration = Duration::from_secs(1);

impl Recorder {
    /// Opens the archive at `root` for live ingest under its own bounds
    /// (`ARCHIVE/config.toml`: expiry, retention), creates the dump directory when
    /// `with_dumps`, and starts recording (`record` and `serve`). Returns what
    /// opening the archive repaired.
    pub fn open(
        root: &std::path::Path,
        config: RecordConfig,
        with_dumps: bool,
    ) -> Result<(Self, hindsight_ingest::OpenReport), LiveError> {
        let settings = hindsight_store::settings::archive_settings(root, None)?;
        let options = hindsight_ingest::IngestOptions {
            expiry: settings.expiry,
            community_seed: settings.community_seed,
            retention: settings.retention,
            tail_bytes: config.tail_bytes,
            segment: hindsight_store::SegmentOptions {
                summaries: settings.summaries,
                ..hindsight_store::SegmentOptions::default()
            },
            ..hindsight_ingest::IngestOptions::default()
        };
        let (ingestor, opened) = Ingestor::open(root, options)?;
        // Triggers hash `community_id` as the archive's connections do.
        let mut config = config;
        if let Some(trigger) = &mut config.trigger {
            trigger.filter = trigger
                .filter
                .clone()
                .with_community_seed(settings.community_seed);
        }
        // After the archive is opened: a new archive must start as an empty directory.
        if with_dumps {
            let dir = &config.dumps.dir;
            std::fs::create_dir_all(dir).map_err(|source| LiveError::DumpDir {
                dir: dir.clone(),
                source,
            })?;
        }
        Ok((Self::start(config, ingestor)?, opened))
    }

    /// Opens the interface and starts the capture, archiver and analyzer threads.
    /// The interface is open and capturing when this returns.
    pub fn start(config: RecordConfig, ingestor: Ingestor) -> Result<Self, LiveError> {
        let capture_error = |message: String| LiveError::Capture {
            interface: config.interface.clone(),
            message,
        };
        let fanout = config.fanout.max(1);
        let mut captures = Vec::with_capacity(fanout);
        for _ in 0..fanout {
            captures.push(open_capture(&config).map_err(capture_error)?);
        }
        if fanout > 1 {
            // One group per recording: the kernel spreads the interface's packets
            // over the sockets by flow hash, so a flow stays with one producer.
            let group = (std::process::id() & 0xffff) as u16;
            for capture in &captures {
                join_fanout(capture, group).map_err(|e| capture_error(e.to_string()))?;
            }
        }
        let link_type = u16::try_from(captures[0].link_type())
            .map(LinkType)
            .map_err(|_| capture_error("link type out of range".to_owned()))?;
        let ring = Ring::new(config.ring)?;
        let stop = Arc::new(AtomicBool::new(false));
        let counters = Arc::new(LiveCounters::default());
        let dumper = Dumper {
            ring: ring.clone(),
            link_type,
            config: config.dumps,
            counters: Arc::clone(&counters),
            names: Arc::default(),
        };

        let tail = ingestor.tail();
        let (retention, changes) = std::sync::mpsc::channel();
        // Readers first, so that they see the first chunk.
        let archiver = {
            let cursor = ring.cursor_at_oldest();
            let seal_every = config.seal_every;
            let counters = Arc::clone(&counters);
            std::thread::Builder::new()
                .name("archiver".to_owned())
                .spawn(move || {
                    let archived =
                        archive(cursor, ingestor, link_type, seal_every, &counters, &changes);
                    if archived.is_err() {
                        counters.archiver_failed.store(true, Ordering::Relaxed);
                    }
                    archived
                })
                .map_err(|e| capture_error(e.to_string()))?
        };
        let analyzer = config.trigger.map(|trigger| {
            let analyzer = Analyzer::new(&ring, trigger.filter.clone(), link_type, trigger.after);
            let dumper = dumper.clone();
            std::thread::Builder::new()
                .name("analyzer".to_owned())
                .spawn(move || analyze(analyzer, &dumper, &trigger))
        });
        let analyzer = match analyzer {
            Some(Ok(handle)) => Some(handle),
            Some(Err(e)) => return Err(capture_error(e.to_string())),
            None => None,
        };
        let mut capture_threads = Vec::with_capacity(captures.len());
        for (index, capture) in captures.into_iter().enumerate() {
            // Every socket captures the same interface: interface index 0.
            let producer = ring.producer(0);
            let stop = Arc::clone(&stop);
            let interface = config.interface.clone();
            let live = Arc::clone(&counters);
            counters.capture_threads.fetch_add(1, Ordering::Relaxed);
            let thread = std::thread::Builder::new()
                .name(format!("capture-{index}"))
                .spawn(move || capture_loop(capture, producer, &stop, &live, interface))
                .map_err(|e| capture_error(e.to_string()))?;
            capture_threads.push(thread);
        }
        Ok(Self {
            ring,
            stop,
            link_type,
            counters,
            dumper,
            tail,
            capture: capture_threads,
            archiver: Some(archiver),
            analyzer,
            retention: RetentionControl(retention),
        })
    }

    /// What changes the retention the archiver runs with.
    pub fn retention_control(&self) -> RetentionControl {
        self.retention.clone()
    }

    /// The link type of the interface.
    pub fn link_type(&self) -> LinkType {
        self.link_type
    }

    /// The counters of this recording, live.
    pub fn counters(&self) -> Arc<LiveCounters> {
        Arc::clone(&self.counters)
    }

    /// The capture ring.
    pub fn ring(&self) -> &Ring {
        &self.ring
    }

    /// A handle that dumps windows of the ring on request (`POST /api/v1/triggers`).
    pub fn dumper(&self) -> Dumper {
        self.dumper.clone()
    }

    /// The archive's unsealed rows, if the recording keeps them (`tail_bytes`).
    pub fn tail(&self) -> Option<Arc<hindsight_store::Tail>> {
        self.tail.clone()
    }

    /// Stops capturing, lets the archiver and the analyzer finish what the ring
    /// holds, seals the archive and returns what was done.
    pub fn stop(mut self) -> Result<RecordSummary, LiveError> {
        self.stop.store(true, Ordering::Relaxed);
        let per_thread: Result<Vec<CaptureCounts>, LiveError> =
            self.capture.drain(..).map(|h| join(Some(h))).collect();
        self.ring.close();
        let archived = join(self.archiver.take());
        let analyzed = self.analyzer.take().map(|h| join(Some(h)));
        let per_thread = per_thread?;
        let (archived, missed) = archived?;
        let sum = |f: fn(&KernelSeen) -> u32| {
            per_thread
                .iter()
                .fold(0u32, |sum, c| sum.wrapping_add(f(&c.kernel)))
        };
        let (dumps, suppressed, unrenderable, trigger_missed) = match analyzed {
            Some(result) => result?,
            None => (Vec::new(), 0, 0, 0),
        };
        Ok(RecordSummary {
            captured: per_thread.iter().map(|c| c.captured).sum(),
            captured_per_thread: per_thread.iter().map(|c| c.captured).collect(),
            kernel_received: sum(|c| c.received),
            kernel_dropped: sum(|c| c.dropped),
            interface_dropped: sum(|c| c.if_dropped),
            ring: self.ring.stats(),
            archived,
            archive_missed_chunks: missed,
            dumps,
            triggers_suppressed: suppressed,
            triggers_without_dump: unrenderable,
            trigger_missed_chunks: trigger_missed,
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

/// Counts one capture thread out when it ends, whichever way it ends (it was
/// counted in before it started, so that the count is right at once).
struct Running<'a>(&'a AtomicU64);

impl<'a> Running<'a> {
    fn start(threads: &'a AtomicU64) -> Self {
        Self(threads)
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Opens the interface for one capture thread: non-blocking (see [`capture_loop`]),
/// nanosecond timestamps.
fn open_capture(config: &RecordConfig) -> Result<Socket, String> {
    Socket::open(&config.interface, config.snaplen, config.kernel_buffer)
}

/// An interface read on the caller's own thread, without the ring: for a
/// consumer of its own (`hindsight watch -i`).
pub struct InterfaceReader {
    capture: Socket,
    interface: String,
    link_type: LinkType,
}

impl std::fmt::Debug for InterfaceReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InterfaceReader")
            .field("interface", &self.interface)
            .finish_non_exhaustive()
    }
}

impl InterfaceReader {
    /// Opens `interface`, keeping `snaplen` bytes of each packet (0: whole
    /// packets), with a kernel buffer of `kernel_buffer` bytes.
    pub fn open(interface: &str, snaplen: u32, kernel_buffer: u32) -> Result<Self, LiveError> {
        let error = |message: String| LiveError::Capture {
            interface: interface.to_owned(),
            message,
        };
        let snaplen = if snaplen == 0 { 262_144 } else { snaplen };
        let capture = Socket::open(interface, snaplen, kernel_buffer).map_err(error)?;
        let link_type = u16::try_from(capture.link_type())
            .map(LinkType)
            .map_err(|_| error("link type out of range".to_owned()))?;
        Ok(Self {
            capture,
            interface: interface.to_owned(),
            link_type,
        })
    }

    /// The next packet, or `None` after waiting up to 50 ms for one.
    pub fn next_frame(&mut self) -> Result<Option<Frame<'_>>, LiveError> {
        let fd = self.capture.fd();
        match self.capture.next() {
            Ok(Some((ts_nanos, wire_len, data))) => Ok(Some(Frame {
                ts_nanos,
                wire_len,
                data,
                link_type: self.link_type,
                iface: 0,
            })),
            Ok(None) => {
                wait_readable(fd, POLL_MS);
                Ok(None)
            }
            Err(message) => Err(LiveError::Capture {
                interface: self.interface.clone(),
                message,
            }),
        }
    }

    /// Packet time up to which the interface has delivered every packet (a
    /// little behind the clock), once [`Self::next_frame`] found it empty.
    pub fn caught_up_to() -> i64 {
        caught_up_to()
    }
}

/// Adds the capture's AF_PACKET socket to fanout group `group`, by flow hash
/// (fragments defragmented first, so they follow their flow).
fn join_fanout(capture: &Socket, group: u16) -> std::io::Result<()> {
    let mode = libc::PACKET_FANOUT_HASH | libc::PACKET_FANOUT_FLAG_DEFRAG;
    let value: libc::c_int = i32::from(group) | ((mode as libc::c_int) << 16);
    // SAFETY: the capture's open socket, and a c_int option of its size.
    let status = unsafe {
        libc::setsockopt(
            capture.fd(),
            libc::SOL_PACKET,
            libc::PACKET_FANOUT,
            (&raw const value).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if status == 0 {
        Ok(())
    } else {
        let error = std::io::Error::last_os_error();
        Err(std::io::Error::new(
            error.kind(),
            format!(
                "cannot join AF_PACKET fanout group {group}: {error} (fanout needs a Linux interface)"
            ),
        ))
    }
}

/// One capture thread: packets from its socket into its own producer of the
/// ring, counters into `live`, until `stop`.
fn capture_loop(
    mut capture: Socket,
    mut producer: hindsight_ring::Producer,
    stop: &AtomicBool,
    live: &LiveCounters,
    interface: String,
) -> Result<CaptureCounts, LiveError> {
    let _running = Running::start(&live.capture_threads);
    let mut counts = CaptureCounts::default();
    let mut stats_at = Instant::now();
    let (mut packets, mut bytes) = (0u64, 0u64);
    while !stop.load(Ordering::Relaxed) {
        if packets >= 4096 {
            add(&live.captured, std::mem::take(&mut packets));
            add(&live.captured_bytes, std::mem::take(&mut bytes));
            if stats_at.elapsed() >= KERNEL_STATS_EVERY {
                stats_at = Instant::now();
                counts.kernel.update(&mut capture, live);
            }
        }
        match capture.next() {
            Ok(Some((ts, wire_len, data))) => {
                producer.push(ts, wire_len, data)?;
                counts.captured += 1;
                packets += 1;
                bytes += u64::from(wire_len);
            }
            // Nothing to read: TPACKET_V3's poll does not time out while no packet
            // arrives, so the capture is non-blocking and waits here, with a
            // timeout, to see the stop flag.
            Ok(None) => {
                producer.publish_if_stale();
                producer.caught_up(caught_up_to());
                add(&live.captured, std::mem::take(&mut packets));
                add(&live.captured_bytes, std::mem::take(&mut bytes));
                if stats_at.elapsed() >= KERNEL_STATS_EVERY {
                    stats_at = Instant::now();
                    counts.kernel.update(&mut capture, live);
                }
                wait_readable(capture.fd(), POLL_MS);
            }
            Err(message) => return Err(LiveError::Capture { interface, message }),
        }
    }
    producer.publish();
    add(&live.captured, packets);
    add(&live.captured_bytes, bytes);
    counts.kernel.update(&mut capture, live);
    Ok(counts)
}

/// How far a capture thread that found its socket empty has read: packets
/// arrived before `now − CAUGHT_UP_MARGIN` have been handed over. TPACKET_V3
/// holds a packet back at most until its block's timeout (libpcap sets it to the
/// read timeout, `POLL_MS`); the margin is four times that.
const CAUGHT_UP_MARGIN: Duration = Duration::from_millis(4 * POLL_MS as u64);

/// Packet time (the kernel's realtime clock) up to which an empty socket has
/// delivered everything.
fn caught_up_to() -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .saturating_sub(CAUGHT_UP_MARGIN);
    i64::try_from(now.as_nanos()).unwrap_or(i64::MAX)
}

/// libpcap's counters of one socket as last seen, so that several capture
/// threads add their own increments to the shared counters.
#[derive(Debug, Default)]
struct KernelSeen {
    received: u32,
    dropped: u32,
    if_dropped: u32,
}

impl KernelSeen {
    fn update(&mut self, capture: &mut Socket, live: &LiveCounters) {
        let Some((received, dropped, if_dropped)) = capture.stats() else {
            return;
        };
        // The kernel's counters are 32-bit and wrap.
        add(
            &live.kernel_received,
            u64::from(received.wrapping_sub(self.received)),
        );
        add(
            &live.kernel_dropped,
            u64::from(dropped.wrapping_sub(self.dropped)),
        );
        add(
            &live.interface_dropped,
            u64::from(if_dropped.wrapping_sub(self.if_dropped)),
        );
        self.received = received;
        self.dropped = dropped;
        self.if_dropped = if_dropped;
    }
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

/// How often the archiver hands what it has buffered to the archive's tail,
/// where readers in this process see it: half the freshness a reader promises
/// (2 s), the rest for the reader.
const PUBLISH_EVERY: Duration = Duration::from_millis(500);

/// The archiver: every packet of every chunk into the archive, sealed on a
/// clock, under retention bounds that may change.
fn archive(
    mut cursor: hindsight_ring::Cursor,
    mut ingestor: Ingestor,
    link_type: LinkType,
    seal_every: Duration,
    counters: &LiveCounters,
    changes: &std::sync::mpsc::Receiver<RetentionChange>,
) -> Result<(u64, u64), LiveError> {
    let mut archived = 0u64;
    let mut last_seal = Instant::now();
    let mut last_publish = Instant::now();
    let publish = ingestor.tail().is_some();
    let mut skipped = 0;
    loop {
        match cursor.next(Duration::from_millis(200)) {
            Ok(Some(chunk)) => {
                let before = archived;
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
                add(&counters.archived, archived - before);
            }
            Ok(None) => {}
            Err(_) => break,
        }
        // A sink that stopped fails the next write too, which stops this loop.
        while let Ok((retention, answer)) = changes.try_recv() {
            let _asker_gone = answer.send(ingestor.set_retention(retention));
        }
        if cursor.skipped() > skipped {
            add(&counters.archive_missed_chunks, cursor.skipped() - skipped);
            skipped = cursor.skipped();
        }
        if last_seal.elapsed() >= seal_every {
            ingestor.seal()?;
            add(&counters.seals, 1);
            last_seal = Instant::now();
            last_publish = last_seal;
        } else if publish && last_publish.elapsed() >= PUBLISH_EVERY {
            ingestor.publish()?;
            last_publish = Instant::now();
        }
    }
    ingestor.finish()?;
    Ok((archived, cursor.skipped()))
}

/// The analyzer: triggers, each followed by its dump.
fn analyze(
    mut analyzer: Analyzer,
    dumper: &Dumper,
    trigger: &TriggerConfig,
) -> Result<Analyzed, LiveError> {
    let mut dumps = Vec::new();
    let mut unrenderable = 0u64;
    let (mut suppressed, mut missed) = (0, 0);
    loop {
        let hit = analyzer.next_trigger(Duration::from_millis(200));
        let counters = &dumper.counters;
        add(
            &counters.triggers_suppressed,
            analyzer.suppressed() - suppressed,
        );
        add(
            &counters.trigger_missed_chunks,
            analyzer.missed_chunks() - missed,
        );
        (suppressed, missed) = (analyzer.suppressed(), analyzer.missed_chunks());
        let hit = match hit {
            Ok(Some(hit)) => hit,
            Ok(None) => continue,
            Err(_) => break,
        };
        // A trigger packet without a field the template names (an ARP packet for
        // `host $src`) gives no dump; the recording goes on.
        let Ok(filter) = trigger.dump.render(&hit.headers) else {
            unrenderable += 1;
            add(&dumper.counters.triggers_without_dump, 1);
            continue;
        };
        let label = hit
            .headers
            .src_addr
            .map_or_else(|| "nonip".to_owned(), |a| a.to_string().replace(':', "_"));
        let filter = filter.with_community_seed(trigger.filter.community_seed());
        dumps.push(dumper.dump(filter, hit.ts_ns, trigger.before, trigger.after, &label)?);
    }
    Ok((
        dumps,
        analyzer.suppressed(),
        unrenderable,
        analyzer.missed_chunks(),
    ))
}

/// The most characters of a dump's label kept in its file name.
pub const MAX_LABEL_CHARS: usize = 64;

/// Writes dumps of the ring's window around a time: the analyzer's, and those
/// requested from outside (`POST /api/v1/triggers`). Cheap to clone.
#[derive(Clone, Debug)]
pub struct Dumper {
    ring: Ring,
    link_type: LinkType,
    config: DumpConfig,
    counters: Arc<LiveCounters>,
    /// The number of the next dump's name ([`Self::new_name`]).
    names: Arc<std::sync::atomic::AtomicU64>,
}

impl Dumper {
    /// The directory of the dumps.
    pub fn dir(&self) -> &Path {
        &self.config.dir
    }

    /// A name for a new dump of `at_ns` labelled `label`:
    /// `dump-<ns>-<n>-<label>.pcap`, where `n` makes it unique in the
    /// directory (two dumps of one time and label, a watch's rows of one
    /// window, get two files) and `label` is cut to [`MAX_LABEL_CHARS`] of
    /// `[A-Za-z0-9_-]` (anything else becomes `_`, so no name leaves the
    /// directory or holds `..`). Times before 1970 are refused: their names
    /// would be neither listed nor pruned.
    pub fn new_name(&self, at_ns: i64, label: &str) -> Result<String, LiveError> {
        if at_ns < 0 {
            return Err(LiveError::DumpTime { at_ns });
        }
        let label: String = label
            .chars()
            .take(MAX_LABEL_CHARS)
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        loop {
            let n = self
                .names
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let name = format!("dump-{at_ns}-{n}-{label}.pcap");
            let path = self.config.dir.join(&name);
            let part = path.with_extension("pcap.part");
            // Numbers restart with the process; files of an earlier run stay.
            if !path.exists() && !part.exists() {
                return Ok(name);
            }
        }
    }

    /// The trigger time of a finished dump named by [`Self::new_name`]; `None`
    /// for any other name (a `.part` being written among them).
    pub fn time_of(name: &str) -> Option<i64> {
        let (at, _label) = name
            .strip_prefix("dump-")?
            .strip_suffix(".pcap")?
            .split_once('-')?;
        at.parse().ok()
    }

    /// Writes the packets of `[at − before, at + after]` matching `filter` to
    /// `dump-<at_ns>-<n>-<label>.pcap` in the dump directory, waiting for the window's
    /// end to be captured; then deletes the oldest dumps beyond the total bound.
    pub fn dump(
        &self,
        filter: Filter,
        at_ns: i64,
        before: Duration,
        after: Duration,
        label: &str,
    ) -> Result<DumpReport, LiveError> {
        let name = self.new_name(at_ns, label)?;
        self.dump_as(filter, at_ns, before, after, &name)
    }

    /// As [`Self::dump`], into the file `name` had from [`Self::new_name`].
    pub fn dump_as(
        &self,
        filter: Filter,
        at_ns: i64,
        before: Duration,
        after: Duration,
        name: &str,
    ) -> Result<DumpReport, LiveError> {
        let request = DumpRequest {
            at_ns,
            before,
            after,
            filter,
            link_type: self.link_type,
        };
        let limits = DumpLimits {
            max_bytes: self.config.max_dump_bytes,
            max_wait: after + self.ring.config().max_hold * 4 + Duration::from_secs(1),
        };
        let path = self.config.dir.join(name);
        let report = dump(&self.ring, &request, &path, limits)?;
        add(&self.counters.dumps, 1);
        if self.config.max_total_bytes > 0 {
            prune_dumps(&self.config.dir, self.config.max_total_bytes, &path);
        }
        Ok(report)
    }
}

/// Deletes the oldest dumps (`*.pcap`, by name: the trigger time leads it) of `dir`
/// until the rest hold at most `max_total` bytes; never `newest`, the one just
/// written. Errors leave the files: the next dump tries again.
fn prune_dumps(dir: &Path, max_total: u64, newest: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut dumps: Vec<(i64, PathBuf, u64)> = entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let at = Dumper::time_of(entry.file_name().to_str()?)?;
            Some((at, entry.path(), entry.metadata().ok()?.len()))
        })
        .collect();
    dumps.sort();
    let mut total: u64 = dumps.iter().map(|d| d.2).sum();
    for (_, path, size) in dumps {
        if total <= max_total {
            break;
        }
        if path != newest && std::fs::remove_file(&path).is_ok() {
            total -= size;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dumper(dir: &Path) -> Dumper {
        Dumper {
            ring: Ring::new(RingConfig {
                chunk_bytes: 64 << 10,
                chunks: 2,
                max_hold: Duration::from_millis(50),
            })
            .unwrap(),
            link_type: LinkType(1),
            config: DumpConfig {
                dir: dir.to_owned(),
                max_dump_bytes: 1 << 20,
                max_total_bytes: 0,
            },
            counters: Arc::default(),
            names: Arc::default(),
        }
    }

    #[test]
    fn dump_names_are_unique_short_inside_their_directory_and_after_1970() {
        let dir = std::env::temp_dir().join(format!("hindsight-dump-names-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let first = dumper(&dir);
        // The rows of one window with one label (a watch's): a file each,
        // where six dumps once made three files.
        let names: Vec<String> = (0..6)
            .map(|_| first.new_name(1_000, "scans-10.0.0.1").unwrap())
            .collect();
        let distinct: std::collections::BTreeSet<&String> = names.iter().collect();
        assert_eq!(distinct.len(), names.len(), "{names:?}");
        for name in &names {
            assert_eq!(Dumper::time_of(name), Some(1_000), "{name}");
            assert!(name.ends_with("-scans-10_0_0_1.pcap"), "{name}");
        }
        // Numbers restart with the process: a file of an earlier run is not
        // taken again.
        std::fs::write(dir.join(&names[0]), b"").unwrap();
        let again = dumper(&dir).new_name(1_000, "scans-10.0.0.1").unwrap();
        assert_ne!(again, names[0]);
        // A 300-character label is cut (it failed with "File name too long").
        let long = first.new_name(1_000, &"x".repeat(300)).unwrap();
        assert!(
            long.ends_with(&format!("-{}.pcap", "x".repeat(MAX_LABEL_CHARS))),
            "{long}"
        );
        assert!(!long.contains(&"x".repeat(MAX_LABEL_CHARS + 1)), "{long}");
        // No name leaves the directory or hides behind `..`.
        let sneaky = first.new_name(1_000, "../../etc/passwd").unwrap();
        assert!(!sneaky.contains('/') && !sneaky.contains(".."), "{sneaky}");
        assert_eq!(Dumper::time_of(&sneaky), Some(1_000));
        // Before 1970 no name holds the time (it was written, never listed
        // nor pruned): refused.
        assert!(matches!(
            first.new_name(-10_000_000_000, "request"),
            Err(LiveError::DumpTime {
                at_ns: -10_000_000_000
            })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
