//! `hindsight.toml`, the configuration of `hindsight serve`:
//!
//! ```toml
//! archive = "/var/lib/hindsight"   # relative paths are relative to this file
//!
//! [capture]                        # optional: without it, serve answers queries only
//! interface = "eth0"
//! snaplen = 262144                 # bytes captured per packet into the ring
//! kernel_buffer_mib = 64
//! ring_mib = 256                   # memory of the capture ring, 2 MiB chunks
//! seal_secs = 60                   # how often the archive is sealed (made durable)
//! tail_mib = 256                   # unsealed packets kept in memory for queries; the
//!                                  # open segment seals early when they reach it
//! fanout = 1                       # capture threads (AF_PACKET fanout by flow hash)
//!
//! [trigger]                        # optional, needs [capture]
//! filter = "tcp.flags.syn == 1 && tcp.dstport == 23"
//! dump = "host $src"
//! before_secs = 10
//! after_secs = 5
//!
//! [dumps]
//! dir = "dumps"                    # default: ARCHIVE/dumps
//! max_dump_mib = 256               # one dump
//! max_total_mib = 4096             # all dumps; the oldest go first (0: no bound)
//!
//! [[watch]]                        # optional, needs [capture]; as many as wanted
//! name = "scans"
//! analysis = "portscan"            # or sql = "SELECT ... FROM live_packets ..."
//! window = "10s"
//! params = { min_fanout = 100 }
//! dump = "host $src"               # a pcap of the ring for each row ($column from the row)
//! dump_before = "30s"              # default: the window
//! dump_after = "0s"
//! webhook = "http://127.0.0.1:9000/alerts"   # POST each row as JSON
//! alert_log = "alerts.jsonl"       # append each row as a JSON line
//!
//! [watches]
//! keep_secs = 3600                 # answers kept for the API and the web UI
//! max_rows_kept = 10000            # per watch
//! max_watches = 32                 # with those added through the API
//! max_window_rows = 4000000        # most rows a watch's window may hold
//! window_timeout_secs = 60         # longest a window's statement runs
//!
//! [api]
//! listen = "127.0.0.1:8080"
//! token = "..."                    # or HINDSIGHT_API_TOKEN, 16 characters at least; none: loopback only
//! max_body_bytes = 65536
//! max_rows = 1000000
//! timeout_secs = 60
//! max_concurrent = 4               # cheap requests running at once (index lookups, small windows)
//! max_scans = 2                    # scans running at once (histograms, SQL, broad filters)
//! max_queued = 64                  # per class, waiting for a slot; more get 503 with Retry-After
//! cheap_rows = 1048576             # rows a request may decode and still be cheap
//! max_memory_mib = 1024            # memory of one SQL statement's sorts, joins, aggregations
//! max_total_memory_mib = 3072      # of every statement at once, watches' too (default:
//!                                  # max_memory_mib * (max_scans + 1))
//! max_resident_mib = 4608          # the server's anonymous resident memory: past it the
//!                                  # statements running are cancelled (default:
//!                                  # max_total_memory_mib + ring_mib + tail_mib + 1024)
//! footer_cache_mib = 64            # parsed segment footers kept between queries (0: none)
//! statement_workers = true         # statements, peers' fragments and watches' windows run in
//!                                  # worker processes, each under a kernel memory limit
//! worker_memory_mib = 3136         # that limit (default: max_memory_mib + 2 * tail_mib
//!                                  # + footer_cache_mib + 1536)
//! max_connections = 512            # connections open at once; past it 503 and close
//! max_connections_per_client = 128 # from one client address
//! header_timeout_secs = 10         # a request head must arrive within this
//! allowed_hosts = []               # Host names answered without a token, besides loopback's
//!
//! [cluster]                        # optional: this server is a node of a cluster
//! name = "gateway"                 # docs/cluster.md
//! token = "..."                    # shared by the nodes and clients: asks questions
//! node_token_file = "node.token"   # this node's own secret (`hindsight cluster token`)
//! index = ["gateway"]
//! [[cluster.node]]
//! name = "gateway"
//! url = "http://127.0.0.1:8080"
//! token_sha256 = "..."             # SHA-256 of the node's own token
//! ```
//!
//! The archive's own bounds (connection-index expiration, packet retention) are
//! in `ARCHIVE/config.toml`, read by every command that writes the archive and
//! by the reader.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde::Deserialize;

