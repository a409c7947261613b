//! One way to ask. The questions hindsight answers ([`Questions`]: packets,
//! connections, SQL) and the three places that answer them: the archive on
//! this machine ([`Local`]), the `serve` that captures into that archive
//! ([`Serving`], which sees the rows not yet sealed too), and a cluster of
//! recorders ([`Cluster`]). Where a question goes is chosen once, by [`open`];
//! what asks (a subcommand) sees only the trait.

mod cluster;
mod local;
mod serving;

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use anyhow::Result;
use hindsight_output::Format;
use hindsight_store::TimeRange;

pub use cluster::Cluster;
pub use local::Local;
pub use serving::{Client, Serving};

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
    /// A node of a cluster did not answer.
    pub partial: bool,
    /// The cursor of the next page of connections, if there is one.
    pub next: Option<String>,
}

/// The questions hindsight answers, wherever the answer comes from.
pub trait Questions {
    /// Writes the packets matching `question` to `out` as `format` (or, with
    /// `count`, their number).
    fn packets(
        &self,
        question: &PacketQuestion,
        format: Format,
        out: &mut Output,
    ) -> Result<Answered>;

    /// Writes one page of connections to `out` as `format`.
    fn connections(
        &self,
        question: &ConnQuestion,
        format: Format,
        out: &mut Output,
    ) -> Result<Answered>;

    /// Writes the result (or plan) of a statement to `out` as `format`.
    fn sql(&self, question: &SqlQuestion, format: Format, out: &mut Output) -> Result<Answered>;
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
pub struct Output {
    path: Option<PathBuf>,
    out: Option<Box<dyn Write>>,
}

impl std::fmt::Debug for Output {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Output").field("path", &self.path).finish()
    }
}

impl Output {
    /// To `path`, or to standard output without one.
    pub fn to(path: Option<&Path>) -> Self {
        Self {
            path: path.map(Path::to_owned),
            out: None,
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

impl Write for Output {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.open()?.write(data)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.finish()
    }
}
