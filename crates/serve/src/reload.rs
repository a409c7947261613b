//! SIGHUP: `serve` reads its configuration file and the archive's
//! `config.toml` again and takes what it can without stopping the capture:
//! the file's watches, the API's request bounds and admission, and the
//! archive's retention bounds. It says on stderr what it took, and what
//! changed but takes a restart (that keeps running as it was). A file that
//! cannot be read, parsed or checked (a watch's statement included) is
//! refused whole: nothing changes.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use hindsight_live::RetentionControl;
use hindsight_store::settings::{Retention, archive_settings};

use crate::ServeConfig;
use crate::api::AppState;

/// Keys of `[api]` a reload takes.
const API_KEYS: [&str; 7] = [
    "max_rows",
    "timeout_secs",
    "max_concurrent",
    "max_scans",
    "max_queued",
    "cheap_rows",
    "allowed_hosts",
];

/// Keys of the archive's config.toml a reload takes (the bounds of the
/// retention classes, not the classes: see `Retention::classes_changed`).
const RETENTION_KEYS: [&str; 4] = [
    "packets.max_bytes",
    "packets.max_age_secs",
    "packets.min_free_bytes",
    "retention.class",
];

/// What the command line set over the file.
#[derive(Clone, Debug, Default)]
pub(crate) struct Overrides {
    pub archive: Option<PathBuf>,
    pub listen: Option<SocketAddr>,
}

/// Reads serve's configuration: the file (if any) with the command line's
/// overrides, checked; and the file as a table, for what a reload changed.
pub(crate) fn load(
    file: Option<&Path>,
    overrides: &Overrides,
) -> Result<(ServeConfig, toml::Table)> {
    let (mut config, table) = match file {
        Some(path) => {
            let table = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?
                .parse::<toml::Table>()
                .with_context(|| format!("{} is not TOML", path.display()))?;
            (ServeConfig::load(path)?, table)
        }
        None => (ServeConfig::default(), toml::Table::new()),
    };
    if let Some(archive) = &overrides.archive {
        config.archive = Some(archive.clone());
    }
    if let Some(listen) = overrides.listen {
        config.api.listen = listen;
    }
    config.validate()?;
    Ok((config, table))
}

