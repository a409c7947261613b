//! Watches of a running recorder (`hindsight serve`): the capture ring's
//! packets fed to one [`Watcher`] on a thread of its own, watches added and
//! removed while it runs, each answer kept for a while and sent to
//! subscribers, and actions fired by the rows of an answer.
//!
//! ```text
//! ring ─► watch thread (decode, panes, SQL) ─┬─► kept answers, subscribers, counters
//!                                            ├─► dumper thread ─► pcap of the ring's window
//!                                            └─► notifier thread ─► webhook POST, alert log
//! ```
//!
//! Nothing the watch thread does waits on disk or the network: dumps and
//! notifications go to threads of their own through bounded queues, and what
//! does not fit is dropped and counted.

use std::collections::{BTreeMap, VecDeque};
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hindsight_live::Dumper;
use hindsight_model::{Frame, LinkType};
use hindsight_ring::Ring;
use hindsight_sql::SqlSession;

use crate::{Answer, WatchError, WatchSpec, Watcher, replay::answer_lines};

/// How long answers are kept, how many rows of each watch, and how many watches.
#[derive(Clone, Copy, Debug)]
pub struct Retention {
    /// Answers older than this (by the end of their window) are dropped.
    pub keep: Duration,
    /// Most rows kept per watch; the oldest go first.
    pub max_rows: usize,
    /// Most watches at once.
    pub max_watches: usize,
}

impl Default for Retention {
    fn default() -> Self {
        Self {
            keep: Duration::from_secs(3600),
            max_rows: 10_000,
            max_watches: 32,
        }
    }
}

/// What the watches read and write: the capture ring, its link type, and the
/// dumper of dump actions.
#[derive(Clone, Debug)]
pub struct Feed {
    /// The ring.
    pub ring: Ring,
    /// Link type of its packets.
    pub link_type: LinkType,
    /// Writes dumps, if dump actions may run.
    pub dumper: Option<Dumper>,
}

/// The kept rows of a watch, and a receiver of the rows to come.
pub type Rows = (Vec<Arc<str>>, tokio::sync::broadcast::Receiver<Arc<str>>);

/// A dump filter with placeholders filled from a row: `$src` is the row's
/// `src` column, as text (`host $src and port $dport`).
#[derive(Clone, Debug)]
pub struct RowTemplate {
    text: String,
    names: Vec<String>,
}

impl RowTemplate {
    /// Reads a template; `columns`, if known, are the names it may use.
    pub fn new(text: &str) -> Result<Self, String> {
        let mut names = Vec::new();
        let mut rest = text;
        while let Some(at) = rest.find('$') {
            let after = &rest[at + 1..];
            let len = after
                .find(|c: char| !c.is_ascii_alphanumeric() && c != '_')
                .unwrap_or(after.len());
            if len == 0 {
                return Err(format!("{text:?}: a $ must start a column name ($src)"));
            }
            names.push(after[..len].to_owned());
            rest = &after[len..];
        }
        Ok(Self {
            text: text.to_owned(),
            names,
        })
    }

    /// The template with each `$name` replaced by the row's `name`.
    pub fn render(
        &self,
        row: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<String, String> {
        let mut names = self.names.clone();
        // Longest first, so that `$src` does not eat the start of `$src_port`.
        names.sort_by_key(|name| std::cmp::Reverse(name.len()));
        let mut text = self.text.clone();
        for name in names {
            let value = match row.get(&name) {
                Some(serde_json::Value::String(s)) => s.clone(),
                Some(serde_json::Value::Null) | None => {
                    return Err(format!("the row has no value for ${name}"));
                }
                Some(other) => other.to_string(),
            };
            // One literal, never filter text: `'10.0.0.1 or 1 == 1' AS src`
            // must not widen `host $src`.
            if !is_literal(&value) {
                return Err(format!(
                    "the row's ${name} is {value:?}, not one value (an address, network, \
                     number or name of letters, digits and `.:/_-`)"
                ));
            }
            text = text.replace(&format!("${name}"), &value);
        }
        Ok(text)
    }

    /// The template as written.
    pub fn text(&self) -> &str {
        &self.text
    }
}

/// Whether `value` stands in a filter as one literal: an address, a
/// network, a number, a MAC address or a name, made only of letters,
/// digits and `.:/_-` (no space, quote, parenthesis or operator).
fn is_literal(value: &str) -> bool {
    !value.is_empty()
        && value.len() <= 256
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b':' | b'/' | b'_' | b'-'))
}

