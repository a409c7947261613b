//! The role of the serve crate is `hindsight serve --config hindsight.toml`, the
//! long-running flight recorder.
//! Live capture into the ring (optional), archived behind it with flows,
//! retention and triggers (see `hindsight_live`), and the HTTP API and web UI
//! over the archive (see [`api`]), until SIGTERM or SIGINT: then the API stops
//! taking requests, the ring drains into the archive, and the archive seals.
//! SIGHUP reloads what can change without stopping the capture (`reload`).
//!
//! A SIGKILL loses only what was not sealed: the next start recovers the archive
//! as `ingest` does (temporary files removed, every catalogued segment intact).

pub mod admission;
pub mod api;
pub mod cluster;
mod config;
pub mod listen;
mod metrics;
mod reload;
mod watches;
pub mod worker;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use hindsight_filter::Filter;
use hindsight_live::{DumpConfig, RecordConfig, Recorder, TriggerConfig};
use hindsight_output::human_bytes;
use hindsight_reader::Reader;
use hindsight_ring::RingConfig;
use hindsight_store::archive::Serving;
use hindsight_trigger::DumpTemplate;
use tokio::sync::Semaphore;

use self::api::{AppState, Live};
pub use self::config::ServeConfig;
use self::config::seconds;

/// What the command line gives `serve`.
#[derive(Debug, Default)]
pub struct Options {
    /// The configuration file (see docs/serve.md); without it, serve answers
    /// queries over `archive` and captures nothing.
    pub config: Option<PathBuf>,
    /// The archive directory (overrides the file's `archive`).
    pub archive: Option<PathBuf>,
    /// Address to listen on (overrides `[api] listen`).
    pub listen: Option<std::net::SocketAddr>,
    /// Listen beyond loopback without a token.
    pub insecure_no_token: bool,
    /// Run as a statement worker of a server (see [`worker`]) within this
    /// many MiB, not as one.
    pub statement_worker: Option<usize>,
    /// A statement worker's parsed footers kept between statements, MiB.
    pub footer_cache_mib: usize,
}

/// How often the reader looks for sealed or expired segments when no request
/// asks (so that the metrics, which read what the reader holds, stay fresh).
const REFRESH: Duration = Duration::from_secs(1);

/// How long, after SIGTERM, requests in flight may take before the archive is
/// sealed regardless.
const DRAIN_REQUESTS: Duration = Duration::from_secs(10);