/// The whole file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServeConfig {
    /// The archive directory.
    pub archive: Option<PathBuf>,
    /// Live capture, if any.
    pub capture: Option<CaptureSection>,
    /// The trigger, if any.
    pub trigger: Option<TriggerSection>,
    /// Dumps.
    #[serde(default)]
    pub dumps: DumpsSection,
    /// The HTTP API.
    #[serde(default)]
    pub api: ApiSection,
    /// Continuous queries over the live capture.
    #[serde(default)]
    pub watch: Vec<WatchSection>,
    /// Bounds of the watches.
    #[serde(default)]
    pub watches: WatchesSection,
    /// The cluster this node belongs to (`hindsight_cluster::ClusterConfig`).
    pub cluster: Option<toml::Value>,
}

/// `[[watch]]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WatchSection {
    /// Its name.
    pub name: String,
    /// Its statement, unless `analysis`.
    pub sql: Option<String>,
    /// A built-in analysis, unless `sql`.
    pub analysis: Option<String>,
    /// Window length (a slide, for dispersion).
    #[serde(default = "default_window")]
    pub window: String,
    /// Slide (not with an analysis).
    pub slide: Option<String>,
    /// Named parameters.
    #[serde(default)]
    pub params: std::collections::BTreeMap<String, toml::Value>,
    /// Most rows one window holds.
    pub max_window_rows: Option<usize>,
    /// Dump filter template.
    pub dump: Option<String>,
    /// How far back a dump reaches from the end of the window.
    pub dump_before: Option<String>,
    /// How far on after it.
    pub dump_after: Option<String>,
    /// URL each row is POSTed to.
    pub webhook: Option<String>,
    /// File each row is appended to.
    pub alert_log: Option<PathBuf>,
}

/// `[watches]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WatchesSection {
    /// How long answers are kept, seconds.
    pub keep_secs: u64,
    /// Rows kept per watch.
    pub max_rows_kept: usize,
    /// Most watches at once.
    pub max_watches: usize,
    /// Most rows a watch's window may hold.
    pub max_window_rows: usize,
    /// Longest a watch's window may run, seconds.
    pub window_timeout_secs: u64,
}

impl Default for WatchesSection {
    fn default() -> Self {
        Self {
            keep_secs: 3600,
            max_rows_kept: 10_000,
            max_watches: 32,
            max_window_rows: 4_000_000,
            window_timeout_secs: hindsight_watch::WINDOW_TIMEOUT.as_secs(),
        }
    }
}

fn default_window() -> String {
    "10s".to_owned()
}

/// A duration written `10s`, `5m`, or `0s`, or an error naming `name`.
pub fn duration(name: &str, text: &str) -> Result<Duration> {
    hindsight_output::time::parse_span(text).with_context(|| name.to_owned())
}

