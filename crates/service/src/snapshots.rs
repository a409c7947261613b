//! A long-lived reader of the archive answers (what `serve` asks): each
//! question over the reader's current snapshot, its sealed segments and the
//! unsealed tail, within the bounds the reader was given.

use std::io::Write;
use std::sync::Arc;

use anyhow::Result;
use hindsight_output::Format;
use hindsight_query::search::{SearchPlan, SearchRequest, unknown_line};
use hindsight_reader::{ConnQuery, HistogramMethod, Limits, Reader, Snapshot};
use hindsight_store::{TailView, TimeRange};

use crate::local::{conn_query, search_request};
use crate::{
    Answered, Cancel, ConnQuestion, Histogram, Output, PacketPlan, PacketQuestion, Page, Questions,
    SharedLimits, SqlQuestion, write_found,
};

/// The archive a reader holds open, within `limits` (rows and time).
#[derive(Clone, Debug)]
pub struct Snapshots {
    reader: Arc<Reader>,
    limits: SharedLimits,
    tail: Option<TailView>,
}

impl Snapshots {
    /// Questions over `reader`'s snapshots, each within `limits`.
    pub fn new(reader: Arc<Reader>, limits: Limits) -> Self {
        Self {
            reader,
            limits: SharedLimits::new(limits),
            tail: None,
        }
    }

    /// The limits of this service and its clones, which may be changed.
    pub fn limits(&self) -> &SharedLimits {
        &self.limits
    }

    /// With `tail` for the unsealed rows instead of the reader's own (a
    /// statement worker's, sent the recorder's tail).
    pub fn with_tail(self, tail: Option<TailView>) -> Self {
        Self { tail, ..self }
    }

    fn snapshot(&self) -> Result<Arc<Snapshot>> {
        Ok(match &self.tail {
            Some(view) => self.reader.snapshot_with(Some(view.clone()))?,
            None => self.reader.snapshot()?,
        })
    }
}

/// A packet question planned over one snapshot.
struct Planned {
    snapshot: Arc<Snapshot>,
    request: SearchRequest,
    plan: SearchPlan,
    limits: Limits,
    count: bool,
}

impl Planned {
    fn limits(&self, cancel: Cancel) -> Limits {
        Limits {
            cancel,
            ..self.limits.clone()
        }
    }
}

impl PacketPlan for Planned {
    fn rows(&self) -> u64 {
        self.snapshot.plan_rows(&self.request, &self.plan)
    }

    fn is_small(&self) -> bool {
        self.snapshot.is_small(&self.plan)
    }

    fn skipped(&self) -> Vec<String> {
        let mut parts = self.snapshot.catalog_damage();
        parts.extend(self.plan.stats.skipped.iter().map(ToString::to_string));
        parts
    }

    fn write(
        self: Box<Self>,
        format: Format,
        out: &mut dyn Write,
        cancel: Cancel,
    ) -> Result<Answered> {
        let limits = self.limits(cancel);
        let (request, plan) = (&self.request, &self.plan);
        let stats = write_found(format, self.count, out, |visit| {
            self.snapshot.search_planned(request, plan, &limits, visit)
        })?;
        // The plan's skipped segments are the first of the execution's.
        let before = self.plan.stats.skipped.len().min(stats.skipped.len());
        let notes: Vec<String> = stats.skipped[before..]
            .iter()
            .map(ToString::to_string)
            .chain(unknown_line(&stats))
            .collect();
        Ok(Answered::went_without(notes))
    }

    fn histogram(self: Box<Self>, buckets: usize, cancel: Cancel) -> Result<Histogram> {
        let limits = Limits {
            max_rows: None,
            ..self.limits(cancel)
        };
        Ok(self.snapshot.histogram(
            &self.request,
            Some(self.plan),
            buckets,
            &limits,
            HistogramMethod::Auto,
        )?)
    }
}

impl Questions for Snapshots {
    fn plan(&self, question: &PacketQuestion, format: Format) -> Result<Box<dyn PacketPlan>> {
        let request = search_request(question, format)?;
        let snapshot = self.snapshot()?;
        let plan = snapshot.plan(&request)?;
        Ok(Box::new(Planned {
            snapshot,
            request,
            plan,
            limits: self.limits.get(),
            count: question.count,
        }))
    }

    fn page(&self, question: &ConnQuestion) -> Result<Page> {
        let query = ConnQuery {
            timeout: self.limits.get().timeout,
            ..conn_query(question)?
        };
        let page = self.snapshot()?.connections(&query)?;
        Ok(Page::of_lookup(page))
    }

    fn sql(
        &self,
        question: &SqlQuestion,
        format: Format,
        out: &mut Output<'_>,
    ) -> Result<Answered> {
        anyhow::ensure!(
            !question.allow_writes,
            "statements asked of a running server only read: a statement that writes runs on \
             the archive itself"
        );
        let bounds = self.limits.get();
        let session = self.snapshot()?.sql(&bounds)?;
        session.check(&question.text)?;
        if question.explain {
            writeln!(out.open()?, "{}", session.explain(&question.text)?)?;
            return Ok(Answered::default());
        }
        let limits = hindsight_sql::Limits {
            max_rows: Some(question.max_rows),
            ..bounds.statement()
        };
        session.run(&question.text, format, out.open()?, &limits)?;
        Ok(Answered::went_without(session.skipped()))
    }
}

impl hindsight_cluster::LocalNode for Snapshots {
    /// This node's share of a cluster's packets, read here without a request
    /// to itself: in the rows format, whole, with what it went without.
    fn rows(
        &self,
        filter: &str,
        time: TimeRange,
        limit: Option<u64>,
    ) -> Result<(Vec<u8>, Option<String>), String> {
        let question = PacketQuestion {
            filter: filter.to_owned(),
            time,
            limit,
            count: false,
            explain: false,
        };
        let plan = self
            .plan(&question, Format::Rows)
            .map_err(|e| format!("{e:#}"))?;
        let mut parts = plan.skipped();
        let mut bytes = Vec::new();
        let answered = plan
            .write(Format::Rows, &mut bytes, Cancel::new())
            .map_err(|e| format!("{e:#}"))?;
        parts.extend(answered.notes);
        Ok((bytes, header_text(&parts)))
    }
}

/// `parts` joined into one header value (visible ASCII only), `None` if there
/// are none.
pub fn header_text(parts: &[String]) -> Option<String> {
    if parts.is_empty() {
        return None;
    }
    Some(ascii(&parts.join("; ")))
}

/// `text` as a header holds it: visible ASCII only.
pub fn ascii(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '?'
            }
        })
        .collect()
}
