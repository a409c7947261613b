//! The archive's marker file, `ARCHIVE/HINDSIGHT`: it says the directory is a
//! hindsight archive and names the version of each of its on-disk formats, as
//! PostgreSQL's `PG_VERSION` does for a data directory:
//!
//! ```text
//! hindsight archive v1
//! catalog 1
//! config 1
//! address-index 1
//! connection-index 1
//! objects-log 1
//! segments 5
//! ```
//!
//! Every command checks it before it opens anything else, so a part written in a
//! format this build does not read is refused with both versions named, before
//! a byte of it could be misread. A writer rewrites it with the versions it
//! writes (raising a line is what keeps an older build out once a newer one has
//! written there). A marker of the first line alone was written before the
//! lines existed: its parts are each at version 1. Segment files also carry
//! their own version (`segment::FORMAT_VERSION`), so one copied elsewhere is
//! checked by itself; the catalog's checkpoint is a cache checked by its magic
//! (one of another version is not read, and is written again from the catalog).

use std::fs;
use std::io::{Read, Write};
use std::path::Path;

use crate::error::{Result, StoreError};
use crate::segment::writer::sync_dir;

/// Name of the marker file at the archive root.
pub(crate) const MARKER_FILE: &str = "HINDSIGHT";
/// First line of the marker: the product and the archive's layout (which files
/// and directories it has).
const LAYOUT_LINE: &str = "hindsight archive v1";
/// The most bytes of a marker read (a marker is under 200).
const MARKER_MAX_BYTES: u64 = 4096;

/// One on-disk format of an archive, named in its marker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Format {
    /// Its name in the marker.
    pub name: &'static str,
    /// What it is, as a user knows it.
    pub what: &'static str,
    /// The oldest version this build reads.
    pub oldest: u32,
    /// The version this build writes. Raise it on any change an older build
    /// would misread, and keep reading (or convert) the older forms down to
    /// `oldest`.
    pub current: u32,
}

/// The archive's formats besides its layout, in marker order.
pub const FORMATS: [Format; 6] = [
    Format {
        name: "catalog",
        what: "the catalog (catalog.jsonl)",
        oldest: 1,
        current: 1,
    },
    Format {
        name: "config",
        what: "the settings (config.toml)",
        oldest: 1,
        current: 1,
    },
    Format {
        name: "address-index",
        what: "the address index (index/)",
        oldest: 1,
        current: 1,
    },
    Format {
        name: "connection-index",
        what: "the connection index (connections/)",
        oldest: 1,
        current: 1,
    },
    Format {
        name: "objects-log",
        what: "the log of object-store copies (objects.log)",
        oldest: 1,
        current: 1,
    },
    Format {
        name: "segments",
        what: "the segment files (packets/, flows/)",
        oldest: 1,
        current: crate::segment::FORMAT_VERSION,
    },
];

/// The marker this build writes.
pub(crate) fn current_marker() -> String {
    let mut text = format!("{LAYOUT_LINE}\n");
    for format in FORMATS {
        text.push_str(&format!("{} {}\n", format.name, format.current));
    }
    text
}

/// Checks the marker of the archive at `root`: that it is one, of a layout and
/// with format versions this build reads. Returns the marker's text.
pub(crate) fn check_marker(root: &Path) -> Result<String> {
    let marker = root.join(MARKER_FILE);
    let not_archive = |reason: String| StoreError::NotAnArchive {
        path: root.to_owned(),
        reason,
    };
    let mut text = String::new();
    match fs::File::open(&marker) {
        Ok(file) => {
            file.take(MARKER_MAX_BYTES)
                .read_to_string(&mut text)
                .map_err(|_| not_archive(format!("{} is not text", marker.display())))?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(not_archive(
                "no HINDSIGHT marker file (create one with `hindsight ingest`)".to_owned(),
            ));
        }
        Err(e) => return Err(StoreError::io("read marker", &marker)(e)),
    }
    let mut lines = text.lines();
    let first = lines.next().unwrap_or_default().trim();
    if first != LAYOUT_LINE {
        return Err(not_archive(
            match first.strip_prefix("hindsight archive ") {
                Some(version) => format!(
                    "{} says archive layout {version}; this build reads {} \
                 (a newer hindsight wrote it?)",
                    marker.display(),
                    LAYOUT_LINE.trim_start_matches("hindsight archive "),
                ),
                None => format!("unsupported archive marker {first:?}"),
            },
        ));
    }
    let mut seen = [false; FORMATS.len()];
    for (number, line) in lines.enumerate().map(|(n, line)| (n + 2, line.trim())) {
        if line.is_empty() {
            continue;
        }
        let bad = |why: &str| {
            not_archive(format!(
                "{} line {number}: {why}: {line:?}",
                marker.display()
            ))
        };
        let (name, version) = line
            .split_once(' ')
            .ok_or_else(|| bad("not `format version`"))?;
        let version: u32 = version
            .trim()
            .parse()
            .map_err(|_| bad("the version is not a number"))?;
        let Some(at) = FORMATS.iter().position(|format| format.name == name) else {
            return Err(bad(
                "a format this build does not know (a newer hindsight wrote it? upgrade hindsight)",
            ));
        };
        if std::mem::replace(&mut seen[at], true) {
            return Err(bad("a format named twice"));
        }
        let format = FORMATS[at];
        if !(format.oldest..=format.current).contains(&version) {
            return Err(StoreError::FormatVersion {
                path: root.to_owned(),
                what: format.what,
                found: version,
                oldest: format.oldest,
                current: format.current,
            });
        }
    }
    Ok(text)
}