/// What a row of an answer fires.
#[derive(Clone, Debug, Default)]
pub struct Actions {
    /// A pcap of the ring's packets matching a filter made from the row.
    pub dump: Option<DumpAction>,
    /// POST the row as JSON to this `http://` URL.
    pub webhook: Option<String>,
    /// Append the row as a JSON line to this file.
    pub alert_log: Option<PathBuf>,
}

/// A dump fired by a row.
#[derive(Clone, Debug)]
pub struct DumpAction {
    /// Which packets.
    pub filter: RowTemplate,
    /// How far back from the end of the window (default: the window).
    pub before: Option<Duration>,
    /// How far on after it.
    pub after: Duration,
}

/// A watch of the hub.
#[derive(Clone, Debug)]
pub struct HubWatch {
    /// The watch.
    pub spec: WatchSpec,
    /// The analysis it runs, if a built-in one.
    pub analysis: Option<String>,
    /// What its rows fire.
    pub actions: Actions,
    /// Where it came from: `config` or `api`.
    pub origin: &'static str,
}

/// Counters of one watch.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct WatchStats {
    /// Windows answered.
    pub windows: u64,
    /// Rows answered.
    pub rows: u64,
    /// Windows whose statement failed.
    pub errors: u64,
    /// Rows of windows left out at the window's bounds.
    pub cut_rows: u64,
    /// Seconds spent evaluating, all windows.
    pub eval_seconds: f64,
    /// Seconds the last window took.
    pub last_eval_seconds: f64,
    /// Seconds from the last window's end to its answer (by the clock).
    pub last_lag_seconds: f64,
    /// Dumps written, and failed.
    pub dumps: u64,
    /// Dumps that failed.
    pub dump_errors: u64,
    /// Webhook POSTs and alert-log lines made.
    pub notifications: u64,
    /// Webhook POSTs and alert-log lines that failed.
    pub notification_errors: u64,
    /// Actions dropped because their queue was full, or their filter could
    /// not be made from the row.
    pub actions_dropped: u64,
    /// The last error, if any.
    pub last_error: Option<String>,
}

/// What the API sees of one watch.
#[derive(Debug)]
struct Published {
    watch: HubWatch,
    stats: WatchStats,
    /// Rows kept: (end of their window, ns; the row as a JSON line).
    rows: VecDeque<(i64, Arc<str>)>,
    /// The rows of the last window that had any.
    latest: Vec<Arc<str>>,
    /// Subscribers of new rows.
    sender: tokio::sync::broadcast::Sender<Arc<str>>,
}

/// A watch as the API lists it.
#[derive(Debug, serde::Serialize)]
pub struct WatchInfo {
    /// Its name.
    pub name: String,
    /// Its statement.
    pub sql: String,
    /// Its built-in analysis, if any.
    pub analysis: Option<String>,
    /// Window length, seconds.
    pub window_secs: u64,
    /// Slide, seconds.
    pub slide_secs: u64,
    /// `config` or `api`.
    pub origin: &'static str,
    /// The dump action's filter template, if any.
    pub dump: Option<String>,
    /// Its counters.
    pub stats: WatchStats,
    /// The rows of its last window that had any, as JSON objects.
    pub latest: Vec<serde_json::Value>,
}

enum Command {
    Add(Box<HubWatch>),
    Remove(String),
}

/// The state shared by the watch thread and the API.
struct Shared {
    published: Mutex<BTreeMap<String, Published>>,
    commands: Mutex<Vec<Command>>,
    retention: Retention,
}

/// A job for the dumper thread.
struct DumpJob {
    watch: String,
    filter: hindsight_filter::Filter,
    at_ns: i64,
    before: Duration,
    after: Duration,
    label: String,
}

/// A job for the notifier thread.
enum Notice {
    Webhook {
        watch: String,
        url: String,
        body: Arc<str>,
    },
    Log {
        watch: String,
        path: PathBuf,
        line: Arc<str>,
    },
}

/// How long [`Hub::stop`] lets the last windows run before it cancels them.
pub const STOP_GRACE: Duration = Duration::from_secs(5);