impl WatchSection {
    /// The watch this section asks for, checked as far as it can be without
    /// an archive (the statement is planned when the server starts it).
    pub fn watch(&self, limits: &WatchesSection) -> Result<hindsight_watch::hub::HubWatch> {
        use hindsight_watch::hub::{Actions, DumpAction, HubWatch, RowTemplate};
        let at = format!("[[watch]] {}", self.name);
        let params = self
            .params
            .iter()
            .map(|(name, value)| {
                let text = match value {
                    toml::Value::String(text) => text.clone(),
                    other => other.to_string(),
                };
                (name.clone(), text)
            })
            .collect();
        let request = hindsight_watch::request::WatchRequest {
            name: self.name.clone(),
            sql: self.sql.clone(),
            analysis: self.analysis.clone(),
            window: duration(&format!("{at}: window"), &self.window)?,
            slide: self
                .slide
                .as_deref()
                .map(|slide| duration(&format!("{at}: slide"), slide))
                .transpose()?,
            params,
            max_window_rows: Some(self.max_window_rows.unwrap_or(limits.max_window_rows)),
            window_timeout: Some(Duration::from_secs(limits.window_timeout_secs)),
        };
        if request.max_window_rows > Some(limits.max_window_rows) {
            bail!(
                "{at}: max_window_rows is above [watches] max_window_rows ({})",
                limits.max_window_rows
            );
        }
        let (spec, analysis) = request.spec().map_err(|e| anyhow::anyhow!("{at}: {e}"))?;
        let dump = match &self.dump {
            Some(text) => Some(DumpAction {
                filter: RowTemplate::new(text).map_err(|e| anyhow::anyhow!("{at}: dump: {e}"))?,
                before: self
                    .dump_before
                    .as_deref()
                    .map(|t| duration(&format!("{at}: dump_before"), t))
                    .transpose()?,
                after: self
                    .dump_after
                    .as_deref()
                    .map(|t| duration(&format!("{at}: dump_after"), t))
                    .transpose()?
                    .unwrap_or(Duration::ZERO),
            }),
            None => None,
        };
        if let Some(url) = &self.webhook
            && !url.starts_with("http://")
            && !url.starts_with("https://")
        {
            bail!("{at}: webhook {url:?}: expected an http:// or https:// URL");
        }
        Ok(HubWatch {
            spec,
            analysis: analysis.map(|a| a.name.to_owned()),
            actions: Actions {
                dump,
                webhook: self.webhook.clone(),
                alert_log: self.alert_log.clone(),
            },
            origin: "config",
        })
    }
}

/// `[capture]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaptureSection {
    /// Interface to capture on.
    pub interface: String,
    /// Bytes captured per packet into the ring.
    #[serde(default = "default_snaplen")]
    pub snaplen: u32,
    /// Kernel capture buffer, MiB.
    #[serde(default = "default_kernel_buffer_mib")]
    pub kernel_buffer_mib: u32,
    /// Memory of the ring, MiB.
    #[serde(default = "default_ring_mib")]
    pub ring_mib: usize,
    /// Seal the archive this often.
    #[serde(default = "default_seal_secs")]
    pub seal_secs: u64,
    /// Unsealed packet batches kept in memory for queries, MiB.
    #[serde(default = "default_tail_mib")]
    pub tail_mib: usize,
    /// Capture threads (AF_PACKET fanout by flow hash when more than one).
    #[serde(default = "default_fanout")]
    pub fanout: usize,
}

/// `[trigger]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TriggerSection {
    /// Trigger filter (either syntax).
    pub filter: String,
    /// Dump filter template.
    #[serde(default = "default_dump")]
    pub dump: String,
    /// Seconds before the trigger packet.
    #[serde(default = "default_before")]
    pub before_secs: f64,
    /// Seconds after it.
    #[serde(default = "default_after")]
    pub after_secs: f64,
}

/// `[dumps]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DumpsSection {
    /// Directory of the dumps.
    pub dir: Option<PathBuf>,
    /// Bound of one dump, MiB.
    pub max_dump_mib: u64,
    /// Bound of all dumps, MiB.
    pub max_total_mib: u64,
}

impl Default for DumpsSection {
    fn default() -> Self {
        Self {
            dir: None,
            max_dump_mib: 256,
            max_total_mib: 4096,
        }
    }
}