/// Runs `hindsight serve` until SIGTERM or SIGINT.
pub fn run(args: Options) -> Result<()> {
    if let Some(memory_mib) = args.statement_worker {
        return worker::serve_statements(&worker::WorkerOptions {
            archive: args.archive.clone().unwrap_or_default(),
            memory_mib,
            footer_cache_mib: args.footer_cache_mib,
            config: args.config.clone(),
        });
    }
    let overrides = reload::Overrides {
        archive: args.archive.clone(),
        listen: args.listen,
    };
    let (config, serve_table) = reload::load(args.config.as_deref(), &overrides)?;
    let root = config.archive.clone().context(
        "no archive: give --archive DIR or `archive = \"DIR\"` in the configuration file",
    )?;
    let dumps_dir = config
        .dumps
        .dir
        .clone()
        .unwrap_or_else(|| root.join("dumps"));
    let token = std::env::var("HINDSIGHT_API_TOKEN")
        .ok()
        .filter(|t| !t.is_empty())
        .or(config.api.token.clone());
    if let Some(token) = &token {
        config::check_token("the API token", token)?;
    }
    // Every statement's operators reserve from one budget: the API's, the
    // cluster's fragments and the watches' windows together.
    hindsight_sql::budget::set_process_memory(Some(config.api.total_memory_bytes()));
    // And the process as a whole: past its resident bound, the statements
    // running are cancelled, never the capture.
    hindsight_sql::budget::set_process_resident(Some(config.resident_bytes()));
    let cluster_config = cluster::load(
        config.cluster.clone(),
        args.config.as_deref().and_then(std::path::Path::parent),
    )?;
    let listen = config.api.listen;
    // A node of a cluster takes the cluster's token on every route.
    if token.is_none() && cluster_config.is_none() && !listen.ip().is_loopback() {
        if !args.insecure_no_token {
            bail!(
                "refusing to listen on {listen} without a token: every address beyond \
                 loopback needs one (set [api] token or HINDSIGHT_API_TOKEN, or put an \
                 authenticating proxy in front and give --insecure-no-token)"
            );
        }
        log::warn!(
            "listening on {listen} without a token \
             (--insecure-no-token): anyone who reaches it can read the archive"
        );
    }

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(std::thread::available_parallelism().map_or(1, usize::from))
        .thread_name("http")
        // Its blocking threads plan and run SQL (see `hindsight_sql::MAX_LINKS`).
        .thread_stack_size(hindsight_sql::STACK_BYTES)
        .enable_all()
        .build()
        .context("cannot start the HTTP runtime")?;
    // Caught from here on (its default action ends the process): one that
    // comes before the reloader runs waits for it.
    let hangups = {
        let _entered = runtime.enter();
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok()
    };
    // Listen first: a taken port fails before anything is captured.
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind(config.api.listen))
        .with_context(|| format!("cannot listen on {}", config.api.listen))?;
    let address = listener
        .local_addr()
        .context("cannot read the listening address")?;

    let recorder = match &config.capture {
        Some(capture) => Some(start_capture(&config, capture, &root, &dumps_dir)?),
        None => None,
    };
    // Opened once, after the recorder has created the archive if it was new.
    let mut reader =
        Reader::open(&root)?.with_footer_cache_bytes(config.api.footer_cache_mib << 20);
    if let Some(tail) = recorder.as_ref().and_then(|(recorder, _)| recorder.tail()) {
        // Packets and connections answered before their segment seals.
        reader = reader.with_tail(tail);
    }
    // Counted before the first scrape (see `api::refresh`).
    reader.held().disk_bytes();
    let reader = Arc::new(reader);
    if recorder.is_some() {
        // The command-line tools find this process here and ask it, so that
        // they see the unsealed tail too.
        let host = match address.ip() {
            ip if ip.is_unspecified() && ip.is_ipv4() => std::net::Ipv4Addr::LOCALHOST.into(),
            ip if ip.is_unspecified() => std::net::Ipv6Addr::LOCALHOST.into(),
            ip => ip,
        };
        let serving = Serving {
            pid: std::process::id(),
            url: format!("http://{}", std::net::SocketAddr::new(host, address.port())),
        };
        if let Err(error) = serving.write(&root) {
            log::warn!(
                "cannot write {}: {error}; the command-line tools will \
                 read the sealed segments only",
                root.join(hindsight_store::archive::SERVING_FILE).display()
            );
        }
    }
    let workers = if config.api.statement_workers {
        // This very binary, even once a package upgrade has replaced its
        // file: a worker speaks the protocol of the server that starts it.
        let exe = match std::path::Path::new("/proc/self/exe") {
            own if own.exists() => own.to_path_buf(),
            _ => std::env::current_exe().context("cannot find this program to run workers")?,
        };
        Some(Arc::new(worker::Workers::new(
            exe,
            &root,
            args.config.as_deref(),
            config.worker_memory_mib(),
            config.api.footer_cache_mib,
        )))
    } else {
        None
    };
    let hub = match &recorder {
        Some((recorder, _)) => Some(Arc::new(start_watches(
            &config,
            recorder,
            &reader,
            workers.as_ref(),
        )?)),
        None => None,
    };
    let live = recorder.as_ref().map(|(recorder, interface)| Live {
        interface: interface.clone(),
        counters: recorder.counters(),
        ring: recorder.ring().clone(),
        dumper: recorder.dumper(),
    });
    let dumps_dir_listed = dumps_dir.clone();
    // The archive's questions, each within the API's rows and time.
    let archive = hindsight_service::Snapshots::new(
        Arc::clone(&reader),
        hindsight_reader::Limits {
            max_rows: Some(config.api.max_rows),
            timeout: Some(Duration::from_secs(config.api.timeout_secs)),
            ..Default::default()
        },
    );
    let max_rows = config.api.max_rows;
    let state = Arc::new(AppState {
        reader,
        archive: archive.clone(),
        dumps_dir,
        token,
        limits: std::sync::RwLock::new(config.api.limits()),
        live,
        started: Instant::now(),
        admission: admission::Admission::new(
            config.api.max_concurrent,
            config.api.max_scans,
            config.api.max_queued,
            Duration::from_secs(config.api.timeout_secs),
            config.api.cheap_rows,
        ),
        dump_requests: Arc::new(Semaphore::new(api::MAX_DUMP_REQUESTS)),
        dump_requests_made: AtomicU64::new(0),
        responses: Default::default(),
        archive_rate: AtomicU64::new(0),
        dumps_seen: std::sync::Mutex::new(api::list_dumps(&dumps_dir_listed)),
        hub: hub.clone(),
        max_window_rows: config.watches.max_window_rows,
        window_timeout: Duration::from_secs(config.watches.window_timeout_secs),
        cluster: cluster_config
            .map(|cluster| cluster::ClusterState::new(cluster, archive, max_rows)),
        requests: std::sync::Mutex::default(),
        connections: Arc::default(),
        allowed_hosts: std::sync::RwLock::new(config.api.allowed_hosts.clone()),
        workers,
    });
    let syncing = state
        .cluster
        .as_ref()
        .and_then(|c| c.start_sync(Arc::clone(&state.reader), state.live.is_some()));
    let stop_sync = state.cluster.as_ref().map(|c| Arc::clone(&c.stop));
    let stop_copying = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let copying = start_copying(Arc::clone(&state.reader), Arc::clone(&stop_copying));
    let reader_at_end = Arc::clone(&state.reader);
    log::info!(
        "archive {}, {}; {}; listening on http://{address}",
        root.display(),
        match &recorder {
            Some((recorder, interface)) => format!(
                "capturing on {interface} (link type {})",
                recorder.link_type().0
            ),
            None => "no capture".to_owned(),
        },
        match (&state.token, &state.cluster) {
            (_, Some(cluster)) => format!(
                "node {} of a cluster of {} (index nodes {}), API needs a bearer token",
                cluster
                    .client
                    .config()
                    .name
                    .as_deref()
                    .unwrap_or("(unnamed)"),
                cluster.client.config().nodes.len(),
                cluster.client.config().index.join(", ")
            ),
            (Some(_), None) => "API needs the bearer token".to_owned(),
            (None, None) => "API without a token".to_owned(),
        }
    );
    let reloader = reload::Reloader::new(
        args.config.clone(),
        overrides,
        &root,
        serve_table,
        recorder
            .as_ref()
            .map(|(recorder, _)| recorder.retention_control()),
    )?;
    let app = api::router(Arc::clone(&state));
    let connections = Arc::clone(&state.connections);
    let connection_limits = listen::ConnectionLimits {
        max_connections: config.api.max_connections,
        max_per_client: config.api.max_connections_per_client,
        header_timeout: Duration::from_secs(config.api.header_timeout_secs),
    };
    let archiver_counters = recorder.as_ref().map(|(recorder, _)| recorder.counters());
    runtime.block_on(async move {
        let sampler = tokio::spawn(api::sample_rates(
            Arc::clone(&state),
            Duration::from_secs(5),
        ));
        let refresher = tokio::spawn(api::refresh(Arc::clone(&state), REFRESH));
        let reloading = tokio::spawn(reload::on_sighup(Arc::clone(&state), reloader, hangups));
        let (stopping, stop) = tokio::sync::watch::channel(false);
        let server = listen::serve(listener, app, connection_limits, connections, stop);
        let mut server = std::pin::pin!(server);
        tokio::select! {
            () = &mut server => {}
            name = shutdown_signal() => {
                log::info!("{name}: stopping");
                let _ = stopping.send(true);
                // Requests in flight get a bound, then the archive seals anyway.
                let _ = tokio::time::timeout(DRAIN_REQUESTS, server).await;
            }
            () = archiver_failed(archiver_counters) => {
                log::warn!("the archiver stopped on an error: stopping");
                let _ = stopping.send(true);
                // Requests in flight get a bound, then the archive seals anyway.
                let _ = tokio::time::timeout(DRAIN_REQUESTS, server).await;
            }
        };
        sampler.abort();
        refresher.abort();
        reloading.abort();
    });
    Serving::remove(&root);
    if let Some(stop) = stop_sync {
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
    if let Some(syncing) = syncing {
        let _ = syncing.join();
    }
    stop_copying.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = copying.join();
    // The watches stop before the capture: their last windows are answered.
    if let Some(hub) = hub.and_then(|hub| Arc::try_unwrap(hub).ok()) {
        hub.stop();
    }
    // The archive seals whether or not the server ended well.
    if let Some((recorder, _)) = recorder {
        let counters = recorder.counters();
        let summary = recorder.stop()?;
        log::info!(
            "captured {} packets ({} dropped by the kernel, {} by the \
             interface); archived {} ({} ring chunks missed; {} missed by the trigger \
             analyzer); {} dump(s); archive sealed",
            summary.captured,
            summary.kernel_dropped,
            summary.interface_dropped,
            summary.archived,
            summary.archive_missed_chunks,
            summary.trigger_missed_chunks,
            counters.dumps.load(std::sync::atomic::Ordering::Relaxed),
        );
    }
    // The last segments sealed go to the object store too.
    copy_segments(&reader_at_end, &mut Said::default());
    Ok(())
}

