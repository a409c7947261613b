//! A cluster of recorders answers: only the nodes that may hold matches are
//! asked, their answers merged and tagged with their node.

use std::io::Write;
use std::path::Path;

use anyhow::Result;
use hindsight_cluster::client::{self, report_lines};
use hindsight_cluster::{ClusterClient, ClusterConfig, Outcome};
use hindsight_output::Format;

use crate::{
    Answered, Cancel, ConnQuestion, Connection, Limits, Output, PacketPlan, PacketQuestion, Page,
    Questions, SharedLimits, SqlQuestion,
};

/// A cluster, through its client.
#[derive(Clone, Debug)]
pub struct Cluster {
    client: ClusterClient,
    limits: SharedLimits,
}

impl Cluster {
    /// The cluster of the `[cluster]` file `file`.
    pub fn load(file: &Path) -> Result<Self> {
        Ok(Self::new(ClusterClient::new(ClusterConfig::load(file)?)))
    }

    /// The cluster `client` asks.
    pub fn new(client: ClusterClient) -> Self {
        Self {
            client,
            limits: SharedLimits::default(),
        }
    }

    /// Within `limits`: a packet answer longer than their `max_rows` is an
    /// error, not a short answer; a statement runs within their time,
    /// cancel flag and memory.
    pub fn with_limits(self, limits: Limits) -> Self {
        Self {
            limits: SharedLimits::new(limits),
            ..self
        }
    }

    /// The limits of this service and its clones, which may be changed.
    pub fn limits(&self) -> &SharedLimits {
        &self.limits
    }

    /// How a federated answer went, as the asker is told.
    fn answered(outcome: &Outcome) -> Answered {
        Answered {
            notes: report_lines(outcome),
            partial: outcome.header(),
            nodes: outcome.route.ask.iter().map(|c| c.node.clone()).collect(),
            ..Answered::default()
        }
    }
}

/// A packet question for the cluster, asked when it is written.
struct Planned {
    cluster: Cluster,
    question: client::PacketQuestion,
}

impl PacketPlan for Planned {
    fn gathered(&self) -> bool {
        true
    }

    fn write(
        self: Box<Self>,
        format: Format,
        out: &mut dyn Write,
        _cancel: Cancel,
    ) -> Result<Answered> {
        let outcome = client::write_packets(&self.cluster.client, &self.question, format, out)?;
        Ok(Cluster::answered(&outcome))
    }
}

impl Questions for Cluster {
    fn plan(&self, question: &PacketQuestion, _format: Format) -> Result<Box<dyn PacketPlan>> {
        crate::local::parse_filter(&question.filter)?;
        Ok(Box::new(Planned {
            cluster: self.clone(),
            question: client::PacketQuestion {
                filter: question.filter.clone(),
                time: question.time,
                limit: question.limit,
                max_rows: self.limits.get().max_rows,
                count: question.count,
            },
        }))
    }

    fn page(&self, question: &ConnQuestion) -> Result<Page> {
        let page = self.client.connections(question)?;
        let mut answered = Self::answered(&page.outcome);
        answered.next = page.next.clone();
        Ok(Page {
            connections: page
                .entries
                .iter()
                .map(|(node, entry)| Connection {
                    node: Some(node.clone()),
                    entry: entry.clone(),
                    community_seed: page.community_seed(node),
                    at: None,
                })
                .collect(),
            community_seed: None,
            answered,
        })
    }

    fn sql(
        &self,
        question: &SqlQuestion,
        format: Format,
        out: &mut Output<'_>,
    ) -> Result<Answered> {
        anyhow::ensure!(
            !question.allow_writes,
            "a cluster's statements only read: statements that write run on one archive"
        );
        let bounds = self.limits.get();
        let limits = hindsight_sql::Limits {
            max_rows: Some(question.max_rows),
            ..bounds.statement()
        };
        let out: &mut dyn Write = out.open()?;
        let outcome = hindsight_cluster::sql::answer(
            self.client.clone(),
            &question.text,
            question.explain,
            format,
            out,
            &limits,
            bounds.memory_bytes,
        )?;
        Ok(Self::answered(&outcome))
    }
}
