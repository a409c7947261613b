//! A cluster of recorders answers: only the nodes that may hold matches are
//! asked, their answers merged and tagged with their node.

use std::io::Write;
use std::path::Path;

use anyhow::Result;
use hindsight_cluster::client::{self, report_lines};
use hindsight_cluster::{ClusterClient, ClusterConfig, Outcome};
use hindsight_output::Format;
use hindsight_output::connections::ConnWriter;
use hindsight_sql::Limits;

use crate::{Answered, ConnQuestion, Output, PacketQuestion, Questions, SqlQuestion};

/// A cluster, through its client.
#[derive(Debug)]
pub struct Cluster {
    client: ClusterClient,
}

impl Cluster {
    /// The cluster of the `[cluster]` file `file`.
    pub fn load(file: &Path) -> Result<Self> {
        Ok(Self::new(ClusterClient::new(ClusterConfig::load(file)?)))
    }

    /// The cluster `client` asks.
    pub fn new(client: ClusterClient) -> Self {
        Self { client }
    }

    /// How a federated answer went, as the asker is told.
    fn answered(outcome: &Outcome) -> Answered {
        Answered {
            notes: report_lines(outcome),
            partial: outcome.is_partial(),
            ..Answered::default()
        }
    }
}

impl Questions for Cluster {
    fn packets(
        &self,
        question: &PacketQuestion,
        format: Format,
        out: &mut Output,
    ) -> Result<Answered> {
        let question = client::PacketQuestion {
            filter: question.filter.clone(),
            time: question.time,
            limit: question.limit,
            max_rows: None,
            count: question.count,
        };
        let outcome = client::write_packets(&self.client, &question, format, out.open()?)?;
        Ok(Self::answered(&outcome))
    }

    fn connections(
        &self,
        question: &ConnQuestion,
        format: Format,
        out: &mut Output,
    ) -> Result<Answered> {
        let page = self.client.connections(question)?;
        let mut writer = ConnWriter::new(format).map_err(anyhow::Error::msg)?;
        let out = out.open()?;
        for (node, entry) in &page.entries {
            writer.set_node(node);
            writer.set_community_seed(page.community_seed(node));
            writer.write(out, entry)?;
        }
        writer.finish(out)?;
        Ok(Answered {
            next: page.next.clone(),
            ..Self::answered(&page.outcome)
        })
    }

    fn sql(&self, question: &SqlQuestion, format: Format, out: &mut Output) -> Result<Answered> {
        anyhow::ensure!(
            !question.allow_writes,
            "a cluster's statements only read: statements that write run on one archive"
        );
        let limits = Limits {
            max_rows: Some(question.max_rows),
            ..Limits::default()
        };
        let out: &mut dyn Write = out.open()?;
        let outcome = hindsight_cluster::sql::answer(
            self.client.clone(),
            &question.text,
            question.explain,
            format,
            out,
            &limits,
        )?;
        Ok(Self::answered(&outcome))
    }
}