/// How often sealed segments are copied to the archive's object store.
const COPY_EVERY: Duration = Duration::from_secs(5);

/// How often a lasting copy failure is said again.
const SAY_AGAIN_EVERY: Duration = Duration::from_secs(600);

/// The thread that copies sealed segments to the archive's object store
/// (`[archive] object_store`) every [`COPY_EVERY`], until `stop`.
fn start_copying(
    reader: Arc<hindsight_reader::Reader>,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut said = Said::default();
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            copy_segments(&reader, &mut said);
            let until = Instant::now() + COPY_EVERY;
            while Instant::now() < until && !stop.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    })
}

/// What the copy thread has said: a store that stays down, or a segment
/// that stays uncopyable, is said when it starts (and a failure again every
/// [`SAY_AGAIN_EVERY`]), not every round.
#[derive(Debug, Default)]
struct Said {
    /// Since when copies fail, and when that was last said.
    failing: Option<Instant>,
    /// The problems said.
    problems: std::collections::BTreeSet<String>,
}

impl Said {
    /// A round failed at `now`: whether to say it.
    fn failed(&mut self, now: Instant) -> bool {
        match self.failing {
            Some(said) if now.duration_since(said) < SAY_AGAIN_EVERY => false,
            _ => {
                self.failing = Some(now);
                true
            }
        }
    }

