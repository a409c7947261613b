//! The cluster file: the `[cluster]` table of `serve`'s configuration, or a
//! file of its own for the command line (`--cluster CLUSTER.toml`):
//!
//! ```toml
//! [cluster]
//! name = "gateway"        # this node (a client's file has none)
//! token = "a shared secret"   # or token_file = "/etc/hindsight/cluster.token"
//! node_token_file = "/etc/hindsight/node.token"   # this node's own secret (or node_token)
//! index = ["gateway"]     # the index nodes, by name: each gets every summary
//! sync_secs = 2           # how often a node tells its index nodes what it holds
//! deadline_secs = 30      # how long a node may take to answer a question
//!
//! [[cluster.node]]
//! name = "gateway"
//! url = "http://127.0.0.1:8081"
//! token_sha256 = "…"      # SHA-256 of the node's own token (`hindsight cluster token`)
//!
//! [[cluster.node]]
//! name = "branch"
//! url = "http://127.0.0.1:8082"
//! token_sha256 = "…"
//! ```
//!
//! Two kinds of secret: the cluster's token lets its holder ask questions of
//! every node (nodes ask each other with it); a node's own token lets it tell
//! the index nodes what it holds, for itself only. An index node knows each
//! node's token by its SHA-256 alone, so its file gives no node's secret away.

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
    /// The SHA-256 of its own token, in hex: what an index node checks a
    /// sync or a summary "from" this node against. Every node needs one in
    /// an index node's file.
    #[serde(default)]
    pub token_sha256: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCluster {
    name: Option<String>,
    token: Option<String>,
    token_file: Option<std::path::PathBuf>,
    node_token: Option<String>,
    node_token_file: Option<std::path::PathBuf>,
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
    /// This node's own token, which it alone holds (a node's file only).
    pub node_token: Option<String>,
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
        let token = secret(
            "token",
            raw.token,
            raw.token_file,
            "HINDSIGHT_CLUSTER_TOKEN",
            base,
        )?
        .ok_or_else(|| {
            anyhow::anyhow!(
                "a cluster needs a shared token (token, token_file or HINDSIGHT_CLUSTER_TOKEN)"
            )
        })?;
        if token.len() < MIN_TOKEN_CHARS {
            bail!("the cluster token is shorter than {MIN_TOKEN_CHARS} characters");
        }
        let node_token = secret(
            "node_token",
            raw.node_token,
            raw.node_token_file,
            "HINDSIGHT_NODE_TOKEN",
            base,
        )?;
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
            if let Some(digest) = &node.token_sha256
                && (digest.len() != 64 || !digest.bytes().all(|b| b.is_ascii_hexdigit()))
            {
                bail!(
                    "node {}: token_sha256 must be 64 hex digits (the SHA-256 of its token, as `hindsight cluster token` prints it)",
                    node.name
                );
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
        if let Some(name) = &raw.name {
            let Some(own) = &node_token else {
                bail!(
                    "this node, {name:?}, needs its own token (node_token, node_token_file or HINDSIGHT_NODE_TOKEN; `hindsight cluster token` makes one): it tells the index nodes what it holds with it"
                );
            };
            if own.len() < MIN_TOKEN_CHARS {
                bail!("the node token is shorter than {MIN_TOKEN_CHARS} characters");
            }
            if own == &token {
                bail!(
                    "the node token must differ from the cluster's token (any holder of that may ask, but only this node may speak for it)"
                );
            }
            let entry = raw.node.iter().find(|n| &n.name == name);
            if let Some(digest) = entry.and_then(|n| n.token_sha256.as_ref())
                && !digest.eq_ignore_ascii_case(&token_sha256(own))
            {
                bail!(
                    "the node token is not the one whose SHA-256 is token_sha256 of node {name:?}"
                );
            }
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
        if raw.name.as_ref().is_some_and(|name| index.contains(name)) {
            let without: Vec<&str> = raw
                .node
                .iter()
                .filter(|n| n.token_sha256.is_none())
                .map(|n| n.name.as_str())
                .collect();
            if !without.is_empty() {
                bail!(
                    "an index node needs every node's token_sha256 (it checks that a node speaks for itself): missing for {}",
                    without.join(", ")
                );
            }
        }
        Ok(Self {
            name: raw.name,
            token,
            node_token,
            index,
            nodes: raw
                .node
                .into_iter()
                .map(|mut node| {
                    node.url = node.url.trim_end_matches('/').to_owned();
                    node.token_sha256 = node.token_sha256.map(|d| d.to_ascii_lowercase());
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

    /// The node whose own token is `given`, if one's is: each node's digest is
    /// compared whole, in time independent of where the digests differ.
    pub fn node_of_token(&self, given: &str) -> Option<&Node> {
        let given = token_sha256(given);
        let mut found = None;
        for node in &self.nodes {
            if let Some(digest) = &node.token_sha256
                && digest.len() == given.len()
                && digest
                    .bytes()
                    .zip(given.bytes())
                    .fold(0u8, |acc, (x, y)| acc | (x ^ y))
                    == 0
            {
                found = Some(node);
            }
        }
        found
    }
}

/// The fewest characters a token may have.
pub const MIN_TOKEN_CHARS: usize = 16;

/// The SHA-256 of `token`, in lower-case hex (a node's `token_sha256`).
pub fn token_sha256(token: &str) -> String {
    use sha2::Digest;
    hex(&sha2::Sha256::digest(token.as_bytes()))
}

/// Bytes as lower-case hex.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A secret given in the file (`key`), in a file it names (`key_file`,
/// relative to `base`) or in the environment variable `env`, which wins.
fn secret(
    key: &str,
    value: Option<String>,
    file: Option<std::path::PathBuf>,
    env: &str,
    base: Option<&Path>,
) -> Result<Option<String>> {
    if let Ok(value) = std::env::var(env)
        && !value.trim().is_empty()
    {
        return Ok(Some(value.trim().to_owned()));
    }
    match (value, file) {
        (Some(_), Some(_)) => bail!("give {key} or {key}_file, not both"),
        (Some(value), None) => Ok(Some(value)),
        (None, Some(file)) => {
            let file = match base {
                Some(base) if file.is_relative() => base.join(file),
                _ => file,
            };
            Ok(Some(
                std::fs::read_to_string(&file)
                    .with_context(|| format!("cannot read {key}_file {}", file.display()))?
                    .trim()
                    .to_owned(),
            ))
        }
        (None, None) => Ok(None),
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
            node_token = "node-a-secret-0123456789"
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
        let short = good.replace("\"0123456789abcdef\"", "\"short\"");
        assert!(format!("{:#}", parse(&short).unwrap_err()).contains("shorter than 16"));
        let unknown = good.replace("index = [\"b\"]", "index = [\"c\"]");
        assert!(format!("{:#}", parse(&unknown).unwrap_err()).contains("index node \"c\""));
        let twice = good.replace("name = \"b\"", "name = \"a\"");
        assert!(format!("{:#}", parse(&twice).unwrap_err()).contains("two nodes"));
        assert!(parse("[api]\n").is_err());
    }

    #[test]
    fn each_node_has_its_own_token_and_an_index_node_knows_them_by_digest() {
        let digest_a = token_sha256("node-a-secret-0123456789");
        let digest_b = token_sha256("node-b-secret-0123456789");
        let file = format!(
            r#"
            [cluster]
            name = "a"
            token = "cluster-secret-0123456789"
            node_token = "node-a-secret-0123456789"
            [[cluster.node]]
            name = "a"
            url = "http://127.0.0.1:1"
            token_sha256 = "{digest_a}"
            [[cluster.node]]
            name = "b"
            url = "http://127.0.0.1:2"
            token_sha256 = "{}"
        "#,
            digest_b.to_ascii_uppercase()
        );
        let config = parse(&file).unwrap();
        assert!(config.is_index());
        let named = |token: &str| config.node_of_token(token).map(|n| n.name.clone());
        assert_eq!(named("node-b-secret-0123456789").as_deref(), Some("b"));
        assert_eq!(named("node-a-secret-0123456789").as_deref(), Some("a"));
        assert_eq!(named("cluster-secret-0123456789"), None);
        assert_eq!(named(""), None);
        let error = |text: &str| format!("{:#}", parse(text).unwrap_err());
        // A node's own token: needed, long, not the cluster's, and the one of its digest.
        let without = file.replace("node_token = \"node-a-secret-0123456789\"", "");
        assert!(error(&without).contains("needs its own token"));
        let same = file.replace(
            "node-a-secret-0123456789\"\n",
            "cluster-secret-0123456789\"\n",
        );
        assert!(error(&same).contains("must differ"), "{}", error(&same));
        let other = file.replace(
            "node_token = \"node-a-secret-0123456789\"",
            "node_token = \"node-b-secret-0123456789\"",
        );
        assert!(error(&other).contains("is not the one whose SHA-256"));
        // An index node needs every node's digest; a client needs none.
        let missing = file.replace(
            &format!("token_sha256 = \"{}\"", digest_b.to_ascii_uppercase()),
            "",
        );
        assert!(error(&missing).contains("missing for b"));
        let client = missing
            .replace("name = \"a\"\n            token", "token")
            .replace("node_token = \"node-a-secret-0123456789\"", "");
        assert!(parse(&client).unwrap().name.is_none());
        let bad = file.replace(&digest_a, "beef");
        assert!(error(&bad).contains("64 hex digits"));
    }
}
