//! One way to ask. The questions hindsight answers ([`Questions`]: packets,
//! connections, SQL) and the three places that answer them: the archive on
//! this machine ([`Local`]), the `serve` that captures into that archive
//! ([`Serving`], which sees the rows not yet sealed too), and a cluster of
//! recorders ([`Cluster`]). Where a question goes is chosen once, by [`open`];
//! what asks (a subcommand) sees only the trait.

mod cluster;
mod local;
mod serving;
mod snapshots;

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use hindsight_model::PacketRecord;
use hindsight_output::Format;
use hindsight_output::connections::ConnWriter;
use hindsight_output::packets::packet_sink;
use hindsight_query::search::SearchStats;
use hindsight_store::TimeRange;

pub use cluster::Cluster;
pub use local::{Local, scans};
pub use serving::{Client, Serving};
pub use snapshots::{Snapshots, ascii, header_text};

pub use hindsight_model::connection::ConnEntry;
pub use hindsight_reader::{Histogram, Limits};

/// The limits of a question service, shared by its clones: a running server
/// may change them (`serve` reloading its configuration), and every question
/// asked after that is bound by the new ones.
#[derive(Clone, Debug, Default)]
pub struct SharedLimits(std::sync::Arc<std::sync::RwLock<Limits>>);

impl SharedLimits {
    /// Shares `limits`.
    pub fn new(limits: Limits) -> Self {
        Self(std::sync::Arc::new(std::sync::RwLock::new(limits)))
    }

