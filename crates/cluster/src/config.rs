//! The cluster file: the `[cluster]` table of `serve`'s configuration, or a
//! file of its own for the command line (`--cluster CLUSTER.toml`):
//!
//! ```toml
//! [cluster]
//! name = "gateway"        # this node (a client's file has none)
//! token = "a shared secret"   # or token_file = "/etc/hindsight/cluster.token"
//! index = ["gateway"]     # the index nodes, by name: each gets every summary
//! sync_secs = 2           # how often a node tells its index nodes what it holds
//! deadline_secs = 30      # how long a node may take to answer a question
//!
//! [[cluster.node]]
//! name = "gateway"
//! url = "http://127.0.0.1:8081"
//!
//! [[cluster.node]]
//! name = "branch"
//! url = "http://127.0.0.1:8082"
//! ```

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde::Deserialize;

/// One node of the cluster.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Node {
    /// Its name, unique in the cluster.
    pub name: String,
    /// Where its API answers (`http://host:port`).
    pub url: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCluster {
    name: Option<String>,
    token: Option<String>,
    token_file: Option<std::path::PathBuf>,
    #[serde(default)]
    index: Vec<String>,
    sync_secs: Option<u64>,
    deadline_secs: Option<u64>,
    #[serde(default)]
    node: Vec<Node>,
}

#[derive(Debug, Deserialize)]
struct RawFile {
    cluster: Option<RawCluster>,
}

/// A cluster: its nodes, its index nodes and the shared token.
#[derive(Clone, Debug)]
pub struct ClusterConfig {
    /// This node's name, if this is a node's configuration.
    pub name: Option<String>,
    /// The token every node and client of the cluster carries.
    pub token: String,
    /// The index nodes, by name, in the order a client asks them.
    pub index: Vec<String>,
    /// Every node.
    pub nodes: Vec<Node>,
    /// How often a node tells its index nodes what it holds.
    pub sync: Duration,
    /// How long a node may take to answer a question before the answer goes
    /// on without it.
    pub deadline: Duration,
}

impl ClusterConfig {
    /// Reads the `[cluster]` table of the TOML file at `path`.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the cluster file {}", path.display()))?;
        let raw: RawFile = toml::from_str(&text)
            .with_context(|| format!("bad cluster file {}", path.display()))?;
        match raw.cluster {
            Some(cluster) => Self::from_raw(cluster, path.parent())
                .with_context(|| format!("bad [cluster] in {}", path.display())),
            None => bail!("{} has no [cluster] table", path.display()),
        }
    }

    /// Reads a `[cluster]` table already parsed from `serve`'s configuration
    /// (relative paths from `base`).
    pub fn from_toml(value: toml::Value, base: Option<&Path>) -> Result<Self> {
        let raw: RawCluster = value.try_into().context("bad [cluster]")?;
        Self::from_raw(raw, base)
    }

    fn from_raw(raw: RawCluster, base: Option<&Path>) -> Result<Self> {
        let token = match (
            raw.token,
            raw.token_file,
            std::env::var("HINDSIGHT_CLUSTER_TOKEN"),
        ) {
            (_, _, Ok(token)) if !token.trim().is_empty() => token.trim().to_owned(),
            (Some(token), None, _) => token,
            (None, Some(file), _) => {
                let file = match base {
                    Some(base) if file.is_relative() => base.join(file),
                    _ => file,
                };
                std::fs::read_to_string(&file)
                    .with_context(|| format!("cannot read token_file {}", file.display()))?
                    .trim()
                    .to_owned()
            }
            (Some(_), Some(_), _) => bail!("give token or token_file, not both"),
            (None, None, _) => bail!(
                "a cluster needs a shared token (token, token_file or HINDSIGHT_CLUSTER_TOKEN)"
            ),
        };
        if token.len() < 16 {
            bail!("the cluster token is shorter than 16 characters");
        }
        if raw.node.is_empty() {
            bail!("a cluster needs its nodes ([[cluster.node]] with name and url)");
        }
        let mut names = std::collections::BTreeSet::new();
        for node in &raw.node {
            if node.name.is_empty()
                || !node
                    .name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            {
                bail!(
                    "node name {:?}: use letters, digits, '-', '_' and '.'",
                    node.name
                );
            }
            if !names.insert(node.name.as_str()) {
                bail!("two nodes are named {:?}", node.name);
            }
            if !node.url.starts_with("http://") {
                bail!(
                    "node {}: url {:?} must start with http:// (put TLS in a proxy in front, see docs/cluster.md)",
                    node.name,
                    node.url
                );
            }
        }
        if let Some(name) = &raw.name
            && !names.contains(name.as_str())
        {
            bail!("this node, {name:?}, is not among the cluster's nodes");
        }
        let index = if raw.index.is_empty() {
            vec![raw.node[0].name.clone()]
        } else {
            raw.index
        };
        for name in &index {
            if !names.contains(name.as_str()) {
                bail!("index node {name:?} is not among the cluster's nodes");
            }
        }
        Ok(Self {
            name: raw.name,
            token,
            index,
            nodes: raw
                .node
                .into_iter()
                .map(|mut node| {
                    node.url = node.url.trim_end_matches('/').to_owned();
                    node
                })
                .collect(),
            sync: Duration::from_secs(raw.sync_secs.unwrap_or(2).max(1)),
            deadline: Duration::from_secs(raw.deadline_secs.unwrap_or(30).max(1)),
        })
    }

    /// The node named `name`.
    pub fn node(&self, name: &str) -> Option<&Node> {
        self.nodes.iter().find(|n| n.name == name)
    }

    /// Whether this node is an index node.
    pub fn is_index(&self) -> bool {
        self.name
            .as_ref()
            .is_some_and(|name| self.index.contains(name))
    }

    /// The index nodes, in order.
    pub fn index_nodes(&self) -> impl Iterator<Item = &Node> {
        self.index.iter().filter_map(|name| self.node(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<ClusterConfig> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cluster.toml");
        std::fs::write(&path, text).unwrap();
        ClusterConfig::load(&path)
    }

    #[test]
    fn reads_a_cluster_and_refuses_mistakes() {
        let good = r#"
            [cluster]
            name = "a"
            token = "0123456789abcdef"
            index = ["b"]
            [[cluster.node]]
            name = "a"
            url = "http://127.0.0.1:1/"
            [[cluster.node]]
            name = "b"
            url = "http://127.0.0.1:2"
        "#;
        let config = parse(good).unwrap();
        assert_eq!(config.nodes[0].url, "http://127.0.0.1:1");
        assert!(!config.is_index());
        assert_eq!(config.index_nodes().next().unwrap().name, "b");
        let short = good.replace("0123456789abcdef", "short");
        assert!(format!("{:#}", parse(&short).unwrap_err()).contains("shorter than 16"));
        let unknown = good.replace("index = [\"b\"]", "index = [\"c\"]");
        assert!(format!("{:#}", parse(&unknown).unwrap_err()).contains("index node \"c\""));
        let twice = good.replace("name = \"b\"", "name = \"a\"");
        assert!(format!("{:#}", parse(&twice).unwrap_err()).contains("two nodes"));
        assert!(parse("[api]\n").is_err());
    }
}
