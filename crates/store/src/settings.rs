//! The archive's own settings, `ARCHIVE/config.toml`, read by every command that
//! writes the archive (`ingest`, `collect`, `record`, `serve`) and by its readers,
//! so retention is set once per archive rather than on every command line:
//!
//! ```toml
//! [connections]
//! keep = 10000000                  # keep at least the N newest connections (0: all)
//! histogram_granularity_secs = 60  # width of a timestamp-histogram interval
//! cutoff_interval_secs = 60        # how often the cutoff is recomputed
//! compaction_interval_secs = 3600  # how often every entry is compacted
//! community_id_seed = 0            # Community ID seed (as Zeek's CommunityID::seed); fixed
//!                                  # when the archive is created
//!
//! [packets]
//! max_bytes = 0                    # bound of the packets segments on disk (0: none)
//! max_age_secs = 0                 # drop segments this far behind the newest packet (0: never)
//! min_free_bytes = 1073741824      # free bytes to leave on the filesystem (0: none); below it
//!                                  # the oldest segments are expired if a bound above is set,
//!                                  # else writing stops (every sealed segment is kept)
//! summaries = ["services", "hosts", "flows"]  # the segments' summaries, which answer
//!                                  # aggregations without reading rows (the default: all;
//!                                  # [] for none: less ingest CPU, aggregations read rows)
//!
//! [[retention.class]]              # a class of packets with a guaranteed share (Hyperion)
//! name = "dns"
//! filter = "udp port 53"           # header fields; and/or interface = N (pcapng interface)
//! min_bytes = 1000000000           # expiry for max_bytes leaves this much of it (the floor
//!                                  # takes it only when nothing else is left)
//! max_age_secs = 7776000           # its own longest age (0: the [packets] one)
//!
//! [network]
//! home = ["10.0.0.0/8", "2001:db8::/32"]  # the networks inside (continuous queries' ip_home)
//!
//! [archive]
//! object_store = "s3://bucket/prefix"     # copy sealed segments there (credentials: AWS_* variables)
//! endpoint = "http://127.0.0.1:8333"      # an S3-compatible server other than AWS
//! region = "us-east-1"
//! local_max_bytes = 0                     # bound of the local segment files; beyond it the oldest
//!                                         # copied ones are read from their copies (0: none)
//! ```
//!
//! A command-line flag (`--keep-connections`) overrides the file for that run.

use std::path::Path;
use std::time::Duration;

use std::path::PathBuf;

use hindsight_model::connection::{DEFAULT_COMMUNITY_SEED, Expiry};
use serde::Deserialize;

use crate::archive::CONFIG_FILE;
use crate::segment::summary::{SummaryKind, SummarySet};

/// An archive's `config.toml` that cannot be read or is not valid.
#[derive(Debug, thiserror::Error)]
#[error("{}: {reason}", path.display())]
pub struct SettingsError {
    /// The file.
    pub path: PathBuf,
    /// What is wrong with it.
    pub reason: String,
}

/// Bounds of the `packets` table on disk, applied after every seal: the segments
/// with the oldest packets go first, and the newest segment always stays.
/// With retention classes, expiry takes the oldest segments of the classes
/// over their guarantee first, and each class's newest segment stays.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Retention {
    /// Most bytes of `packets` segments (0: no bound).
    pub max_packet_bytes: u64,
    /// Remove the segments whose newest packet is older than this, counted back
    /// from the newest packet archived (so that replayed captures age by their own
    /// clock, not the wall clock).
    pub max_age: Option<Duration>,
    /// Free bytes to leave on the archive's filesystem (`[packets]
    /// min_free_bytes`; 0: none). Below it, an archive with a bound above
    /// expires its oldest segments to make room; one without stops writing.
    pub min_free_bytes: u64,
    /// Retention classes (`[[retention.class]]`), in order: a packet belongs to
    /// the first whose filter and interface it matches, else to the default
    /// class. Each class's packets are segments of their own.
    pub classes: Vec<RetentionClass>,
}