/// `[api]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ApiSection {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// Bearer token every API request must carry.
    pub token: Option<String>,
    /// Largest request body.
    pub max_body_bytes: usize,
    /// Most rows a query or statement may return.
    pub max_rows: u64,
    /// Longest a request may run.
    pub timeout_secs: u64,
    /// Cheap requests running at once.
    pub max_concurrent: usize,
    /// Scans running at once.
    pub max_scans: usize,
    /// Requests of each class waiting for a slot.
    pub max_queued: usize,
    /// Rows a request may decode and still count as cheap.
    pub cheap_rows: u64,
    /// Memory of one SQL statement's operators, MiB.
    pub max_memory_mib: usize,
    /// Memory of the operators of every statement at once (the API's, the
    /// cluster's fragments, the watches'), MiB; by default
    /// `max_memory_mib` times `max_scans + 1`.
    pub max_total_memory_mib: Option<usize>,
    /// The server's anonymous resident memory, MiB: past it the statements
    /// running are cancelled and reservations refused until it is back
    /// under; by default `max_total_memory_mib` plus the capture's
    /// `ring_mib` and `tail_mib` plus 1024 (caches, writers, batches between
    /// operators).
    pub max_resident_mib: Option<usize>,
    /// Parsed segment footers kept between queries, MiB.
    pub footer_cache_mib: usize,
    /// Run a client's statements, peers' fragments and watches' windows in
    /// worker processes, each under a kernel memory limit (see `worker`).
    pub statement_workers: bool,
    /// The memory limit of each statement worker, MiB (the kernel's
    /// `RLIMIT_DATA`: its heap, anonymous mappings and thread stacks); by
    /// default `max_memory_mib` plus twice the capture's `tail_mib` plus
    /// `footer_cache_mib` plus 1536.
    pub worker_memory_mib: Option<usize>,
    /// Connections open at once.
    pub max_connections: usize,
    /// Connections open at once from one client address.
    pub max_connections_per_client: usize,
    /// Longest a client may take to send a request's head, seconds.
    pub header_timeout_secs: u64,
    /// Names besides loopback's a request's `Host` may give when the API
    /// has no token (see `api::require_host`).
    pub allowed_hosts: Vec<String>,
}

impl ApiSection {
    /// The bounds of requests this section sets.
    pub fn limits(&self) -> crate::api::ApiLimits {
        crate::api::ApiLimits {
            max_body_bytes: self.max_body_bytes,
            max_rows: self.max_rows,
            timeout: Duration::from_secs(self.timeout_secs),
            max_concurrent: self.max_concurrent,
            max_scans: self.max_scans,
            max_memory_bytes: self.max_memory_mib.saturating_mul(1 << 20),
        }
    }

    /// What every statement's operators may reserve at once, bytes.
    pub fn total_memory_bytes(&self) -> usize {
        self.max_total_memory_mib
            .unwrap_or_else(|| self.max_memory_mib.saturating_mul(self.max_scans + 1))
            .saturating_mul(1 << 20)
    }
}

/// What a server holds besides its statements' reservations and its ring,
/// by default: the footer and statistics caches, the writers, the batches
/// between operators.
const RESIDENT_HEADROOM_MIB: usize = 1024;

/// What a statement worker holds besides its statement's reservations, the
/// tail and the footers, by default: the statistics and metadata caches
/// (160 MiB), its threads' stacks (64 MiB each, reserved as they start),
/// the batches between operators and the answer.
const WORKER_HEADROOM_MIB: usize = 1536;

/// The least `worker_memory_mib`: the worker's own start takes about this.
pub const MIN_WORKER_MEMORY_MIB: usize = 512;

/// The least `max_resident_mib` taken above the capture's memory: below it
/// the caches and writers alone would keep every statement cancelled.
const MIN_RESIDENT_ABOVE_CAPTURE_MIB: usize = 256;

impl Default for ApiSection {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            token: None,
            max_body_bytes: 64 << 10,
            max_rows: 1_000_000,
            timeout_secs: 60,
            max_concurrent: 4,
            max_scans: 2,
            max_queued: 64,
            cheap_rows: crate::admission::CHEAP_ROWS,
            max_memory_mib: 1024,
            max_total_memory_mib: None,
            max_resident_mib: None,
            footer_cache_mib: hindsight_store::FooterCache::DEFAULT_BYTES >> 20,
            statement_workers: true,
            worker_memory_mib: None,
            max_connections: 512,
            max_connections_per_client: 128,
            header_timeout_secs: 10,
            allowed_hosts: Vec::new(),
        }
    }
}

fn default_snaplen() -> u32 {
    262_144
}
fn default_kernel_buffer_mib() -> u32 {
    64
}
fn default_ring_mib() -> usize {
    256
}
fn default_tail_mib() -> usize {
    256
}
fn default_seal_secs() -> u64 {
    60
}
fn default_fanout() -> usize {
    1
}
fn default_dump() -> String {
    "host $src".to_owned()
}
fn default_before() -> f64 {
    10.0
}
fn default_after() -> f64 {
    5.0
}

