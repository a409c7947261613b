//! The role of the watch crate is to run continuous queries: SQL statements over
//! windows of the live stream, joined with the archive (the live and historical
//! queries of `fastbit-telegraphcq`).
//!
//! A [`Watcher`] is fed the stream: packets ([`Watcher::push_frame`], decoded
//! here, with connection records assembled from them by a flow table of its own)
//! or connection records from elsewhere ([`Watcher::push_flows`]: NetFlow, IPFIX).
//! Windows are in event time, the packets' own timestamps, so a replayed capture
//! gives the same answers as the live link:
//!
//! - A window has a `range` and a `slide` (tumbling when they are equal); window
//!   ends are multiples of `slide` since the Unix epoch, and the window ending at
//!   `e` holds the rows with `e - range <= ts < e`.
//! - Rows are kept in panes of one `slide` each, so a row is stored once however
//!   many windows hold it, and a window is the union of its `range / slide` panes.
//! - The window ending at `e` is answered once a packet at or after `e` arrives
//!   (for statements that read `live_flows`, once one at or after `e +
//!   flow_lateness` arrives: a connection is in the window in which it ended, and
//!   the flow table reports a connection only once it has been idle for its
//!   timeout). A packet that arrives for a window already answered is late: it
//!   is counted, never added to an answer given.
//! - Each answer is the statement's rows, with `live_packets` and `live_flows`
//!   holding exactly the window's rows and `:window_start`, `:window_end` and
//!   `:window_slide` bound to its bounds and slide; the statement may read the
//!   archive's `packets` and `flows` too (the join with history). A statement
//!   may be a script of stages (`hindsight_sql::Script`: the paper's controller,
//!   live results filling a historical query).
//! - Memory is bounded: a pane holds at most its share of `max_rows` and
//!   `max_bytes` (`Bounds`); rows past it are dropped and every answer of a
//!   window that lost rows says how many ([`Answer::cut`]).

pub mod analyses;
pub mod hub;
pub mod replay;
pub mod request;
pub mod rerun;
pub mod sources;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hindsight_flow::{FlowTable, FlowTableConfig};
use hindsight_model::{FlowRecord, Frame};
use hindsight_sql::{LIVE_FLOWS, LIVE_PACKETS, ScalarValue, Script, SqlError, SqlSession};
use hindsight_store::arrow::array::RecordBatch;
use hindsight_store::flows::FlowBatchBuilder;
use hindsight_store::schema::PacketBatchBuilder;

/// Errors of a watch.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// The window is not valid.
    #[error("{0}")]
    Window(String),
    /// The statement is invalid or failed on a window.
    #[error("watch {name}: {source}")]
    Sql {
        /// The watch.
        name: String,
        /// Why.
        #[source]
        source: SqlError,
    },
}

/// The windows of a watch: `range` long, one every `slide`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowSpec {
    /// Length of a window.
    pub range: Duration,
    /// Time between the ends of two windows; `range` must be a multiple of it.
    pub slide: Duration,
}

impl WindowSpec {
    /// A tumbling window of `range`.
    pub fn tumbling(range: Duration) -> Self {
        Self {
            range,
            slide: range,
        }
    }

    /// Checks the window: positive, and `range` a whole number of `slide`s.
    pub fn validate(&self) -> Result<(), WatchError> {
        let (range, slide) = (nanos(self.range), nanos(self.slide));
        if slide <= 0 || range <= 0 {
            return Err(WatchError::Window(
                "the window and its slide must be longer than zero".to_owned(),
            ));
        }
        if range % slide != 0 {
            return Err(WatchError::Window(format!(
                "the window ({:?}) must be a whole number of slides ({:?})",
                self.range, self.slide
            )));
        }
        Ok(())
    }

    fn panes(&self) -> i64 {
        nanos(self.range) / nanos(self.slide)
    }
}

/// Bounds of a watch's window state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bounds {
    /// Most packets plus connection records a window holds.
    pub max_rows: usize,
    /// Most bytes of stored packets a window holds.
    pub max_bytes: usize,
    /// Most rows of one answer; more is an error of that window.
    pub max_answer_rows: u64,
    /// Longest one window's statement may run; past it the window's answer
    /// is an error, and the watch goes on with the next.
    pub window_timeout: Duration,
    /// Set when the watch is removed or its recorder stops: its running
    /// window is cancelled at once, and so is any window after.
    pub cancel: hindsight_sql::Cancel,
}