/// One retention class: which packets, their guaranteed share of the disk and
/// their longest age (Hyperion's per-stream guarantees).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetentionClass {
    /// Its name, in the catalog, `stats` and the metrics.
    pub name: String,
    /// Its packets match this filter (header fields: addresses, ports,
    /// protocols), if one is set.
    pub filter: Option<hindsight_filter::Filter>,
    /// Its packets were captured on this interface (the pcapng interface
    /// number, or the capture thread's), if one is set.
    pub interface: Option<u32>,
    /// Bytes of its segments that expiry for the `max_bytes` bound leaves
    /// alone (the free-space floor takes them only when nothing else is left).
    pub min_bytes: u64,
    /// Its segments are removed once their newest packet is older than this,
    /// counted back from the newest packet archived.
    pub max_age: Option<Duration>,
}

impl RetentionClass {
    /// Whether `record` belongs to this class.
    pub fn matches(&self, record: &hindsight_model::PacketRecord) -> bool {
        self.interface.is_none_or(|iface| record.iface == iface)
            && self
                .filter
                .as_ref()
                .is_none_or(|filter| filter.matches(record))
    }
}

impl Retention {
    /// Whether a bound lets the oldest segments go (the archive is a ring
    /// rather than a store of everything).
    pub fn expires(&self) -> bool {
        self.max_packet_bytes > 0
            || self.max_age.is_some()
            || self.classes.iter().any(|c| c.max_age.is_some())
    }

    /// The class of `record`: 0 for the default class, `i + 1` for class `i`.
    pub fn class_of(&self, record: &hindsight_model::PacketRecord) -> usize {
        self.classes
            .iter()
            .position(|class| class.matches(record))
            .map_or(0, |i| i + 1)
    }

    /// The index of the class named `name` (as a catalog line has it): 0 for
    /// the default class and for a class no longer configured.
    pub fn class_index(&self, name: Option<&str>) -> usize {
        name.and_then(|name| self.classes.iter().position(|c| c.name == name))
            .map_or(0, |i| i + 1)
    }

    /// What differs in how packets are routed to classes (their names,
    /// filters, interfaces, in order) between `self` and `other`, if anything:
    /// a running writer keeps segments of each class apart, so it takes new
    /// bounds but not new classes.
    pub fn classes_changed(&self, other: &Self) -> Option<String> {
        let routes = |r: &Self| {
            r.classes
                .iter()
                .map(|c| (c.name.clone(), c.filter.clone(), c.interface))
                .collect::<Vec<_>>()
        };
        let names = |r: &Self| {
            let names: Vec<&str> = r.classes.iter().map(|c| c.name.as_str()).collect();
            format!("[{}]", names.join(", "))
        };
        (routes(self) != routes(other)).then(|| {
            format!(
                "the retention classes or their filters changed (from {} to {})",
                names(self),
                names(other)
            )
        })
    }