/// The archive's config.toml as a table (empty when there is none).
fn archive_table(root: &Path) -> Result<toml::Table> {
    let path = root.join(hindsight_store::archive::CONFIG_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => text
            .parse()
            .with_context(|| format!("{} is not TOML", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(toml::Table::new()),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

/// What a running server was configured with, and how to change it.
pub(crate) struct Reloader {
    file: Option<PathBuf>,
    overrides: Overrides,
    root: PathBuf,
    /// Serve's file as it runs (a change that takes a restart is not in it).
    serve: toml::Table,
    /// The archive's config.toml as it runs.
    archive: toml::Table,
    /// The retention the archiver runs with.
    retention: Retention,
    /// The archiver's retention, when the server captures.
    archiver: Option<RetentionControl>,
}

impl Reloader {
    /// A reloader of the server started from `file` (with `overrides`) over
    /// the archive at `root`, its configuration read as `serve`.
    pub(crate) fn new(
        file: Option<PathBuf>,
        overrides: Overrides,
        root: &Path,
        serve: toml::Table,
        archiver: Option<RetentionControl>,
    ) -> Result<Self> {
        Ok(Self {
            file,
            overrides,
            root: root.to_owned(),
            serve,
            archive: archive_table(root)?,
            retention: archive_settings(root, None)?.retention,
            archiver,
        })
    }

    /// Reads both files again and takes what changed; returns what to say,
    /// one line each, or why nothing changed.
    pub(crate) fn reload(&mut self, state: &AppState) -> Result<Vec<String>> {
        // Everything read and checked before anything changes.
        let (config, mut serve) = load(self.file.as_deref(), &self.overrides)?;
        let settings = archive_settings(&self.root, None)?;
        let mut archive = archive_table(&self.root)?;
        let watches = WatchChanges::of(&self.serve, &serve, &config, state)?;
        let mut said = Vec::new();

        let config_file = hindsight_store::archive::CONFIG_FILE;
        let mut api = false;
        let mut restart = Vec::new();
        for key in changed_keys(&self.serve, &serve) {
            match key.split_once('.') {
                _ if key == "watch" => {}
                Some(("api", name)) if API_KEYS.contains(&name) => api = true,
                _ => restart.push(key),
            }
        }
        let (mut retention, mut restart_archive) = (false, Vec::new());
        for key in changed_keys(&self.archive, &archive) {
            if RETENTION_KEYS.contains(&key.as_str()) {
                retention = true;
            } else {
                restart_archive.push(key);
            }
        }
        if retention {
            if self.archiver.is_none() {
                said.push(format!(
                    "the retention of {config_file} is for the archive's writer, which takes \
                     it when it opens the archive (this server does not capture)"
                ));
                retention = false;
            } else if let Some(why) = self.retention.classes_changed(&settings.retention) {
                said.push(format!(
                    "the retention of {config_file}: {why}: that takes a restart"
                ));
                retention = false;
            }
        }

        if api {
            // The body's bound and the statements' memory take a restart.
            let old = state.limits();
            let limits = crate::api::ApiLimits {
                max_body_bytes: old.max_body_bytes,
                max_memory_bytes: old.max_memory_bytes,
                ..config.api.limits()
            };
            *state
                .limits
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = limits;
            state.admission.resize(
                config.api.max_concurrent,
                config.api.max_scans,
                config.api.max_queued,
                limits.timeout,
                config.api.cheap_rows,
            );
            let bounds = |old: hindsight_reader::Limits| hindsight_reader::Limits {
                max_rows: Some(limits.max_rows),
                timeout: old.timeout.map(|_| limits.timeout),
                ..old
            };
            let archive_limits = state.archive.limits();
            archive_limits.set(bounds(archive_limits.get()));
            if let Some(cluster) = &state.cluster {
                let cluster_limits = cluster.questions.limits();
                cluster_limits.set(bounds(cluster_limits.get()));
            }
            *state
                .allowed_hosts
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner) =
                config.api.allowed_hosts.clone();
            said.push(format!(
                "[api] max_rows {}, timeout_secs {}, max_concurrent {}, max_scans {}, \
                 max_queued {}, cheap_rows {}, allowed_hosts {:?}",
                config.api.max_rows,
                config.api.timeout_secs,
                config.api.max_concurrent,
                config.api.max_scans,
                config.api.max_queued,
                config.api.cheap_rows,
                config.api.allowed_hosts
            ));
        }
        said.extend(watches.apply(state));
        let taken = match (&self.archiver, retention) {
            (Some(archiver), true) => match archiver.set_retention(settings.retention.clone()) {
                Ok(()) => {
                    self.retention = settings.retention;
                    said.push(format!(
                        "the retention of {config_file}: taken, from the next seal"
                    ));
                    true
                }
                Err(error) => {
                    said.push(format!(
                        "the retention of {config_file}: the archiver did not take it: {error}"
                    ));
                    false
                }
            },
            _ => false,
        };
        if !taken {
            // What runs is the old retention: a later reload compares with it.
            for key in RETENTION_KEYS {
                restore(&mut archive, &self.archive, key);
            }
        }
        for key in &restart {
            restore(&mut serve, &self.serve, key);
        }
        for key in &restart_archive {
            restore(&mut archive, &self.archive, key);
        }
        restart.extend(
            restart_archive
                .iter()
                .map(|key| format!("{config_file} {key}")),
        );
        if !restart.is_empty() {
            said.push(format!(
                "changed, but takes a restart (runs as it was until then): {}",
                restart.join(", ")
            ));
        }
        self.serve = serve;
        self.archive = archive;
        Ok(said)
    }
}

/// The `[[watch]]` sections a reload adds, changes or removes, checked.
struct WatchChanges {
    remove: Vec<String>,
    add: Vec<hindsight_watch::hub::HubWatch>,
}

impl WatchChanges {
    /// The changes from `old` to `new` (serve's file as tables; `config` is
    /// `new` read), each new or changed watch planned against the archive.
    fn of(
        old: &toml::Table,
        new: &toml::Table,
        config: &ServeConfig,
        state: &AppState,
    ) -> Result<Self> {
        let by_name = |table: &toml::Table| -> BTreeMap<String, toml::Value> {
            let Some(toml::Value::Array(watches)) = table.get("watch") else {
                return BTreeMap::new();
            };
            watches
                .iter()
                .filter_map(|w| {
                    let name = w.get("name")?.as_str()?.to_owned();
                    Some((name, w.clone()))
                })
                .collect()
        };
        let (before, after) = (by_name(old), by_name(new));
        let names: BTreeSet<&String> = before.keys().chain(after.keys()).collect();
        let mut changes = Self {
            remove: Vec::new(),
            add: Vec::new(),
        };
        for name in names {
            if before.get(name) == after.get(name) {
                continue;
            }
            if before.contains_key(name) {
                changes.remove.push(name.clone());
            }
            if let Some(section) = config.watch.iter().find(|w| &w.name == name) {
                changes.add.push(section.watch(&config.watches)?);
            }
        }
        if !changes.add.is_empty() {
            let limits = hindsight_reader::Limits {
                memory_bytes: Some(config.api.max_memory_mib.saturating_mul(1 << 20)),
                ..Default::default()
            };
            let snapshot = state.reader.snapshot()?;
            let analysing = changes.add.iter().find(|w| w.analysis.is_some());
            if let Some(refusal) =
                crate::watches::without_home(&snapshot, analysing.map(|w| w.spec.name.as_str()))
            {
                bail!(refusal);
            }
            let session = snapshot.sql(&limits)?;
            for watch in &changes.add {
                hindsight_watch::check(&session, &watch.spec)
                    .with_context(|| format!("[[watch]] {}", watch.spec.name))?;
            }
        }
        Ok(changes)
    }

    /// Removes and adds the watches on the server's hub; what it did.
    fn apply(self, state: &AppState) -> Vec<String> {
        let Some(hub) = &state.hub else {
            return (self.add.iter())
                .map(|w| {
                    format!(
                        "[[watch]] {}: not started: this server does not capture",
                        w.spec.name
                    )
                })
                .collect();
        };
        let mut said = Vec::new();
        for name in &self.remove {
            if hub.remove(name) {
                said.push(format!("[[watch]] {name}: stopped"));
            }
        }
        for watch in self.add {
            let name = watch.spec.name.clone();
            match hub.add(watch) {
                Ok(()) => said.push(format!("[[watch]] {name}: started")),
                Err(error) => said.push(format!("[[watch]] {name}: not started: {error}")),
            }
        }
        said
    }
}

/// The dotted keys whose values differ between `old` and `new`: tables are
/// walked, anything else (arrays of tables too) compared whole.
fn changed_keys(old: &toml::Table, new: &toml::Table) -> Vec<String> {
    let mut keys = Vec::new();
    walk(old, new, "", &mut keys);
    keys
}

fn walk(old: &toml::Table, new: &toml::Table, prefix: &str, keys: &mut Vec<String>) {
    let empty = toml::Table::new();
    let names: BTreeSet<&String> = old.keys().chain(new.keys()).collect();
    for name in names {
        let path = format!("{prefix}{name}");
        // A table one side lacks is an empty one: its keys are what changed.
        match (old.get(name), new.get(name)) {
            (Some(toml::Value::Table(a)), Some(toml::Value::Table(b))) => {
                walk(a, b, &format!("{path}."), keys);
            }
            (Some(toml::Value::Table(a)), None) => walk(a, &empty, &format!("{path}."), keys),
            (None, Some(toml::Value::Table(b))) => walk(&empty, b, &format!("{path}."), keys),
            (a, b) if a != b => keys.push(path),
            _ => {}
        }
    }
}

/// Sets the dotted `key` of `table` to its value in `old` (or removes it).
fn restore(table: &mut toml::Table, old: &toml::Table, key: &str) {
    match key.split_once('.') {
        Some((head, rest)) => {
            let empty = toml::Table::new();
            let old_inner = old
                .get(head)
                .and_then(toml::Value::as_table)
                .unwrap_or(&empty);
            if let Some(toml::Value::Table(inner)) = table.get_mut(head) {
                restore(inner, old_inner, rest);
            } else if let Some(value) = old.get(head) {
                table.insert(head.to_owned(), value.clone());
            }
        }
        None => match old.get(key) {
            Some(value) => {
                table.insert(key.to_owned(), value.clone());
            }
            None => {
                table.remove(key);
            }
        },
    }
}

/// Reloads on every SIGHUP of `hangups` until the process ends, saying what
/// each did.
pub(crate) async fn on_sighup(
    state: Arc<AppState>,
    reloader: Reloader,
    hangups: Option<tokio::signal::unix::Signal>,
) {
    let Some(mut hangups) = hangups else {
        log::warn!("cannot catch SIGHUP: no reload");
        return;
    };
    let reloader = Arc::new(std::sync::Mutex::new(reloader));
    while hangups.recv().await.is_some() {
        let (state, reloader) = (Arc::clone(&state), Arc::clone(&reloader));
        let said = tokio::task::spawn_blocking(move || {
            let mut reloader = reloader
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            reloader.reload(&state)
        })
        .await;
        match said {
            Ok(Ok(lines)) if lines.is_empty() => log::info!("SIGHUP: nothing changed"),
            Ok(Ok(lines)) => {
                for line in lines {
                    log::info!("SIGHUP: {line}");
                }
            }
            Ok(Err(error)) => {
                // One line (TOML's errors draw the place over several).
                let why = format!("{error:#}");
                let why = why.split_whitespace().collect::<Vec<_>>().join(" ");
                log::warn!("SIGHUP: refused, the configuration in use is kept: {why}");
            }
            Err(error) => log::error!("SIGHUP: the reload failed: {error}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(text: &str) -> toml::Table {
        text.parse().unwrap()
    }

    #[test]
    fn changed_keys_are_dotted_and_restore_puts_back_the_old_value() {
        let old = table("archive = \"a\"\n[api]\nmax_rows = 5\nlisten = \"127.0.0.1:1\"\n");
        let mut new = table(
            "[api]\nmax_rows = 6\nlisten = \"127.0.0.1:2\"\ntoken = \"x\"\n\
             [packets]\nmax_bytes = 1\n[capture.x]\ny = 1\n",
        );
        assert_eq!(
            changed_keys(&old, &new),
            [
                "api.listen",
                "api.max_rows",
                "api.token",
                "archive",
                "capture.x.y",
                "packets.max_bytes"
            ]
        );
        for key in ["api.listen", "api.token", "archive", "capture.x.y"] {
            restore(&mut new, &old, key);
        }
        assert_eq!(
            changed_keys(&old, &new),
            ["api.max_rows", "packets.max_bytes"]
        );
    }
}
