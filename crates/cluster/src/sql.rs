//! SQL over the cluster: the nodes as `hindsight_sql` plans a statement over
//! them ([`hindsight_sql::Nodes`]): each table's scan is routed by the index
//! node (the statement's conditions on `ts` and on the addresses), each
//! fragment is sent to `POST /api/v1/cluster/fragment` of the nodes chosen,
//! and a node that does not answer is named in the [`Outcome`].

use std::io::{Read, Write};
use std::sync::{Arc, Mutex};

use hindsight_model::Addr16;
use hindsight_output::Format;
use hindsight_sql::{Limits, SqlError, SqlSession};
use hindsight_store::{Table, TimeRange};

use crate::client::{Missing, Outcome};
use crate::{ClusterClient, index::Route};

/// The route `POST` fragments go to.
pub const FRAGMENT_ROUTE: &str = "cluster/fragment";

/// The cluster's nodes for one statement: what they were asked, who failed.
#[derive(Debug)]
pub struct SqlNodes {
    client: ClusterClient,
    outcome: Mutex<Outcome>,
}

impl SqlNodes {
    /// The nodes of `client`'s cluster.
    pub fn new(client: ClusterClient) -> Self {
        Self {
            client,
            outcome: Mutex::new(Outcome::default()),
        }
    }

    /// How the statements so far went: the nodes asked for each table (one
    /// route, each node once), and those that did not answer.
    pub fn outcome(&self) -> Outcome {
        let mut outcome = self.lock().clone();
        outcome.missing.sort_by(|a, b| a.node.cmp(&b.node));
        outcome.missing.dedup();
        outcome
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Outcome> {
        self.outcome
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Adds `more` to `route`: each node asked or skipped once, asked if any
/// table's route asks it.
fn join_routes(route: &mut Route, more: Route) {
    if route.index.is_empty() {
        route.index = more.index;
    }
    for choice in more.ask {
        route.skip.retain(|skip| skip.node != choice.node);
        if !route.ask.iter().any(|asked| asked.node == choice.node) {
            route.ask.push(choice);
        }
    }
    for skip in more.skip {
        let known = route.ask.iter().any(|c| c.node == skip.node)
            || route.skip.iter().any(|c| c.node == skip.node);
        if !known {
            route.skip.push(skip);
        }
    }
}

impl hindsight_sql::Nodes for SqlNodes {
    fn route(
        &self,
        table: Table,
        time: TimeRange,
        addresses: &[Vec<(Addr16, Addr16)>],
    ) -> Vec<String> {
        // Any one of the sets bounds the rows; the narrowest prunes most.
        let ranges = addresses.iter().min_by_key(|set| set.len());
        let (route, notes) = self
            .client
            .route(&[table.name()], time, ranges.map(Vec::as_slice));
        let nodes = route.ask.iter().map(|choice| choice.node.clone()).collect();
        let mut outcome = self.lock();
        outcome.notes.extend(notes);
        join_routes(&mut outcome.route, route);
        nodes
    }

    fn ask(&self, node: &str, fragment: &[u8]) -> Result<Box<dyn Read + Send>, String> {
        let url = self
            .client
            .config()
            .nodes
            .iter()
            .find(|n| n.name == node)
            .map(|n| n.url.clone())
            .ok_or_else(|| format!("no node {node} in the cluster"))?;
        let response = self.client.post_bytes(&url, FRAGMENT_ROUTE, fragment)?;
        Ok(Box::new(
            response
                .into_body()
                .into_with_config()
                .limit(u64::MAX)
                .reader(),
        ))
    }

    fn missing(&self, node: &str, reason: String) {
        self.lock().missing.push(Missing {
            node: node.to_owned(),
            reason,
        });
    }
}

/// A SQL session over the cluster of `client`, with at most `memory_bytes`
/// for its operators and each node's answer (see
/// [`SqlSession::federated`]), and its nodes (whose [`SqlNodes::outcome`]
/// says how each statement went).
pub fn session(
    client: ClusterClient,
    memory_bytes: Option<usize>,
) -> Result<(SqlSession, Arc<SqlNodes>), SqlError> {
    let nodes = Arc::new(SqlNodes::new(client));
    let session = SqlSession::federated(
        Arc::clone(&nodes) as Arc<dyn hindsight_sql::Nodes>,
        memory_bytes,
    )?;
    Ok((session, nodes))
}

/// Runs `sql` over the cluster of `client` (or, with `explain`, writes its
/// plan, which shows the cut) to `out` in `format`, with at most
/// `memory_bytes` of memory (see [`session`]); how the nodes answered.
pub fn answer(
    client: ClusterClient,
    sql: &str,
    explain: bool,
    format: Format,
    out: &mut dyn Write,
    limits: &Limits,
    memory_bytes: Option<usize>,
) -> Result<Outcome, SqlError> {
    let (session, nodes) = session(client, memory_bytes)?;
    if explain {
        writeln!(out, "{}", session.explain(sql)?)?;
    } else {
        session.run(sql, format, out, limits)?;
    }
    Ok(nodes.outcome())
}