/// Writes this build's marker into `root` (a writer's, after [`check_marker`]),
/// unless `found` is it already: replaced whole by a rename, so a crash leaves
/// the old marker or the new one.
pub(crate) fn write_marker(root: &Path, found: Option<&str>) -> Result<()> {
    let text = current_marker();
    if found == Some(text.as_str()) {
        return Ok(());
    }
    let marker = root.join(MARKER_FILE);
    let temp = root.join(format!(".{MARKER_FILE}.tmp"));
    let mut file = fs::File::create(&temp).map_err(StoreError::io("write marker", &temp))?;
    file.write_all(text.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(StoreError::io("write marker", &temp))?;
    fs::rename(&temp, &marker).map_err(StoreError::io("replace marker", &marker))?;
    sync_dir(root)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn archive_with(marker: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join(MARKER_FILE), marker).unwrap();
        dir
    }

    #[test]
    fn this_builds_marker_and_the_first_line_alone_are_read() {
        for marker in [current_marker(), format!("{LAYOUT_LINE}\n")] {
            let dir = archive_with(&marker);
            assert_eq!(check_marker(dir.path()).unwrap(), marker);
        }
    }

    #[test]
    fn each_format_out_of_range_is_refused_with_both_versions() {
        for format in FORMATS {
            for found in [format.current + 1, format.oldest - 1] {
                let marker = current_marker().replace(
                    &format!("\n{} {}\n", format.name, format.current),
                    &format!("\n{} {found}\n", format.name),
                );
                let dir = archive_with(&marker);
                let error = check_marker(dir.path()).unwrap_err().to_string();
                assert!(
                    error.contains(format.what)
                        && error.contains(&format!("format version {found};"))
                        && error.contains(&format!("{} to {}", format.oldest, format.current)),
                    "{error}"
                );
                let side = if found > format.current {
                    "newer"
                } else {
                    "older"
                };
                assert!(error.contains(side), "{error}");
            }
        }
    }

    #[test]
    fn unknown_repeated_or_malformed_lines_are_refused_by_line() {
        for (line, why) in [
            ("flux-capacitor 1", "does not know"),
            ("catalog 1", "named twice"),
            ("catalog one", "not a number"),
            ("catalog", "not `format version`"),
        ] {
            let dir = archive_with(&format!("{}{line}\n", current_marker()));
            let error = check_marker(dir.path()).unwrap_err().to_string();
            assert!(error.contains(why) && error.contains("line 8"), "{error}");
        }
        let dir = archive_with("hindsight archive v2\n");
        let error = check_marker(dir.path()).unwrap_err().to_string();
        assert!(
            error.contains("layout v2") && error.contains("reads v1"),
            "{error}"
        );
    }

    #[test]
    fn a_writer_raises_an_old_marker_to_this_builds() {
        let dir = archive_with(&format!("{LAYOUT_LINE}\n"));
        let found = check_marker(dir.path()).unwrap();
        write_marker(dir.path(), Some(&found)).unwrap();
        assert_eq!(
            fs::read_to_string(dir.path().join(MARKER_FILE)).unwrap(),
            current_marker()
        );
        assert!(!dir.path().join(".HINDSIGHT.tmp").exists());
    }
}