    /// The name of class `index` (`None`: the default class).
    pub fn class_name(&self, index: usize) -> Option<&str> {
        index
            .checked_sub(1)
            .and_then(|i| self.classes.get(i))
            .map(|class| class.name.as_str())
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ArchiveConfig {
    #[serde(default)]
    connections: Connections,
    #[serde(default)]
    packets: Packets,
    #[serde(default)]
    network: Network,
    #[serde(default)]
    archive: ArchiveSection,
    #[serde(default)]
    retention: RetentionSection,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RetentionSection {
    class: Vec<ClassSection>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ClassSection {
    name: String,
    filter: Option<String>,
    interface: Option<u32>,
    #[serde(default)]
    min_bytes: u64,
    #[serde(default)]
    max_age_secs: u64,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct ArchiveSection {
    object_store: Option<String>,
    endpoint: Option<String>,
    region: Option<String>,
    local_max_bytes: u64,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct Network {
    home: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct Packets {
    max_bytes: u64,
    max_age_secs: u64,
    min_free_bytes: u64,
    summaries: Vec<String>,
}

/// The free-space floor of an archive that sets none: 1 GiB.
pub const DEFAULT_MIN_FREE_BYTES: u64 = 1 << 30;

impl Default for Packets {
    fn default() -> Self {
        Self {
            max_bytes: 0,
            max_age_secs: 0,
            min_free_bytes: DEFAULT_MIN_FREE_BYTES,
            summaries: SummaryKind::ALL.map(|kind| kind.name().to_owned()).into(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct Connections {
    keep: u64,
    histogram_granularity_secs: u64,
    cutoff_interval_secs: u64,
    compaction_interval_secs: u64,
    community_id_seed: u16,
}

impl Default for Connections {
    fn default() -> Self {
        Self {
            keep: Expiry::OFF.keep_events,
            histogram_granularity_secs: Expiry::OFF.histogram_granularity.as_secs(),
            cutoff_interval_secs: Expiry::OFF.cutoff_interval.as_secs(),
            compaction_interval_secs: Expiry::OFF.compaction_interval.as_secs(),
            community_id_seed: DEFAULT_COMMUNITY_SEED,
        }
    }
}

/// The bounds an archive's `config.toml` sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchiveSettings {
    /// Expiration of the connection index.
    pub expiry: Expiry,
    /// The seed of the connections' Community IDs (`[connections] community_id_seed`).
    pub community_seed: u16,
    /// Retention of the packets table.
    pub retention: Retention,
    /// The home network (`[network] home`): inclusive address ranges, empty
    /// when none is set.
    pub home: Vec<(hindsight_model::Addr16, hindsight_model::Addr16)>,
    /// Where sealed segments are copied (`[archive] object_store`), if anywhere.
    pub objects: Option<crate::objects::ObjectStoreSettings>,
    /// The summaries `packets` segments carry (`[packets] summaries`).
    pub summaries: SummarySet,
}

/// Returns the expiration settings of the archive at `root`: its `config.toml`
/// (defaults where absent), with `keep_override` from the command line on top.
pub fn archive_expiry(root: &Path, keep_override: Option<u64>) -> Result<Expiry, SettingsError> {
    archive_settings(root, keep_override).map(|settings| settings.expiry)
}

/// Returns the settings of the archive at `root` from its `config.toml`
/// (defaults where absent), with `keep_override` from the command line on top.
pub fn archive_settings(
    root: &Path,
    keep_override: Option<u64>,
) -> Result<ArchiveSettings, SettingsError> {
    let path = root.join(CONFIG_FILE);
    let error = |reason: String| SettingsError {
        path: path.clone(),
        reason,
    };
    let config = match std::fs::read_to_string(&path) {
        Ok(text) => toml::from_str::<ArchiveConfig>(&text)
            .map_err(|e| error(format!("not a valid archive configuration: {e}")))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => ArchiveConfig::default(),
        Err(e) => return Err(error(format!("cannot read it: {e}"))),
    };
    let c = config.connections;
    for (name, secs) in [
        ("histogram_granularity_secs", c.histogram_granularity_secs),
        ("cutoff_interval_secs", c.cutoff_interval_secs),
        ("compaction_interval_secs", c.compaction_interval_secs),
    ] {
        if secs == 0 {
            return Err(error(format!("[connections] {name} must be positive")));
        }
    }
    let expiry = Expiry {
        keep_events: keep_override.unwrap_or(c.keep),
        histogram_granularity: Duration::from_secs(c.histogram_granularity_secs),
        cutoff_interval: Duration::from_secs(c.cutoff_interval_secs),
        compaction_interval: Duration::from_secs(c.compaction_interval_secs),
    };
    let retention = Retention {
        max_packet_bytes: config.packets.max_bytes,
        max_age: (config.packets.max_age_secs > 0)
            .then(|| Duration::from_secs(config.packets.max_age_secs)),
        min_free_bytes: config.packets.min_free_bytes,
        classes: retention_classes(config.retention.class, config.packets.max_bytes)
            .map_err(error)?,
    };
    let home = config
        .network
        .home
        .iter()
        .map(|net| hindsight_model::network_range(net))
        .collect::<Result<_, _>>()
        .map_err(|reason| error(format!("[network] home: {reason}")))?;
    let summaries = summary_set(&config.packets.summaries).map_err(error)?;
    let section = config.archive;
    if section.object_store.is_none()
        && (section.endpoint.is_some() || section.region.is_some() || section.local_max_bytes > 0)
    {
        return Err(error(
            "[archive] endpoint, region and local_max_bytes need object_store = \"s3://bucket/prefix\""
                .to_owned(),
        ));
    }
    let objects = section
        .object_store
        .map(|url| crate::objects::ObjectStoreSettings {
            url,
            endpoint: section.endpoint,
            region: section.region,
            local_max_bytes: section.local_max_bytes,
        });
    Ok(ArchiveSettings {
        expiry,
        community_seed: c.community_id_seed,
        retention,
        home,
        objects,
        summaries,
    })
}

/// The `[packets] summaries` list, checked: known names, each once.
fn summary_set(names: &[String]) -> Result<SummarySet, String> {
    let mut kinds = Vec::with_capacity(names.len());
    for name in names {
        let kind = SummaryKind::from_name(name).ok_or_else(|| {
            let known: Vec<&str> = SummaryKind::ALL.iter().map(|kind| kind.name()).collect();
            format!(
                "[packets] summaries: no summary named {name:?} (there are {})",
                known.join(", ")
            )
        })?;
        if kinds.contains(&kind) {
            return Err(format!("[packets] summaries: {name:?} is named twice"));
        }
        kinds.push(kind);
    }
    Ok(SummarySet::of(kinds))
}

/// The `[[retention.class]]` sections, checked: named once each, with a filter
/// that parses or an interface, and guarantees that fit in `max_bytes`.
fn retention_classes(
    sections: Vec<ClassSection>,
    max_bytes: u64,
) -> Result<Vec<RetentionClass>, String> {
    let mut classes: Vec<RetentionClass> = Vec::new();
    for section in sections {
        let name = section.name;
        if name.is_empty() || classes.iter().any(|c| c.name == name) {
            return Err(format!(
                "[[retention.class]] name {name:?} is empty or given twice"
            ));
        }
        if section.filter.is_none() && section.interface.is_none() {
            return Err(format!(
                "[[retention.class]] {name:?} needs a filter or an interface"
            ));
        }
        let filter = section
            .filter
            .map(|text| {
                hindsight_filter::Filter::parse(&text)
                    .map_err(|e| format!("[[retention.class]] {name:?}: invalid filter:\n{e}"))
            })
            .transpose()?;
        classes.push(RetentionClass {
            name,
            filter,
            interface: section.interface,
            min_bytes: section.min_bytes,
            max_age: (section.max_age_secs > 0).then(|| Duration::from_secs(section.max_age_secs)),
        });
    }
    let guaranteed: u64 = classes.iter().map(|c| c.min_bytes).sum();
    if max_bytes > 0 && guaranteed > max_bytes {
        return Err(format!(
            "the retention classes guarantee {guaranteed} bytes, more than [packets] max_bytes ({max_bytes})"
        ));
    }
    Ok(classes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retention_classes_are_read_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        let write = |text: &str| std::fs::write(dir.path().join(CONFIG_FILE), text).unwrap();
        write(
            "[packets]\nmax_bytes = 1000\n[[retention.class]]\nname = \"dns\"\nfilter = \"udp port 53\"\nmin_bytes = 400\nmax_age_secs = 60\n[[retention.class]]\nname = \"wan\"\ninterface = 1\n",
        );
        let retention = archive_settings(dir.path(), None).unwrap().retention;
        assert_eq!(retention.classes.len(), 2);
        assert_eq!(retention.class_name(1), Some("dns"));
        assert_eq!(retention.class_name(2), Some("wan"));
        assert_eq!(retention.class_name(0), None);
        assert_eq!(retention.classes[0].max_age, Some(Duration::from_secs(60)));
        assert_eq!(retention.classes[1].interface, Some(1));
        for (text, needle) in [
            (
                "[packets]\nmax_bytes = 100\n[[retention.class]]\nname = \"dns\"\nfilter = \"udp\"\nmin_bytes = 400\n",
                "more than [packets] max_bytes",
            ),
            (
                "[[retention.class]]\nname = \"dns\"\n",
                "needs a filter or an interface",
            ),
            (
                "[[retention.class]]\nname = \"dns\"\nfilter = \"udp port\"\n",
                "invalid filter",
            ),
            (
                "[[retention.class]]\nname = \"a\"\ninterface = 1\n[[retention.class]]\nname = \"a\"\ninterface = 2\n",
                "given twice",
            ),
        ] {
            write(text);
            let error = archive_settings(dir.path(), None).unwrap_err().to_string();
            assert!(error.contains(needle), "{error}");
        }
    }

    #[test]
    fn settings_come_from_the_file_and_the_flag_overrides_them() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(archive_expiry(dir.path(), None).unwrap(), Expiry::OFF);
        std::fs::write(
            dir.path().join(CONFIG_FILE),
            "[connections]\nkeep = 500\ncompaction_interval_secs = 600\n",
        )
        .unwrap();
        let expiry = archive_expiry(dir.path(), None).unwrap();
        assert_eq!(expiry.keep_events, 500);
        assert_eq!(expiry.compaction_interval, Duration::from_secs(600));
        assert_eq!(expiry.cutoff_interval, Expiry::OFF.cutoff_interval);
        assert_eq!(archive_expiry(dir.path(), Some(7)).unwrap().keep_events, 7);
        std::fs::write(dir.path().join(CONFIG_FILE), "[connections]\nkeeep = 5\n").unwrap();
        let error = format!("{:#}", archive_expiry(dir.path(), None).unwrap_err());
        assert!(
            error.contains("config.toml") && error.contains("keeep"),
            "{error}"
        );
        std::fs::write(
            dir.path().join(CONFIG_FILE),
            "[connections]\ncutoff_interval_secs = 0\n",
        )
        .unwrap();
        let error = format!("{:#}", archive_expiry(dir.path(), None).unwrap_err());
        assert!(
            error.contains("cutoff_interval_secs must be positive"),
            "{error}"
        );
    }

    #[test]
    fn the_summaries_are_read_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        let write = |text: &str| std::fs::write(dir.path().join(CONFIG_FILE), text).unwrap();
        let summaries = || archive_settings(dir.path(), None).map(|s| s.summaries);
        assert_eq!(summaries().unwrap(), SummarySet::ALL);
        write("[packets]\nsummaries = []\n");
        assert_eq!(summaries().unwrap(), SummarySet::NONE);
        write("[packets]\nsummaries = [\"hosts\", \"services\"]\n");
        let set = summaries().unwrap();
        assert_eq!(
            set.kinds().collect::<Vec<_>>(),
            [SummaryKind::Services, SummaryKind::Hosts]
        );
        for (text, needle) in [
            (
                "[packets]\nsummaries = [\"host\"]\n",
                "no summary named \"host\" (there are services, hosts, flows)",
            ),
            (
                "[packets]\nsummaries = [\"flows\", \"flows\"]\n",
                "\"flows\" is named twice",
            ),
            ("[packets]\nsummaries = \"flows\"\n", "summaries"),
        ] {
            write(text);
            let error = summaries().unwrap_err().to_string();
            assert!(
                error.contains("config.toml") && error.contains(needle),
                "{error}"
            );
        }
    }

    #[test]
    fn the_home_network_is_read_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        assert!(archive_settings(dir.path(), None).unwrap().home.is_empty());
        std::fs::write(
            dir.path().join(CONFIG_FILE),
            "[network]\nhome = [\"10.0.0.0/8\", \"2001:db8::/32\"]\n",
        )
        .unwrap();
        let home = archive_settings(dir.path(), None).unwrap().home;
        assert_eq!(
            home,
            [
                hindsight_model::network_range("10.0.0.0/8").unwrap(),
                hindsight_model::network_range("2001:db8::/32").unwrap()
            ]
        );
        std::fs::write(
            dir.path().join(CONFIG_FILE),
            "[network]\nhome = [\"10.0.0.0/33\"]\n",
        )
        .unwrap();
        let error = archive_settings(dir.path(), None).unwrap_err().to_string();
        assert!(
            error.contains("config.toml") && error.contains("[network] home"),
            "{error}"
        );
    }
}
