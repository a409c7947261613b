//! The archive on this machine answers: its sealed segments and indexes.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use hindsight_filter::Filter;
use hindsight_output::Format;
use hindsight_query::search::{
    PacketSearch, SearchPlan, SearchRequest, incomplete_lines, unknown_line,
};
use hindsight_reader::{ConnQuery, decode_cursor};
use hindsight_sql::{Limits, SqlSession};

use crate::{
    Answered, Cancel, ConnQuestion, Output, PacketPlan, PacketQuestion, Page, Questions,
    SqlQuestion, write_found,
};

/// The archive at a directory.
#[derive(Clone, Debug)]
pub struct Local {
    root: PathBuf,
}

impl Local {
    /// The archive at `root`.
    pub fn new(root: &Path) -> Self {
        Self {
            root: root.to_owned(),
        }
    }
}

/// The search of a packet question answered as `format`.
pub(crate) fn search_request(question: &PacketQuestion, format: Format) -> Result<SearchRequest> {
    Ok(SearchRequest {
        filter: parse_filter(&question.filter)?,
        time: question.time,
        limit: question.limit,
        with_data: format.carries_bytes() && !question.count,
        capture_only: format.is_capture() || question.count,
    })
}

/// Parses a filter, saying so when it is not one.
pub(crate) fn parse_filter(text: &str) -> Result<Filter> {
    Filter::parse(text).map_err(|e| anyhow::anyhow!("invalid filter:\n{e}"))
}

/// A packet question planned over the archive's segments in its window.
struct Planned {
    search: PacketSearch,
    request: SearchRequest,
    plan: SearchPlan,
    count: bool,
    explain: bool,
    started: Instant,
}

impl PacketPlan for Planned {
    fn write(
        self: Box<Self>,
        format: Format,
        out: &mut dyn Write,
        _cancel: Cancel,
    ) -> Result<Answered> {
        let Self {
            search,
            request,
            plan,
            ..
        } = *self;
        let stats = write_found(format, self.count, out, |visit| {
            search.execute(&request, &plan, visit)
        })?;
        let mut lines = incomplete_lines(search.archive(), &stats.skipped);
        lines.extend(unknown_line(&stats).map(|line| format!("warning: {line}")));
        let mut answered = Answered::went_without(lines);
        if self.explain {
            let explain = stats.explain(self.started.elapsed().as_secs_f64());
            answered.notes.insert(0, explain);
        }
        // A command ends soon after: closing the read-only index would only
        // free memory (about a millisecond, a tenth of a query the index
        // answers alone).
        std::mem::forget(search);
        Ok(answered)
    }
}

impl Questions for Local {
    fn plan(&self, question: &PacketQuestion, format: Format) -> Result<Box<dyn PacketPlan>> {
        let root = &self.root;
        let search = PacketSearch::open_within(root, question.time)
            .with_context(|| format!("cannot open archive {}", root.display()))?
            .with_remote(hindsight_reader::remote_segments(root)?);
        let request = search_request(question, format)?;
        let started = Instant::now();
        let plan = search.plan(&request)?;
        Ok(Box::new(Planned {
            search,
            request,
            plan,
            count: question.count,
            explain: question.explain,
            started,
        }))
    }

    fn page(&self, question: &ConnQuestion) -> Result<Page> {
        let query = conn_query(question)?;
        let page = hindsight_reader::sealed_connections(&self.root, &query)?;
        Ok(Page::of_lookup(page))
    }

    fn sql(
        &self,
        question: &SqlQuestion,
        format: Format,
        out: &mut Output<'_>,
    ) -> Result<Answered> {
        let root = &self.root;
        let mut session = SqlSession::open(root)
            .with_context(|| format!("cannot open archive {}", root.display()))?;
        let settings = hindsight_store::settings::archive_settings(root, None)?;
        if !settings.home.is_empty() {
            session.set_home(settings.home);
        }
        session = session.with_objects(settings.objects.as_ref())?;
        if question.allow_writes {
            session = session.allow_writes();
        }
        // Before the output is opened: a refused statement touches no file.
        session.check(&question.text)?;
        if question.explain {
            writeln!(out.open()?, "{}", session.explain(&question.text)?)?;
            return Ok(Answered::default());
        }
        let limits = Limits {
            max_rows: Some(question.max_rows),
            ..Limits::default()
        };
        session.run(&question.text, format, out.open()?, &limits)?;
        Ok(Answered::went_without(session.incomplete_lines()))
    }
}

/// The connection index's query of a question: its address ranges (from
/// `ip`, else from the filter), checked before anything is asked.
pub(crate) fn conn_query(question: &ConnQuestion) -> Result<ConnQuery> {
    let filter = question.filter.as_deref().map(parse_filter).transpose()?;
    Ok(ConnQuery {
        ranges: ConnQuery::ranges_of(question.ip.as_deref(), filter.as_ref())?,
        filter,
        time: question.time,
        limit: question.limit,
        after: question.after.as_deref().map(decode_cursor).transpose()?,
        timeout: None,
    })
}

/// Whether an archive answers `question` by scanning its `flows` segments
/// (a filter that names no address and no name the index keeps), which
/// costs what a scan costs; an invalid question is left to be refused
/// when asked.
pub fn scans(question: &ConnQuestion) -> bool {
    conn_query(question).is_ok_and(|query| query.scans())
}