    /// A round succeeded: whether copies had been failing.
    fn resumed(&mut self) -> bool {
        self.failing.take().is_some()
    }

    /// The problems of a round that are new since the last round.
    fn new_problems(&mut self, problems: Vec<String>) -> Vec<String> {
        let new = problems
            .iter()
            .filter(|p| !self.problems.contains(*p))
            .cloned()
            .collect();
        self.problems = problems.into_iter().collect();
        new
    }
}

/// Copies the sealed segments not yet copied, if the archive has an object
/// store; says on stderr what it copied and what failed.
fn copy_segments(reader: &hindsight_reader::Reader, said: &mut Said) {
    let Ok(snapshot) = reader.snapshot() else {
        return;
    };
    let Some(settings) = snapshot.settings().objects.clone() else {
        return;
    };
    match hindsight_sql::objects::copy_archive(reader.root(), &settings) {
        Ok((copied, line)) => {
            if said.resumed() {
                log::info!("copies to {} resumed", settings.url);
            }
            if copied.segments > 0 || copied.local_removed > 0 {
                log::info!("{line}");
            }
            for problem in said.new_problems(copied.problems) {
                log::warn!("{problem}");
            }
        }
        Err(error) => {
            if said.failed(Instant::now()) {
                log::warn!(
                    "cannot copy segments to {}: {error} (tried again every {} s, said again every {} s)",
                    settings.url,
                    COPY_EVERY.as_secs(),
                    SAY_AGAIN_EVERY.as_secs()
                );
            }
        }
    }
}

/// Returns once the recorder's archiver has stopped on an error (never
/// without a recorder).
async fn archiver_failed(counters: Option<Arc<hindsight_live::LiveCounters>>) {
    let Some(counters) = counters else {
        return std::future::pending().await;
    };
    while !counters
        .archiver_failed
        .load(std::sync::atomic::Ordering::Relaxed)
    {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits for SIGTERM or SIGINT and returns its name.
async fn shutdown_signal() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        // Without signal handlers, serve runs until it is killed.
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    }
}

/// Starts the watches of `config` on the recorder's ring: one thread feeds
/// them, their history comes from `reader` (a newer session whenever the
/// archive changed).
fn start_watches(
    config: &ServeConfig,
    recorder: &Recorder,
    reader: &Arc<Reader>,
    workers: Option<&Arc<worker::Workers>>,
) -> Result<hindsight_watch::hub::Hub> {
    let limits = hindsight_reader::Limits {
        memory_bytes: Some(config.api.max_memory_mib.saturating_mul(1 << 20)),
        ..Default::default()
    };
    let snapshot = reader.snapshot()?;
    let session = snapshot.sql(&limits)?;
    let watches = config
        .watch
        .iter()
        .map(|section| section.watch(&config.watches))
        .collect::<Result<Vec<_>>>()?;
    let analysing = watches.iter().find(|w| w.analysis.is_some());
    if let Some(refusal) = watches::without_home(&snapshot, analysing.map(|w| w.spec.name.as_str()))
    {
        bail!(refusal);
    }
    let mut watcher =
        hindsight_watch::Watcher::dynamic(session, hindsight_flow::FlowTableConfig::default())?;
    if let Some(workers) = workers {
        // Windows run in statement workers; the session here only plans.
        watcher = watcher.with_runner(Arc::new(worker::Windows {
            workers: Arc::clone(workers),
            reader: Arc::clone(reader),
            memory_bytes: limits.memory_bytes,
        }));
    }
    let sessions_reader = Arc::clone(reader);
    let mut last = snapshot;
    let sessions: hindsight_watch::hub::Sessions = Box::new(move || {
        let snapshot = sessions_reader.snapshot().ok()?;
        if Arc::ptr_eq(&snapshot, &last) {
            return None;
        }
        last = Arc::clone(&snapshot);
        snapshot.sql(&limits).ok()
    });
    let names: Vec<String> = watches.iter().map(|w| w.spec.name.clone()).collect();
    let hub = hindsight_watch::hub::Hub::start(
        hindsight_watch::hub::Feed {
            ring: recorder.ring().clone(),
            link_type: recorder.link_type(),
            dumper: Some(recorder.dumper()),
        },
        watcher,
        sessions,
        hindsight_watch::hub::Retention {
            keep: Duration::from_secs(config.watches.keep_secs),
            max_rows: config.watches.max_rows_kept,
            max_watches: config.watches.max_watches,
        },
        watches,
    )?;
    if !names.is_empty() {
        log::info!("watching {}", names.join(", "));
    }
    Ok(hub)
}