    /// The limits now.
    pub fn get(&self) -> Limits {
        match self.0.read() {
            Ok(limits) => limits.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Bounds the questions asked from now on by `limits`.
    pub fn set(&self, limits: Limits) {
        match self.0.write() {
            Ok(mut held) => *held = limits,
            Err(poisoned) => *poisoned.into_inner() = limits,
        }
    }
}
pub use hindsight_sql::Cancel;

/// Response header of an answer that went without something (damaged
/// segments): what it went without.
pub const INCOMPLETE_HEADER: &str = "hindsight-incomplete";

/// Response header of a page of connections that has a next page: its cursor.
pub const NEXT_HEADER: &str = "hindsight-next";

/// The packets matching a filter in a window.
#[derive(Clone, Debug)]
pub struct PacketQuestion {
    /// The filter, in either syntax (empty: every packet).
    pub filter: String,
    /// The window.
    pub time: TimeRange,
    /// At most this many packets.
    pub limit: Option<u64>,
    /// Only their number, on a line.
    pub count: bool,
    /// Also say how many segments, row groups and rows each pruning level
    /// kept (only the archive itself can say).
    pub explain: bool,
}

/// One page of the connections of an address, a network or a filter (the
/// cluster client's question, which every answerer takes).
pub use hindsight_cluster::client::ConnQuestion;

/// A SQL statement.
#[derive(Clone, Debug)]
pub struct SqlQuestion {
    /// The statement.
    pub text: String,
    /// A result longer than this is an error, not a short answer.
    pub max_rows: u64,
    /// Its plan instead of its rows.
    pub explain: bool,
    /// Let it write, create, drop or set options (only the archive itself
    /// runs such a statement, with the caller's own rights).
    pub allow_writes: bool,
}

/// How an answer went, beside its rows.
#[derive(Debug, Default)]
pub struct Answered {
    /// What to tell the asker: who answered, what the answer went without.
    pub notes: Vec<String>,
    /// Damage (or bytes the archive did not keep) left something out.
    pub incomplete: bool,
    /// The nodes of a cluster that did not answer and why, as the
    /// `hindsight-partial` header says it.
    pub partial: Option<String>,
    /// The nodes of a cluster asked.
    pub nodes: Vec<String>,
    /// The cursor of the next page of connections, if there is one.
    pub next: Option<String>,
}

impl Answered {
    /// An answer whose notes are what it went without, a line each:
    /// incomplete if there are any.
    pub fn went_without(notes: Vec<String>) -> Self {
        Self {
            incomplete: !notes.is_empty(),
            notes,
            ..Self::default()
        }
    }
}

/// A packet question planned: what it will cost and what its answer goes
/// without are known before a byte of it is written.
pub trait PacketPlan: Send {
    /// About how many rows it decodes here (what a server's admission sorts
    /// questions by); 0 when they are decoded elsewhere.
    fn rows(&self) -> u64 {
        0
    }

    /// Whether it is answered from covering postings alone, in microseconds.
    fn is_small(&self) -> bool {
        false
    }

    /// What its answer goes without, known before reading (damaged or
    /// missing segments).
    fn skipped(&self) -> Vec<String> {
        Vec::new()
    }

    /// Whether what its answer went without is known only at its end (a
    /// cluster's nodes): the answer is gathered before it is sent.
    fn gathered(&self) -> bool {
        false
    }

    /// Writes the packets as `format` (or, with the question's `count`, their
    /// number) to `out`, stopping when `cancel` is set. The notes of the
    /// answer name only what was met after the plan.
    fn write(
        self: Box<Self>,
        format: Format,
        out: &mut dyn Write,
        cancel: Cancel,
    ) -> Result<Answered>;

    /// Counts the packets in `buckets` buckets of the window (of the span of
    /// the matching segments, without one): what a reader of the archive
    /// answers (`hindsight serve`'s `/api/v1/histogram`).
    fn histogram(self: Box<Self>, _buckets: usize, _cancel: Cancel) -> Result<Histogram> {
        anyhow::bail!("packets are counted by time by a reader of the archive (hindsight serve)")
    }
}

/// What visits the packets a search finds: `true` to go on.
pub(crate) type Visit<'v> = dyn FnMut(&PacketRecord, &[u8]) -> io::Result<bool> + 'v;

/// Writes the packets `search` visits to `out` as `format` or, with `count`,
/// their number on a line; gives what the search says of itself.
pub(crate) fn write_found<E: Into<anyhow::Error>>(
    format: Format,
    count: bool,
    out: &mut dyn Write,
    search: impl FnOnce(&mut Visit<'_>) -> Result<SearchStats, E>,
) -> Result<SearchStats> {
    if count {
        let stats = search(&mut |_, _| Ok(true)).map_err(Into::into)?;
        writeln!(out, "{}", stats.rows_matched)?;
        return Ok(stats);
    }
    let mut sink = packet_sink(format, Box::new(out)).map_err(anyhow::Error::msg)?;
    let stats =
        search(&mut |record, data| sink.write(record, data).map(|()| true)).map_err(Into::into)?;
    sink.finish().context("cannot write the answer")?;
    Ok(stats)
}

/// One connection of a page, with its node in a cluster's answer.
#[derive(Clone, Debug)]
pub struct Connection {
    /// The node that holds it (a cluster's answer).
    pub node: Option<String>,
    /// The connection.
    pub entry: ConnEntry,
    /// Its archive's Community ID seed.
    pub community_seed: u16,
    /// Its place in its archive's order, when that is not its key (a lookup
    /// by name).
    pub at: Option<Vec<u8>>,
}

/// One page of connections.
#[derive(Debug, Default)]
pub struct Page {
    /// The connections, in the index's order.
    pub connections: Vec<Connection>,
    /// The archive's Community ID seed (of one archive's page).
    pub community_seed: Option<u16>,
    /// How the answer went, with the next page's cursor.
    pub answered: Answered,
}

impl Page {
    /// One archive's page: its `entries`, their `places` in its order when
    /// those are not their keys, its Community ID `seed`, and the cursor of
    /// its `next` page.
    pub fn of_archive(
        entries: Vec<ConnEntry>,
        places: Vec<Vec<u8>>,
        seed: u16,
        next: Option<String>,
    ) -> Self {
        let mut places = places.into_iter();
        Self {
            connections: entries
                .into_iter()
                .map(|entry| Connection {
                    node: None,
                    entry,
                    community_seed: seed,
                    at: places.next(),
                })
                .collect(),
            community_seed: Some(seed),
            answered: Answered {
                next,
                ..Answered::default()
            },
        }
    }

    /// One archive's page as its reader looked it up: with what a scan
    /// left out as warnings, the answer then incomplete.
    pub fn of_lookup(page: hindsight_reader::Connections) -> Self {
        let next = page.next.as_deref().map(hindsight_reader::encode_cursor);
        let skipped = page.skipped;
        let mut this = Self::of_archive(page.entries, page.places, page.community_seed, next);
        if !skipped.is_empty() {
            this.answered.incomplete = true;
            this.answered.notes = skipped
                .into_iter()
                .map(|line| format!("warning: {line}"))
                .collect();
        }
        this
    }

    /// Writes the page as `format` to `out`.
    pub fn write(&self, format: Format, out: &mut dyn Write) -> Result<()> {
        let mut writer = ConnWriter::new(format).map_err(anyhow::Error::msg)?;
        for connection in &self.connections {
            if let Some(node) = &connection.node {
                writer.set_node(node);
            }
            writer.set_community_seed(connection.community_seed);
            writer.write(out, &connection.entry)?;
        }
        writer.finish(out)?;
        Ok(())
    }
}

/// The questions hindsight answers, wherever the answer comes from.
pub trait Questions: Send + Sync {
    /// Plans the packets matching `question`, to be written as `format`.
    fn plan(&self, question: &PacketQuestion, format: Format) -> Result<Box<dyn PacketPlan>>;

    /// Writes the packets matching `question` to `out` as `format` (or, with
    /// `count`, their number).
    fn packets(
        &self,
        question: &PacketQuestion,
        format: Format,
        out: &mut Output<'_>,
    ) -> Result<Answered> {
        let plan = self.plan(question, format)?;
        let before = plan.skipped();
        let mut answered = plan.write(format, out.open()?, Cancel::new())?;
        if !before.is_empty() {
            answered.incomplete = true;
            let before = before.into_iter().map(|what| format!("warning: {what}"));
            answered.notes.splice(0..0, before);
        }
        Ok(answered)
    }

    /// One page of connections.
    fn page(&self, question: &ConnQuestion) -> Result<Page>;

    /// Writes one page of connections to `out` as `format`.
    fn connections(
        &self,
        question: &ConnQuestion,
        format: Format,
        out: &mut Output<'_>,
    ) -> Result<Answered> {
        let page = self.page(question)?;
        page.write(format, out.open()?)?;
        Ok(page.answered)
    }

    /// Writes the result (or plan) of a statement to `out` as `format`.
    fn sql(&self, question: &SqlQuestion, format: Format, out: &mut Output<'_>)
    -> Result<Answered>;
}

/// Where questions go: an archive, or a cluster's file.
#[derive(Clone, Debug, Default)]
pub struct Source {
    /// The archive directory.
    pub archive: Option<PathBuf>,
    /// The cluster's `[cluster]` file.
    pub cluster: Option<PathBuf>,
    /// Read the archive's sealed segments even when a `serve` captures into it.
    pub sealed_only: bool,
}

/// What answers the questions of `source`: its cluster; else the `serve`
/// that captures into its archive (which falls back to the archive when it
/// does not answer); else the archive.
pub fn open(source: &Source) -> Result<Box<dyn Questions>> {
    if let Some(file) = &source.cluster {
        return Ok(Box::new(Cluster::load(file)?));
    }
    let Some(root) = source.archive.as_deref() else {
        anyhow::bail!("no archive: give --archive DIR (or HINDSIGHT_ARCHIVE) or --cluster FILE");
    };
    let local = Local::new(root);
    match Client::find(root).filter(|_| !source.sealed_only) {
        Some(client) => Ok(Box::new(Serving::new(client, local))),
        None => Ok(Box::new(local)),
    }
}

/// Where an answer goes: a file, or standard output. Nothing is created
/// before the answer's first byte (or [`Output::open`]), so a question
/// refused touches no file.
pub struct Output<'a> {
    path: Option<PathBuf>,
    out: Option<Box<dyn Write + 'a>>,
}

impl std::fmt::Debug for Output<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Output").field("path", &self.path).finish()
    }
}

impl<'a> Output<'a> {
    /// To `path`, or to standard output without one.
    pub fn to(path: Option<&Path>) -> Self {
        Self {
            path: path.map(Path::to_owned),
            out: None,
        }
    }

    /// To `out`.
    pub fn over(out: &'a mut dyn Write) -> Self {
        Self {
            path: None,
            out: Some(Box::new(out)),
        }
    }

    /// Creates the file (or locks standard output) if not yet done.
    pub fn open(&mut self) -> io::Result<&mut dyn Write> {
        if self.out.is_none() {
            self.out = Some(hindsight_output::create(self.path.as_deref())?);
        }
        Ok(self.out.as_deref_mut().expect("opened"))
    }

    /// Flushes what was written, if anything was.
    pub fn finish(&mut self) -> io::Result<()> {
        match &mut self.out {
            Some(out) => out.flush(),
            None => Ok(()),
        }
    }
}

impl Write for Output<'_> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.open()?.write(data)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.finish()
    }
}
