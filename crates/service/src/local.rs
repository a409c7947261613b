//! The archive on this machine answers: its sealed segments and indexes.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use hindsight_filter::Filter;
use hindsight_output::Format;
use hindsight_output::connections::ConnWriter;
use hindsight_output::packets::packet_sink;
use hindsight_query::search::{PacketSearch, SearchRequest, incomplete_lines, unknown_line};
use hindsight_reader::{ConnQuery, decode_cursor, encode_cursor};
use hindsight_sql::{Limits, SqlSession};

use crate::{Answered, ConnQuestion, Output, PacketQuestion, Questions, SqlQuestion};

/// The archive at a directory.
#[derive(Debug)]
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

    /// The answer's warnings: what it went without, a line each.
    fn answered(lines: Vec<String>) -> Answered {
        Answered {
            incomplete: !lines.is_empty(),
            notes: lines,
            ..Answered::default()
        }
    }
}

/// Parses a filter, saying so when it is not one.
pub(crate) fn parse_filter(text: &str) -> Result<Filter> {
    Filter::parse(text).map_err(|e| anyhow::anyhow!("invalid filter:\n{e}"))
}

impl Questions for Local {
    fn packets(
        &self,
        question: &PacketQuestion,
        format: Format,
        out: &mut Output,
    ) -> Result<Answered> {
        let root = &self.root;
        let search = PacketSearch::open_within(root, question.time)
            .with_context(|| format!("cannot open archive {}", root.display()))?
            .with_remote(hindsight_reader::remote_segments(root)?);
        let request = SearchRequest {
            filter: parse_filter(&question.filter)?,
            time: question.time,
            limit: question.limit,
            with_data: format.is_capture() && !question.count,
            capture_only: format.is_capture() || question.count,
        };
        let started = Instant::now();
        let plan = search.plan(&request)?;
        let stats = if question.count {
            let stats = search.execute(&request, &plan, &mut |_, _| Ok(true))?;
            writeln!(out, "{}", stats.rows_matched)?;
            stats
        } else {
            let mut sink =
                packet_sink(format, Box::new(out.open()?)).map_err(anyhow::Error::msg)?;
            let stats = search.execute(&request, &plan, &mut |record, data| {
                sink.write(record, data).map(|()| true)
            })?;
            sink.finish()?;
            stats
        };
        let mut lines = incomplete_lines(search.archive(), &stats.skipped);
        lines.extend(unknown_line(&stats).map(|line| format!("warning: {line}")));
        let mut answered = Self::answered(lines);
        if question.explain {
            let explain = stats.explain(started.elapsed().as_secs_f64());
            answered.notes.insert(0, explain);
        }
        // A command ends soon after: closing the read-only index would only
        // free memory (about a millisecond, a tenth of a query the index
        // answers alone).
        std::mem::forget(search);
        Ok(answered)
    }

    fn connections(
        &self,
        question: &ConnQuestion,
        format: Format,
        out: &mut Output,
    ) -> Result<Answered> {
        let query = conn_query(question)?;
        let page = hindsight_reader::sealed_connections(&self.root, &query)?;
        let mut writer = ConnWriter::new(format).map_err(anyhow::Error::msg)?;
        writer.set_community_seed(page.community_seed);
        let out = out.open()?;
        for entry in &page.entries {
            writer.write(out, entry)?;
        }
        writer.finish(out)?;
        Ok(Answered {
            next: page.next.as_deref().map(encode_cursor),
            ..Answered::default()
        })
    }

    fn sql(&self, question: &SqlQuestion, format: Format, out: &mut Output) -> Result<Answered> {
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
        Ok(Self::answered(session.incomplete_lines()))
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
    })
}