/// The longest a window's statement runs by default.
pub const WINDOW_TIMEOUT: Duration = Duration::from_secs(60);

impl Default for Bounds {
    fn default() -> Self {
        Self {
            max_rows: 4_000_000,
            max_bytes: 1 << 30,
            max_answer_rows: 100_000,
            window_timeout: WINDOW_TIMEOUT,
            cancel: hindsight_sql::Cancel::new(),
        }
    }
}

/// One continuous query.
#[derive(Clone, Debug)]
pub struct WatchSpec {
    /// Its name (in answers and metrics).
    pub name: String,
    /// The statement, or script of stages, run on each window.
    pub sql: String,
    /// Values of its named parameters (`:k`), besides the window's own.
    pub params: Vec<(String, ScalarValue)>,
    /// Its windows.
    pub window: WindowSpec,
    /// Bounds of its state.
    pub bounds: Bounds,
}

/// The answer of one watch for one window.
#[derive(Debug)]
pub struct Answer {
    /// The watch.
    pub watch: String,
    /// The window's first instant, ns since the epoch.
    pub start_ns: i64,
    /// The instant after the window's last, ns.
    pub end_ns: i64,
    /// The statement's rows, or why it failed on this window.
    pub rows: Result<Vec<RecordBatch>, String>,
    /// Rows of the window dropped at its bounds (then the answer is of the rest).
    pub cut: u64,
    /// How long the statement took.
    pub took: Duration,
}

/// Counters of a watcher.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WatchCounts {
    /// Packets taken.
    pub packets: u64,
    /// Connection records taken.
    pub flows: u64,
    /// Packets and records that arrived after their windows were answered.
    pub late: u64,
    /// Windows answered (all watches).
    pub answers: u64,
}

/// The rows of one slide of the stream.
#[derive(Debug, Default)]
struct Pane {
    packets: Vec<RecordBatch>,
    /// Connection records, as batches of the `flows` schema (built once,
    /// shared by every window that holds the pane).
    flows: Vec<RecordBatch>,
    /// Records not yet in a batch.
    flow_builder: Option<FlowBatchBuilder>,
    rows: usize,
    bytes: usize,
    cut: u64,
    /// Packets arrived in this pane that no watch keeps (none reads
    /// `live_packets`): the pane still holds rows for its windows.
    seen: bool,
}

impl Pane {
    /// Whether a window holding this pane has rows to answer.
    fn holds(&self) -> bool {
        self.rows > 0 || self.cut > 0 || self.seen
    }
}

/// One watch's state.
#[derive(Debug)]
struct Running {
    spec: WatchSpec,
    script: Script,
    /// Whether the statement reads `live_flows` (its windows wait for the flow
    /// table's timeout).
    reads_flows: bool,
    /// Whether it reads `live_packets` (the packets of its windows are kept
    /// until it has answered them).
    reads_packets: bool,
    /// Whether it reads the packets' stored bytes (`live_packets.data`).
    reads_data: bool,
    /// End of the next window to answer, ns; `None` before the first row.
    next_end: Option<i64>,
}

impl Running {
    /// Checks `spec` and plans its statements over `session` (whose live
    /// tables must be registered).
    fn prepare(session: &SqlSession, spec: WatchSpec) -> Result<Self, WatchError> {
        spec.window.validate()?;
        let sql_error = |source| WatchError::Sql {
            name: spec.name.clone(),
            source,
        };
        let script = session.script(&spec.sql).map_err(sql_error)?;
        session.prepare_script(&script).map_err(sql_error)?;
        let tables = session.tables_of_script(&script).map_err(sql_error)?;
        let reads_data = session.reads_live_packet_data(&script).map_err(sql_error)?;
        Ok(Self {
            reads_flows: tables.iter().any(|t| t == LIVE_FLOWS),
            reads_packets: tables.iter().any(|t| t == LIVE_PACKETS),
            reads_data,
            script,
            spec,
            next_end: None,
        })
    }