/// Queue lengths of the action threads.
const DUMP_QUEUE: usize = 64;
const NOTICE_QUEUE: usize = 1024;

/// The watches of a running recorder; see the module's documentation.
pub struct Hub {
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hub").finish_non_exhaustive()
    }
}

/// Makes a new SQL session when the archive changed since the last (`None`
/// when it did not), for the watches' history.
pub type Sessions = Box<dyn FnMut() -> Option<SqlSession> + Send>;

impl Hub {
    /// Starts watching the packets of `feed` from now on, with `watcher` (a
    /// [`Watcher::dynamic`]), `sessions` for a newer view of the archive, and
    /// `watches` to begin with.
    pub fn start(
        feed: Feed,
        watcher: Watcher,
        sessions: Sessions,
        retention: Retention,
        watches: Vec<HubWatch>,
    ) -> Result<Self, WatchError> {
        let Feed {
            ring,
            link_type,
            dumper,
        } = feed;
        let shared = Arc::new(Shared {
            published: Mutex::new(BTreeMap::new()),
            commands: Mutex::new(Vec::new()),
            retention,
        });
        let hub_stop = Arc::new(AtomicBool::new(false));
        let mut hub = Self {
            shared: Arc::clone(&shared),
            stop: Arc::clone(&hub_stop),
            threads: Vec::new(),
        };
        let (dumps, dump_jobs) = std::sync::mpsc::sync_channel::<DumpJob>(DUMP_QUEUE);
        let (notices, notice_jobs) = std::sync::mpsc::sync_channel::<Notice>(NOTICE_QUEUE);
        let mut watcher = watcher;
        for watch in watches {
            hub.check_room()?;
            watcher.add(watch.spec.clone())?;
            publish(&shared, watch);
        }
        let spawn = |name: &str, f: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new()
                .name(name.to_owned())
                .stack_size(hindsight_sql::STACK_BYTES)
                .spawn(f)
                .map_err(|e| WatchError::Window(format!("cannot start the {name} thread: {e}")))
        };
        if let Some(dumper) = dumper {
            let shared = Arc::clone(&shared);
            hub.threads.push(spawn(
                "watch-dumper",
                Box::new(move || dump_loop(&dumper, &dump_jobs, &shared)),
            )?);
        }
        {
            let shared = Arc::clone(&shared);
            hub.threads.push(spawn(
                "watch-notifier",
                Box::new(move || notify_loop(&notice_jobs, &shared)),
            )?);
        }
        let cursor = ring.cursor_at_newest();
        let stop = hub_stop;
        let context = Context {
            shared,
            dumps,
            notices,
        };
        hub.threads.push(spawn(
            "watch",
            Box::new(move || {
                watch_loop(&ring, cursor, link_type, watcher, sessions, &context, &stop);
            }),
        )?);
        Ok(hub)
    }

    fn check_room(&self) -> Result<(), WatchError> {
        let count = self.shared.published.lock().map_or(0, |p| p.len());
        if count >= self.shared.retention.max_watches {
            return Err(WatchError::Window(format!(
                "there are {count} watches already, the most this server runs \
                 ([watches] max_watches)"
            )));
        }
        Ok(())
    }

    /// Adds a watch (checked by the caller with [`crate::check`]): it runs from
    /// the next chunk of the ring on.
    pub fn add(&self, watch: HubWatch) -> Result<(), WatchError> {
        self.check_room()?;
        let name = watch.spec.name.clone();
        {
            let Ok(published) = self.shared.published.lock() else {
                return Err(WatchError::Window("the watch state is poisoned".to_owned()));
            };
            if published.contains_key(&name) {
                return Err(WatchError::Window(format!(
                    "a watch is already named {name}"
                )));
            }
        }
        publish(&self.shared, watch.clone());
        if let Ok(mut commands) = self.shared.commands.lock() {
            commands.push(Command::Add(Box::new(watch)));
        }
        Ok(())
    }

    /// Removes the watch named `name`, cancelling its running window at
    /// once; false if there is none.
    pub fn remove(&self, name: &str) -> bool {
        let removed = self
            .shared
            .published
            .lock()
            .ok()
            .and_then(|mut published| published.remove(name));
        let Some(removed) = removed else {
            return false;
        };
        removed.watch.spec.bounds.cancel.cancel();
        if let Ok(mut commands) = self.shared.commands.lock() {
            commands.push(Command::Remove(name.to_owned()));
        }
        true
    }

    /// The watches, by name.
    pub fn list(&self) -> Vec<WatchInfo> {
        let Ok(published) = self.shared.published.lock() else {
            return Vec::new();
        };
        published.values().map(info).collect()
    }

    /// One watch.
    pub fn get(&self, name: &str) -> Option<WatchInfo> {
        self.shared.published.lock().ok()?.get(name).map(info)
    }

    /// The kept rows of `name` whose window ended after `since_ns`, as JSON
    /// lines, and a receiver of the rows to come (subscribed before the kept
    /// rows were read, so that none falls between).
    pub fn rows(&self, name: &str, since_ns: i64) -> Option<Rows> {
        let published = self.shared.published.lock().ok()?;
        let watch = published.get(name)?;
        let receiver = watch.sender.subscribe();
        let rows = watch
            .rows
            .iter()
            .filter(|(end, _)| *end > since_ns)
            .map(|(_, row)| Arc::clone(row))
            .collect();
        Some((rows, receiver))
    }

    /// Each watch's name and counters.
    pub fn stats(&self) -> Vec<(String, WatchStats)> {
        let Ok(published) = self.shared.published.lock() else {
            return Vec::new();
        };
        published
            .iter()
            .map(|(name, p)| (name.clone(), p.stats.clone()))
            .collect()
    }

    /// Stops the threads: the last windows are answered first, for at most
    /// [`STOP_GRACE`]; then every watch's window still running, or due, is
    /// cancelled, so that stopping never waits on a statement.
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let started = Instant::now();
        while self.threads.iter().any(|thread| !thread.is_finished())
            && started.elapsed() < STOP_GRACE
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        if let Ok(published) = self.shared.published.lock() {
            for watch in published.values() {
                watch.watch.spec.bounds.cancel.cancel();
            }
        }
        for thread in self.threads.drain(..).rev() {
            let _ = thread.join();
        }
    }
}