impl ServeConfig {
    /// The capture's own memory, MiB: its ring and the unsealed tail (0
    /// without capture).
    fn capture_mib(&self) -> usize {
        self.capture.as_ref().map_or(0, |capture| {
            capture.ring_mib.saturating_add(capture.tail_mib)
        })
    }

    /// The memory limit of each statement worker, MiB
    /// ([`ApiSection::worker_memory_mib`]).
    pub fn worker_memory_mib(&self) -> usize {
        self.api.worker_memory_mib.unwrap_or_else(|| {
            let tail = self.capture.as_ref().map_or(0, |capture| capture.tail_mib);
            self.api
                .max_memory_mib
                .saturating_add(tail.saturating_mul(2))
                .saturating_add(self.api.footer_cache_mib)
                .saturating_add(WORKER_HEADROOM_MIB)
        })
    }

    /// The server's resident bound, bytes ([`ApiSection::max_resident_mib`]).
    pub fn resident_bytes(&self) -> usize {
        self.api
            .max_resident_mib
            .unwrap_or_else(|| {
                (self.api.total_memory_bytes() >> 20)
                    .saturating_add(self.capture_mib())
                    .saturating_add(RESIDENT_HEADROOM_MIB)
            })
            .saturating_mul(1 << 20)
    }

    /// Reads `path`; relative paths in it are made relative to its directory.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let mut config: Self = toml::from_str(&text)
            .with_context(|| format!("{} is not a valid serve configuration", path.display()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        let logs = config.watch.iter_mut().map(|w| &mut w.alert_log);
        for dir in [&mut config.archive, &mut config.dumps.dir]
            .into_iter()
            .chain(logs)
            .flatten()
        {
            if dir.is_relative() {
                *dir = base.join(&*dir);
            }
        }
        Ok(config)
    }

    /// Checks what serde cannot.
    pub fn validate(&self) -> Result<()> {
        if let Some(capture) = &self.capture {
            if capture.interface.is_empty() {
                bail!("[capture] interface must not be empty");
            }
            if capture.seal_secs == 0 {
                bail!("[capture] seal_secs must be positive");
            }
            if capture.tail_mib == 0 {
                bail!("[capture] tail_mib must be positive");
            }
            if !(1..=64).contains(&capture.fanout) {
                bail!("[capture] fanout must be between 1 and 64");
            }
        }
        if self.api.statement_workers && self.worker_memory_mib() < MIN_WORKER_MEMORY_MIB {
            bail!(
                "[api] worker_memory_mib = {}: a statement worker needs at least {} MiB to start",
                self.worker_memory_mib(),
                MIN_WORKER_MEMORY_MIB
            );
        }
        if !self.watch.is_empty() && self.capture.is_none() {
            bail!("[[watch]] needs a [capture] section: watches run on live traffic");
        }
        for watch in &self.watch {
            watch.watch(&self.watches)?;
        }
        let w = &self.watches;
        if w.keep_secs == 0
            || w.max_rows_kept == 0
            || w.max_watches == 0
            || w.max_window_rows == 0
            || w.window_timeout_secs == 0
        {
            bail!(
                "[watches] keep_secs, max_rows_kept, max_watches, max_window_rows and \
                 window_timeout_secs must be positive"
            );
        }
        if self.watch.len() > w.max_watches {
            bail!(
                "{} [[watch]] sections, more than [watches] max_watches ({})",
                self.watch.len(),
                w.max_watches
            );
        }
        if self.trigger.is_some() && self.capture.is_none() {
            bail!("[trigger] needs a [capture] section: triggers watch live traffic");
        }
        if let Some(trigger) = &self.trigger {
            seconds("[trigger] before_secs", trigger.before_secs)?;
            seconds("[trigger] after_secs", trigger.after_secs)?;
        }
        let api = &self.api;
        if api.max_rows == 0
            || api.timeout_secs == 0
            || api.max_concurrent == 0
            || api.max_scans == 0
            || api.max_memory_mib == 0
            || api.max_total_memory_mib == Some(0)
            || api.max_connections == 0
            || api.max_connections_per_client == 0
            || api.header_timeout_secs == 0
        {
            bail!(
                "[api] max_rows, timeout_secs, max_concurrent, max_scans, max_memory_mib, \
                 max_total_memory_mib, max_connections, max_connections_per_client and header_timeout_secs must be \
                 positive"
            );
        }
        if let Some(token) = &api.token {
            check_token("[api] token", token)?;
        }
        if let Some(resident) = api.max_resident_mib
            && resident < self.capture_mib() + MIN_RESIDENT_ABOVE_CAPTURE_MIB
        {
            bail!(
                "[api] max_resident_mib = {resident} leaves the server no room: it must be at \
                 least the capture's ring_mib + tail_mib ({} MiB) plus \
                 {MIN_RESIDENT_ABOVE_CAPTURE_MIB} (caches and writers), or every statement would \
                 be cancelled",
                self.capture_mib()
            );
        }
        Ok(())
    }
}

/// Refuses a bearer token that a guess could find: empty, or shorter than
/// [`crate::api::MIN_TOKEN_CHARS`]. `what` names where it was given.
pub(crate) fn check_token(what: &str, token: &str) -> Result<()> {
    if token.is_empty() {
        bail!("{what} must not be empty (leave it out for no authentication)");
    }
    let chars = token.chars().count();
    if chars < crate::api::MIN_TOKEN_CHARS {
        bail!(
            "{what} has {chars} characters; a token needs at least {} (`openssl rand -hex 32` \
             makes one)",
            crate::api::MIN_TOKEN_CHARS
        );
    }
    Ok(())
}

/// `value` seconds as a duration, or an error naming `name`.
pub fn seconds(name: &str, value: f64) -> Result<Duration> {
    Duration::try_from_secs_f64(value)
        .ok()
        .with_context(|| format!("{name} = {value}: expected a number of seconds ≥ 0"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_relative_to_the_file_and_mistakes_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hindsight.toml");
        std::fs::write(
            &path,
            "archive = \"arch\"\n[capture]\ninterface = \"lo\"\n[api]\nlisten = \"127.0.0.1:0\"\n",
        )
        .unwrap();
        let config = ServeConfig::load(&path).unwrap();
        assert_eq!(config.archive.unwrap(), dir.path().join("arch"));
        assert_eq!(config.capture.unwrap().ring_mib, 256);
        assert_eq!(config.api.max_rows, 1_000_000);

        std::fs::write(&path, "[api]\nlisten = \"127.0.0.1:0\"\nmax_row = 5\n").unwrap();
        let error = format!("{:#}", ServeConfig::load(&path).unwrap_err());
        assert!(error.contains("max_row"), "{error}");

        std::fs::write(&path, "[trigger]\nfilter = \"tcp\"\n").unwrap();
        let error = ServeConfig::load(&path).unwrap().validate().unwrap_err();
        assert!(error.to_string().contains("needs a [capture]"), "{error}");
    }

    #[test]
    fn the_resident_bound_defaults_to_what_the_server_holds_and_leaves_it_room() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hindsight.toml");
        let load = |text: &str| {
            std::fs::write(&path, text).unwrap();
            ServeConfig::load(&path).unwrap()
        };
        // The statements' budget (1024 × 3), the ring and tail (256 + 256), 1024.
        let capture = "[capture]\ninterface = \"lo\"\n";
        assert_eq!(load(capture).resident_bytes(), 4608 << 20);
        assert_eq!(load("").resident_bytes(), 4096 << 20);
        let config = load("[api]\nmax_resident_mib = 300\n");
        config.validate().unwrap();
        assert_eq!(config.resident_bytes(), 300 << 20);
        let config = load(&format!("{capture}[api]\nmax_resident_mib = 700\n"));
        let error = config.validate().unwrap_err().to_string();
        assert!(error.contains("ring_mib + tail_mib (512 MiB)"), "{error}");
    }
}