    /// The named parameters of the window `[start, end)`.
    fn params(&self, start: i64, end: i64) -> Vec<(&str, ScalarValue)> {
        let mut params = vec![
            ("window_start", timestamp(start)),
            ("window_end", timestamp(end)),
            ("window_slide", analyses::interval(self.spec.window.slide)),
        ];
        params.extend(
            self.spec
                .params
                .iter()
                .map(|(name, value)| (name.as_str(), value.clone())),
        );
        params
    }

    /// The bounds of one window's statement.
    fn limits(&self) -> hindsight_sql::Limits {
        hindsight_sql::Limits {
            max_rows: Some(self.spec.bounds.max_answer_rows),
            timeout: Some(self.spec.bounds.window_timeout),
            cancel: self.spec.bounds.cancel.clone(),
        }
    }

    /// Runs the statement on the window `[start, end)` of `packets` and
    /// `flows`: with `runner`, there; else in `session`, whose live tables
    /// then hold them.
    fn evaluate_rows(
        &self,
        session: &SqlSession,
        runner: Option<&dyn WindowRunner>,
        window: (i64, i64, u64),
        packets: Vec<RecordBatch>,
        flows: Vec<RecordBatch>,
    ) -> Answer {
        let (start, end, cut) = window;
        let Some(runner) = runner else {
            return match session.set_live(packets, flows) {
                Ok(()) => self.evaluate(session, start, end, cut),
                Err(error) => {
                    self.answer(start, end, Err(anyhow_chain(&error)), cut, Instant::now())
                }
            };
        };
        let started = Instant::now();
        let params = self.params(start, end);
        let rows = runner.run(&self.spec.sql, &params, packets, flows, &self.limits());
        self.answer(start, end, rows, cut, started)
    }

    /// Runs the statement on the window `[start, end)`, whose rows the
    /// session's live tables hold.
    fn evaluate(&self, session: &SqlSession, start: i64, end: i64, cut: u64) -> Answer {
        let started = Instant::now();
        let params = self.params(start, end);
        let rows = session
            .run_script_within(&self.script, &params, &self.limits())
            .map_err(|e| anyhow_chain(&e));
        self.answer(start, end, rows, cut, started)
    }

    fn answer(
        &self,
        start: i64,
        end: i64,
        rows: Result<Vec<RecordBatch>, String>,
        cut: u64,
        started: Instant,
    ) -> Answer {
        Answer {
            watch: self.spec.name.clone(),
            start_ns: start,
            end_ns: end,
            rows,
            cut,
            took: started.elapsed(),
        }
    }
}

/// Where a watch's windows run instead of the watcher's own session: a
/// statement worker of `serve`, under its memory limit.
pub trait WindowRunner: Send + Sync + std::fmt::Debug {
    /// The rows of the watch's statement `sql` with `params`, over `packets`
    /// and `flows` as its live tables, within `limits`; or why it failed.
    fn run(
        &self,
        sql: &str,
        params: &[(&str, ScalarValue)],
        packets: Vec<RecordBatch>,
        flows: Vec<RecordBatch>,
        limits: &hindsight_sql::Limits,
    ) -> Result<Vec<RecordBatch>, String>;
}

/// Feeds the live stream to watches and answers each window as it closes.
pub struct Watcher {
    session: SqlSession,
    /// Where windows run, if not in `session` (which then only plans).
    runner: Option<Arc<dyn WindowRunner>>,
    watches: Vec<Running>,
    /// The panes of the stream by index (`ts / slide`), for the smallest slide;
    /// every watch's slide is a multiple of it.
    panes: BTreeMap<i64, Pane>,
    pane_nanos: i64,
    /// Rows and bytes a pane may hold ([`pane_bounds`]).
    pane_bounds: (usize, usize),
    builder: PacketBatchBuilder,
    builder_pane: Option<i64>,
    /// Whether a watch reads `live_packets` (else packets are not kept) and
    /// whether one reads their stored bytes.
    keep_packets: bool,
    keep_data: bool,
    /// The pane of the last packet not kept (marked as holding rows).
    seen_pane: Option<i64>,
    /// Panes before this one hold no packet batches any more: every watch
    /// that reads `live_packets` has answered their windows.
    packets_dropped_before: i64,
    flow_table: Option<FlowTable>,
    flow_out: Vec<FlowRecord>,
    flow_lateness: i64,
    /// The latest packet time seen, ns.
    watermark: i64,
    counts: WatchCounts,
}