impl Drop for Hub {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn publish(shared: &Shared, watch: HubWatch) {
    let (sender, _) = tokio::sync::broadcast::channel(1024);
    if let Ok(mut published) = shared.published.lock() {
        published.insert(
            watch.spec.name.clone(),
            Published {
                watch,
                stats: WatchStats::default(),
                rows: VecDeque::new(),
                latest: Vec::new(),
                sender,
            },
        );
    }
}

fn info(p: &Published) -> WatchInfo {
    let spec = &p.watch.spec;
    WatchInfo {
        name: spec.name.clone(),
        sql: spec.sql.clone(),
        analysis: p.watch.analysis.clone(),
        window_secs: spec.window.range.as_secs(),
        slide_secs: spec.window.slide.as_secs(),
        origin: p.watch.origin,
        dump: p
            .watch
            .actions
            .dump
            .as_ref()
            .map(|d| d.filter.text().to_owned()),
        stats: p.stats.clone(),
        latest: p
            .latest
            .iter()
            .filter_map(|row| serde_json::from_str(row).ok())
            .collect(),
    }
}

/// What the watch thread hands on.
struct Context {
    shared: Arc<Shared>,
    dumps: SyncSender<DumpJob>,
    notices: SyncSender<Notice>,
}

/// How long the watch thread waits for a chunk before it looks at the clock.
const WAIT: Duration = Duration::from_millis(100);

/// How far behind the clock a quiet ring is taken to have delivered
/// everything (the producers' holding time, with a margin).
const QUIET_MARGIN: Duration = Duration::from_millis(250);

/// How often the watch thread asks for a newer view of the archive.
const SESSION_EVERY: Duration = Duration::from_secs(5);

fn watch_loop(
    ring: &Ring,
    mut cursor: hindsight_ring::Cursor,
    link_type: LinkType,
    mut watcher: Watcher,
    mut sessions: Sessions,
    context: &Context,
    stop: &AtomicBool,
) {
    let mut session_at = Instant::now();
    let mut answer = |answer: Answer| take_answer(context, answer);
    loop {
        if let Ok(mut commands) = context.shared.commands.lock() {
            for command in commands.drain(..) {
                match command {
                    Command::Add(watch) => {
                        let name = watch.spec.name.clone();
                        if let Err(error) = watcher.add(watch.spec) {
                            record_error(&context.shared, &name, &error.to_string());
                        }
                    }
                    Command::Remove(name) => {
                        watcher.remove(&name);
                    }
                }
            }
        }
        if session_at.elapsed() >= SESSION_EVERY {
            session_at = Instant::now();
            if let Some(session) = sessions() {
                let _ = watcher.set_session(session);
            }
        }
        let position = cursor.position();
        match cursor.next(WAIT) {
            Ok(Some(chunk)) => {
                for packet in chunk.iter() {
                    let frame = Frame {
                        ts_nanos: packet.ts_ns,
                        wire_len: packet.wire_len,
                        data: packet.data,
                        link_type,
                        iface: u32::from(packet.iface),
                    };
                    watcher.push_frame(&frame, &mut answer);
                }
            }
            Ok(None) => {
                // A quiet link: windows close by the clock once the ring has
                // delivered every packet up to a little before now.
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap_or_default()
                    .saturating_sub(QUIET_MARGIN);
                let now = i64::try_from(now.as_nanos()).unwrap_or(i64::MAX);
                if ring.settled_through(now).is_some_and(|seq| position >= seq) {
                    watcher.tick(now, &mut answer);
                }
            }
            Err(_) => break,
        }
        if stop.load(Ordering::Relaxed) {
            break;
        }
    }
    watcher.finish(&mut answer);
}

fn record_error(shared: &Shared, name: &str, error: &str) {
    if let Ok(mut published) = shared.published.lock()
        && let Some(watch) = published.get_mut(name)
    {
        watch.stats.errors += 1;
        watch.stats.last_error = Some(error.to_owned());
    }
}

fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

/// Keeps an answer, sends its rows to subscribers, and fires its actions.
fn take_answer(context: &Context, answer: Answer) {
    let shared = &context.shared;
    let lines = match &answer.rows {
        Ok(_) => answer_lines(&answer),
        Err(message) => Err(message.clone()),
    };
    let Ok(mut published) = shared.published.lock() else {
        return;
    };
    let Some(watch) = published.get_mut(&answer.watch) else {
        return;
    };
    let stats = &mut watch.stats;
    stats.windows += 1;
    stats.cut_rows += answer.cut;
    stats.eval_seconds += answer.took.as_secs_f64();
    stats.last_eval_seconds = answer.took.as_secs_f64();
    stats.last_lag_seconds = (now_ns() - answer.end_ns).max(0) as f64 / 1e9;
    let lines = match lines {
        Ok(lines) => lines,
        Err(message) => {
            stats.errors += 1;
            stats.last_error = Some(message);
            return;
        }
    };
    stats.rows += lines.len() as u64;
    let lines: Vec<Arc<str>> = lines.into_iter().map(Arc::from).collect();
    if !lines.is_empty() {
        watch.latest.clone_from(&lines);
    }
    for line in &lines {
        watch.rows.push_back((answer.end_ns, Arc::clone(line)));
        let _ = watch.sender.send(Arc::clone(line));
    }
    let keep_after = now_ns()
        .saturating_sub(i64::try_from(shared.retention.keep.as_nanos()).unwrap_or(i64::MAX));
    while watch.rows.front().is_some_and(|(end, _)| *end < keep_after)
        || watch.rows.len() > shared.retention.max_rows
    {
        watch.rows.pop_front();
    }
    let actions = watch.watch.actions.clone();
    let range = watch.watch.spec.window.range;
    for line in &lines {
        fire(context, &answer, &actions, range, line, &mut watch.stats);
    }
}

/// Sends the actions of one row to their threads.
fn fire(
    context: &Context,
    answer: &Answer,
    actions: &Actions,
    range: Duration,
    line: &Arc<str>,
    stats: &mut WatchStats,
) {
    if let Some(dump) = &actions.dump {
        let row: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(line).unwrap_or_default();
        let filter = dump
            .filter
            .render(&row)
            .and_then(|text| hindsight_filter::Filter::parse(&text).map_err(|e| e.to_string()));
        match filter {
            Ok(filter) => {
                let label = dump
                    .filter
                    .names
                    .first()
                    .and_then(|name| row.get(name))
                    .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
                    .unwrap_or_default();
                // The dumper makes it a file name (`Dumper::new_name`).
                let label = format!("{}-{label}", answer.watch);
                let job = DumpJob {
                    watch: answer.watch.clone(),
                    filter,
                    at_ns: answer.end_ns,
                    before: dump.before.unwrap_or(range),
                    after: dump.after,
                    label,
                };
                if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) =
                    context.dumps.try_send(job)
                {
                    stats.actions_dropped += 1;
                }
            }
            Err(error) => {
                stats.actions_dropped += 1;
                stats.last_error = Some(format!("dump filter: {error}"));
            }
        }
    }
    let mut notice = |notice| {
        if context.notices.try_send(notice).is_err() {
            stats.actions_dropped += 1;
        }
    };
    if let Some(url) = &actions.webhook {
        notice(Notice::Webhook {
            watch: answer.watch.clone(),
            url: url.clone(),
            body: Arc::clone(line),
        });
    }
    if let Some(path) = &actions.alert_log {
        notice(Notice::Log {
            watch: answer.watch.clone(),
            path: path.clone(),
            line: Arc::clone(line),
        });
    }
}