/// Opens the archive for writing and starts capturing on the configured interface.
fn start_capture(
    config: &ServeConfig,
    capture: &config::CaptureSection,
    root: &std::path::Path,
    dumps_dir: &std::path::Path,
) -> Result<(Recorder, String)> {
    let trigger = match &config.trigger {
        Some(section) => Some(TriggerConfig {
            filter: Filter::parse(&section.filter)
                .map_err(|e| anyhow::anyhow!("[trigger] filter: {e}"))
                .and_then(|filter| match filter.packet_only_problem() {
                    Some(problem) => Err(anyhow::anyhow!("[trigger] filter: {problem}")),
                    None => Ok(filter),
                })?,
            dump: DumpTemplate::new(&section.dump)
                .map_err(|e| anyhow::anyhow!("[trigger] dump: {e}"))?,
            before: seconds("[trigger] before_secs", section.before_secs)?,
            after: seconds("[trigger] after_secs", section.after_secs)?,
        }),
        None => None,
    };
    let record = RecordConfig {
        interface: capture.interface.clone(),
        snaplen: capture.snaplen,
        kernel_buffer: capture.kernel_buffer_mib.saturating_mul(1 << 20),
        fanout: capture.fanout,
        ring: RingConfig::with_memory(capture.ring_mib << 20),
        seal_every: Duration::from_secs(capture.seal_secs),
        tail_bytes: capture.tail_mib.saturating_mul(1 << 20),
        trigger,
        dumps: DumpConfig {
            dir: dumps_dir.to_owned(),
            max_dump_bytes: config.dumps.max_dump_mib << 20,
            max_total_bytes: config.dumps.max_total_mib << 20,
        },
    };
    // The dump directory always: requests may dump without a trigger.
    let (recorder, opened) = Recorder::open(root, record, true)
        .with_context(|| format!("cannot record into {}", root.display()))?;
    let recovery = &opened.recovery;
    if !recovery.temp_files_removed.is_empty() || !opened.reindexed.is_empty() {
        log::info!(
            "recovered the archive: {} unsealed temporary file(s) removed, \
             {} segment(s) re-indexed",
            recovery.temp_files_removed.len(),
            opened.reindexed.len()
        );
    }
    log::info!("ring {}", human_bytes((capture.ring_mib as u64) << 20));
    Ok((recorder, capture.interface.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lasting_copy_failure_is_said_once_then_every_ten_minutes() {
        let mut said = Said::default();
        let start = Instant::now();
        let at = |secs| start + Duration::from_secs(secs);
        let told: Vec<u64> = (0..300)
            .map(|round| round * COPY_EVERY.as_secs())
            .filter(|&secs| said.failed(at(secs)))
            .collect();
        assert_eq!(told, [0, 600, 1200]);
        assert!(said.resumed());
        assert!(!said.resumed());
        assert!(said.failed(at(1500)));
        let problems = |list: &[&str]| list.iter().map(|p| (*p).to_owned()).collect::<Vec<_>>();
        assert_eq!(said.new_problems(problems(&["a", "b"])), ["a", "b"]);
        assert!(said.new_problems(problems(&["a", "b"])).is_empty());
        assert_eq!(said.new_problems(problems(&["b", "c"])), ["c"]);
        // One that went away and came back is said again.
        assert_eq!(said.new_problems(problems(&["a", "b", "c"])), ["a"]);
    }
}