impl std::fmt::Debug for Watcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watcher")
            .field("watches", &self.watches)
            .field("counts", &self.counts)
            .finish_non_exhaustive()
    }
}

/// Rows a pane's batch holds before a new one starts.
const BATCH_ROWS: usize = 8192;

impl Watcher {
    /// Watches `watches` over `session` (an archive's, for statements that join
    /// with history, or [`SqlSession::live_only`]); with `flows` the watcher
    /// assembles connection records from the packets with that flow table.
    pub fn new(
        session: SqlSession,
        watches: Vec<WatchSpec>,
        flows: Option<FlowTableConfig>,
    ) -> Result<Self, WatchError> {
        // The statements are planned with the live tables there, empty.
        empty_live_tables(&session)?;
        let running = watches
            .into_iter()
            .map(|spec| Running::prepare(&session, spec))
            .collect::<Result<Vec<_>, _>>()?;
        let pane_nanos = running
            .iter()
            .map(|r| nanos(r.spec.window.slide))
            .reduce(gcd)
            .unwrap_or(1_000_000_000);
        // Connection records are assembled only if a statement reads them.
        let flows = flows.filter(|_| running.iter().any(|r| r.reads_flows));
        let flow_lateness = flows.map_or(0, |config| {
            nanos(config.idle_timeout.max(config.close_linger))
        });
        let mut watcher = Self {
            pane_bounds: pane_bounds(&running, pane_nanos),
            session,
            runner: None,
            watches: running,
            panes: BTreeMap::new(),
            pane_nanos,
            builder: PacketBatchBuilder::with_capacity(BATCH_ROWS, BATCH_ROWS * 128),
            builder_pane: None,
            keep_packets: false,
            keep_data: false,
            seen_pane: None,
            packets_dropped_before: i64::MIN,
            flow_table: flows.map(FlowTable::new),
            flow_out: Vec::new(),
            flow_lateness,
            watermark: i64::MIN,
            counts: WatchCounts::default(),
        };
        watcher.watches_changed();
        Ok(watcher)
    }

    /// Runs the windows with `runner`; the watcher's session only plans
    /// and checks the statements.
    pub fn with_runner(mut self, runner: Arc<dyn WindowRunner>) -> Self {
        self.runner = Some(runner);
        self
    }

    /// Recomputes what the watches need kept.
    fn watches_changed(&mut self) {
        self.pane_bounds = pane_bounds(&self.watches, self.pane_nanos);
        self.keep_packets = self.watches.iter().any(|w| w.reads_packets);
        self.keep_data = self.watches.iter().any(|w| w.reads_packets && w.reads_data);
    }

    /// A watcher whose watches come and go ([`Self::add`], [`Self::remove`]):
    /// panes of one second (every slide is whole seconds), connection records
    /// assembled with `flows` whether or not a watch reads them yet.
    pub fn dynamic(session: SqlSession, flows: FlowTableConfig) -> Result<Self, WatchError> {
        // Without watches, `new` makes panes of one second and no flow table.
        let mut watcher = Self::new(session, Vec::new(), None)?;
        watcher.flow_table = Some(FlowTable::new(flows));
        watcher.flow_lateness = nanos(flows.idle_timeout.max(flows.close_linger));
        Ok(watcher)
    }

    /// Adds a watch. Its first window is the first to start after the stream
    /// time it was added at, so that it never answers a window it saw only
    /// part of. Its slide must be a whole number of panes.
    pub fn add(&mut self, spec: WatchSpec) -> Result<(), WatchError> {
        if self.watches.iter().any(|w| w.spec.name == spec.name) {
            return Err(WatchError::Window(format!(
                "a watch is already named {}",
                spec.name
            )));
        }
        if nanos(spec.window.slide) % self.pane_nanos != 0 {
            return Err(WatchError::Window(format!(
                "the slide ({:?}) must be a whole number of seconds",
                spec.window.slide
            )));
        }
        let mut running = Running::prepare(&self.session, spec)?;
        if self.watermark != i64::MIN {
            let (range, slide) = (
                nanos(running.spec.window.range),
                nanos(running.spec.window.slide),
            );
            let first_start = (self.watermark.div_euclid(slide) + 1) * slide;
            running.next_end = Some(first_start + range);
        }
        self.watches.push(running);
        self.watches_changed();
        Ok(())
    }