fn count(shared: &Shared, watch: &str, f: impl FnOnce(&mut WatchStats)) {
    if let Ok(mut published) = shared.published.lock()
        && let Some(p) = published.get_mut(watch)
    {
        f(&mut p.stats);
    }
}

fn dump_loop(dumper: &Dumper, jobs: &Receiver<DumpJob>, shared: &Shared) {
    while let Ok(job) = jobs.recv() {
        let result = dumper.dump(job.filter, job.at_ns, job.before, job.after, &job.label);
        count(shared, &job.watch, |stats| match result {
            Ok(_) => stats.dumps += 1,
            Err(error) => {
                stats.dump_errors += 1;
                stats.last_error = Some(format!("dump: {error}"));
            }
        });
    }
}

/// Longest a webhook POST may take.
const WEBHOOK_TIMEOUT: Duration = Duration::from_secs(5);

fn notify_loop(jobs: &Receiver<Notice>, shared: &Shared) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(WEBHOOK_TIMEOUT))
        .build()
        .into();
    while let Ok(notice) = jobs.recv() {
        let (watch, result) = match notice {
            Notice::Webhook { watch, url, body } => {
                let result = agent
                    .post(&url)
                    .header("content-type", "application/json")
                    .send(body.as_bytes())
                    .map(|_| ())
                    .map_err(|e| format!("webhook {url}: {e}"));
                (watch, result)
            }
            Notice::Log { watch, path, line } => {
                let result = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&path)
                    .and_then(|mut file| writeln!(file, "{line}"))
                    .map_err(|e| format!("alert log {}: {e}", path.display()));
                (watch, result)
            }
        };
        count(shared, &watch, |stats| match result {
            Ok(()) => stats.notifications += 1,
            Err(error) => {
                stats.notification_errors += 1;
                stats.last_error = Some(error);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_template_fills_columns_and_names_what_is_missing() {
        let template = RowTemplate::new("host $src and port $src_port").unwrap();
        let row: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(r#"{"src":"10.1.2.3","src_port":443,"n":5}"#).unwrap();
        assert_eq!(template.render(&row).unwrap(), "host 10.1.2.3 and port 443");
        let row: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(r#"{"src":"10.1.2.3","src_port":null}"#).unwrap();
        let error = template.render(&row).unwrap_err();
        assert!(error.contains("$src_port"), "{error}");
        assert!(RowTemplate::new("host $").is_err());
    }

    #[test]
    fn a_row_value_fills_a_template_as_one_literal_or_not_at_all() {
        let template = RowTemplate::new("host $src").unwrap();
        let row = |value: serde_json::Value| {
            let mut row = serde_json::Map::new();
            row.insert("src".to_owned(), value);
            template.render(&row)
        };
        for value in [
            "2001:db8::1",
            "10.0.0.0/8",
            "00:11:22:33:44:55",
            "example.com",
        ] {
            assert_eq!(row(value.into()).unwrap(), format!("host {value}"));
        }
        for value in ["127.0.0.1 or 1 == 1", "10.0.0.1)", "\"x\"", "a||b", ""] {
            let error = row(value.into()).unwrap_err();
            assert!(error.contains("not one value"), "{value}: {error}");
        }
    }
}