    /// Removes the watch named `name`; false if there is none.
    pub fn remove(&mut self, name: &str) -> bool {
        let before = self.watches.len();
        self.watches.retain(|w| w.spec.name != name);
        self.watches_changed();
        self.watches.len() < before
    }

    /// The names of the watches.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.watches.iter().map(|w| w.spec.name.as_str())
    }

    /// Answers from `session` from now on (a newer view of the archive); the
    /// window's tables move with the statements.
    pub fn set_session(&mut self, session: SqlSession) -> Result<(), WatchError> {
        empty_live_tables(&session)?;
        for watch in &self.watches {
            session
                .prepare_script(&watch.script)
                .map_err(|source| WatchError::Sql {
                    name: watch.spec.name.clone(),
                    source,
                })?;
        }
        self.session = session;
        Ok(())
    }

    /// Waits `lateness` past a window's end before answering it from
    /// connection records that come from elsewhere ([`Self::push_flows`]: an
    /// exporter reports a connection some time after it ended).
    pub fn set_flow_lateness(&mut self, lateness: Duration) {
        self.flow_lateness = nanos(lateness);
    }

    /// The stream has delivered everything before `now_ns` (a live source
    /// that found nothing to read): answers the windows that closed.
    pub fn tick(&mut self, now_ns: i64, answer: &mut dyn FnMut(Answer)) {
        if self.watermark != i64::MIN {
            self.advance(now_ns, answer);
        }
    }

    /// The counters so far.
    pub fn counts(&self) -> WatchCounts {
        self.counts
    }

    /// Takes one captured frame; answers the windows it closes through `answer`.
    pub fn push_frame(&mut self, frame: &Frame<'_>, answer: &mut dyn FnMut(Answer)) {
        self.counts.packets += 1;
        if self.watches.is_empty() {
            // Nothing to answer: nothing kept (a dynamic watcher between watches).
            self.watermark = self.watermark.max(frame.ts_nanos);
            return;
        }
        let record = hindsight_decode::record(frame);
        if let Some(table) = &mut self.flow_table {
            table.push(
                frame.ts_nanos,
                &record.headers,
                frame.wire_len,
                &mut self.flow_out,
            );
        }
        let pane = frame.ts_nanos.div_euclid(self.pane_nanos);
        if self.is_answered(pane, |_| true) {
            self.counts.late += 1;
        } else if !self.keep_packets || self.is_answered(pane, |w| w.reads_packets) {
            // No watch reads the packets (or those that do answered this
            // pane): the pane holds rows for the others' windows, nothing kept.
            if self.seen_pane != Some(pane) {
                self.seen_pane = Some(pane);
                self.panes.entry(pane).or_default().seen = true;
            }
        } else {
            if self.builder_pane != Some(pane) || self.builder.len() >= BATCH_ROWS {
                self.flush_packets();
                self.builder_pane = Some(pane);
            }
            // The stored bytes only if a statement reads them.
            let data = if self.keep_data { frame.data } else { &[] };
            if self.admit(pane, data.len()) {
                self.builder.append(&record, data);
            }
        }
        if !self.flow_out.is_empty() {
            let records = std::mem::take(&mut self.flow_out);
            self.take_flows(records);
        }
        self.advance(frame.ts_nanos, answer);
    }

    /// Takes connection records from outside (a collector); `now_ns` is the
    /// stream's time (their export time), which closes windows.
    pub fn push_flows(
        &mut self,
        records: Vec<FlowRecord>,
        now_ns: i64,
        answer: &mut dyn FnMut(Answer),
    ) {
        self.take_flows(records);
        self.advance(now_ns, answer);
    }

    /// The stream ended: the flow table's open connections end, and every
    /// window that holds a row is answered.
    pub fn finish(&mut self, answer: &mut dyn FnMut(Answer)) {
        if let Some(table) = &mut self.flow_table {
            table.flush(&mut self.flow_out);
        }
        let records = std::mem::take(&mut self.flow_out);
        self.take_flows(records);
        self.flush_builder();
        let Some((&last, _)) = self.panes.last_key_value() else {
            return;
        };
        let longest = self
            .watches
            .iter()
            .map(|w| nanos(w.spec.window.range))
            .max()
            .unwrap_or(0);
        let until = (last + 1)
            .saturating_mul(self.pane_nanos)
            .saturating_add(longest);
        self.answer_until(until, until, answer);
    }

    fn take_flows(&mut self, records: Vec<FlowRecord>) {
        for record in records {
            self.counts.flows += 1;
            let pane = record.last_ns.div_euclid(self.pane_nanos);
            if self.is_answered(pane, |w| w.reads_flows) {
                self.counts.late += 1;
                continue;
            }
            if self.admit(pane, 0) {
                let state = self.panes.entry(pane).or_default();
                let builder = state.flow_builder.get_or_insert_with(FlowBatchBuilder::new);
                builder.append(&record);
                if builder.len() >= BATCH_ROWS {
                    state.flows.push(builder.finish());
                }
            }
        }
    }

    /// Whether every window holding `pane` has been answered, for every watch
    /// that `which` chooses (and there is one).
    fn is_answered(&self, pane: i64, which: fn(&Running) -> bool) -> bool {
        let start = pane * self.pane_nanos;
        self.watches.iter().filter(|w| which(w)).all(|w| {
            w.next_end
                .is_some_and(|end| end - nanos(w.spec.window.range) >= start + self.pane_nanos)
        }) && !self.watches.is_empty()
    }

    /// Counts a row into `pane` if its bounds allow; false if it is cut.
    fn admit(&mut self, pane: i64, bytes: usize) -> bool {
        let (max_rows, max_bytes) = self.pane_bounds;
        let state = self.panes.entry(pane).or_default();
        if state.rows + 1 > max_rows || state.bytes + bytes > max_bytes {
            state.cut += 1;
            return false;
        }
        state.rows += 1;
        state.bytes += bytes;
        true
    }

    /// Puts the packets not yet in a batch into their pane's batches.
    fn flush_packets(&mut self) {
        if let Some(pane) = self.builder_pane.take()
            && !self.builder.is_empty()
        {
            let batch = self.builder.finish();
            self.panes.entry(pane).or_default().packets.push(batch);
        }
    }

    /// Puts the rows not yet in a batch into their panes' batches (before
    /// windows are answered).
    fn flush_builder(&mut self) {
        self.flush_packets();
        for pane in self.panes.values_mut() {
            if let Some(mut builder) = pane.flow_builder.take()
                && !builder.is_empty()
            {
                pane.flows.push(builder.finish());
            }
        }
    }

    /// Time moved to `now_ns`: answers the windows that closed.
    fn advance(&mut self, now_ns: i64, answer: &mut dyn FnMut(Answer)) {
        if now_ns <= self.watermark {
            return;
        }
        self.watermark = now_ns;
        for watch in &mut self.watches {
            if watch.next_end.is_none() {
                // The first window to answer is the one holding the first row.
                let slide = nanos(watch.spec.window.slide);
                watch.next_end = Some((now_ns.div_euclid(slide) + 1) * slide);
            }
        }
        let due = self.watches.iter().any(|w| {
            let lateness = if w.reads_flows { self.flow_lateness } else { 0 };
            w.next_end
                .is_some_and(|end| now_ns >= end.saturating_add(lateness))
        });
        if due {
            self.flush_builder();
            self.answer_until(now_ns, now_ns.saturating_sub(self.flow_lateness), answer);
        }
    }

    /// Answers, for each watch, the windows ending at or before `packets_until`
    /// (`flows_until` for a watch that reads flows), then drops the panes no
    /// window still needs. A window without rows is not answered (as in Flink,
    /// windows exist for the rows they hold).
    fn answer_until(
        &mut self,
        packets_until: i64,
        flows_until: i64,
        answer: &mut dyn FnMut(Answer),
    ) {
        for index in 0..self.watches.len() {
            loop {
                let watch = &self.watches[index];
                let until = if watch.reads_flows {
                    flows_until
                } else {
                    packets_until
                };
                let Some(end) = watch.next_end.filter(|&end| end <= until) else {
                    break;
                };
                let (range, slide) = (
                    nanos(watch.spec.window.range),
                    nanos(watch.spec.window.slide),
                );
                let (first, last) = (
                    (end - range).div_euclid(self.pane_nanos),
                    end.div_euclid(self.pane_nanos),
                );
                let next_end = if self.panes.range(first..last).any(|(_, pane)| pane.holds()) {
                    let result = self.evaluate(index, end - range, end);
                    self.counts.answers += 1;
                    answer(result);
                    end + slide
                } else {
                    // On to the first window that holds the next pane with rows,
                    // or past `until` if none has come yet.
                    let next = match self.panes.range(last..).find(|(_, pane)| pane.holds()) {
                        Some((&pane, _)) => pane * self.pane_nanos,
                        None => until,
                    };
                    (end + slide).max((next.div_euclid(slide) + 1).saturating_mul(slide))
                };
                self.watches[index].next_end = Some(next_end);
            }
        }
        // A pane is needed while a watch has a window holding it to answer.
        let keep_from = self
            .watches
            .iter()
            .filter_map(|w| w.next_end.map(|end| end - nanos(w.spec.window.range)))
            .min()
            .unwrap_or(i64::MIN);
        let first_kept = keep_from.div_euclid(self.pane_nanos);
        self.panes = self.panes.split_off(&first_kept);
        // Packets are needed while a watch that reads them has a window
        // holding them to answer (the others may wait a flow timeout longer).
        let packets_from = self
            .watches
            .iter()
            .filter(|w| w.reads_packets)
            .map(|w| w.next_end.map(|end| end - nanos(w.spec.window.range)))
            .min()
            .flatten()
            .map(|start| start.div_euclid(self.pane_nanos));
        if let Some(packets_from) = packets_from
            && packets_from > self.packets_dropped_before
        {
            for (_, pane) in self
                .panes
                .range_mut(self.packets_dropped_before..packets_from)
            {
                pane.packets = Vec::new();
            }
            self.packets_dropped_before = packets_from;
        }
    }

    fn evaluate(&self, index: usize, start: i64, end: i64) -> Answer {
        let (first, last) = (
            start.div_euclid(self.pane_nanos),
            end.div_euclid(self.pane_nanos),
        );
        let mut packets = Vec::new();
        let mut flows = Vec::new();
        let mut cut = 0;
        for (_, pane) in self.panes.range(first..last) {
            packets.extend(pane.packets.iter().cloned());
            flows.extend(pane.flows.iter().cloned());
            cut += pane.cut;
        }
        self.watches[index].evaluate_rows(
            &self.session,
            self.runner.as_deref(),
            (start, end, cut),
            packets,
            flows,
        )
    }
}

/// Registers the live tables of `session`, empty (statements are planned
/// against them).
pub(crate) fn empty_live_tables(session: &SqlSession) -> Result<(), WatchError> {
    session
        .set_live(Vec::new(), Vec::new())
        .map_err(|source| WatchError::Sql {
            name: "(live tables)".to_owned(),
            source,
        })
}

/// Checks `spec` against `session` (an archive's, or [`SqlSession::live_only`])
/// as [`Watcher::add`] would, without running it: the window, the statement's
/// syntax, tables, columns and policy.
pub fn check(session: &SqlSession, spec: &WatchSpec) -> Result<(), WatchError> {
    empty_live_tables(session)?;
    Running::prepare(session, spec.clone()).map(|_| ())
}

/// A pane's share of the tightest watch's bounds (rows, bytes).
fn pane_bounds(watches: &[Running], pane_nanos: i64) -> (usize, usize) {
    let mut bounds = (usize::MAX, usize::MAX);
    for watch in watches {
        let panes = usize::try_from(
            watch.spec.window.panes() * (nanos(watch.spec.window.slide) / pane_nanos),
        )
        .unwrap_or(usize::MAX)
        .max(1);
        bounds.0 = bounds.0.min(watch.spec.bounds.max_rows / panes);
        bounds.1 = bounds.1.min(watch.spec.bounds.max_bytes / panes);
    }
    bounds
}

/// An error and its causes, as one line.
fn anyhow_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// A window bound as the SQL value of the `ts` columns.
fn timestamp(ns: i64) -> ScalarValue {
    ScalarValue::TimestampNanosecond(Some(ns), Some("UTC".into()))
}

fn nanos(duration: Duration) -> i64 {
    i64::try_from(duration.as_nanos()).unwrap_or(i64::MAX)
}

fn gcd(a: i64, b: i64) -> i64 {
    if b == 0 { a } else { gcd(b, a % b) }
}
