//! What hindsight says on stderr while it runs (the `log` crate's records),
//! in one of two forms (`--log-format`):
//!
//! - `plain`, for a terminal and journald: `hindsight serve: listening on ...`,
//!   `hindsight serve: warning: ...` (the name of the part that speaks, the
//!   level when it is not info);
//! - `json`, one object a line for log shippers:
//!   `{"ts":"2026-12-07T10:41:00.123456789Z","level":"info","target":"hindsight_serve","message":"..."}`.
//!
//! hindsight's own records are kept from info up, the libraries' under it
//! (DataFusion's, RocksDB's wrappers...) from warn up.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

/// The form of what is said.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// `hindsight serve: message`.
    #[default]
    Plain,
    /// One JSON object a line.
    Json,
}

impl std::str::FromStr for LogFormat {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "plain" => Ok(Self::Plain),
            "json" => Ok(Self::Json),
            other => Err(format!("{other:?}: expected plain or json")),
        }
    }
}

/// Says records on stderr, as JSON when `json` is set.
struct Logger {
    json: AtomicBool,
}

static LOGGER: Logger = Logger {
    json: AtomicBool::new(false),
};

/// Says the records from now on in `format` (the binary sets plain for
/// every command; `serve --log-format json` changes it).
pub fn init(format: LogFormat) {
    LOGGER
        .json
        .store(format == LogFormat::Json, Ordering::Relaxed);
    if log::set_logger(&LOGGER).is_ok() {
        log::set_max_level(log::LevelFilter::Info);
    }
}

/// What a record's target says in plain form: the command that speaks.
fn speaker(target: &str) -> &'static str {
    if target.starts_with("hindsight_serve") {
        "hindsight serve"
    } else {
        "hindsight"
    }
}

impl log::Log for Logger {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::Level::Warn || metadata.target().starts_with("hindsight")
    }

    fn log(&self, record: &log::Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let line = match self.json.load(Ordering::Relaxed) {
            false => {
                let level = match record.level() {
                    log::Level::Error => "error: ",
                    log::Level::Warn => "warning: ",
                    _ => "",
                };
                format!("{}: {level}{}\n", speaker(record.target()), record.args())
            }
            true => json_line(record),
        };
        // One write a line, so that lines of threads do not interleave.
        let _stderr_gone = std::io::stderr().lock().write_all(line.as_bytes());
    }

    fn flush(&self) {}
}

fn json_line(record: &log::Record<'_>) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX));
    let text = |value: &str| serde_json::Value::from(value).to_string();
    // In this order: the time first, as a reader of the log looks for it.
    format!(
        "{{\"ts\":{},\"level\":{},\"target\":{},\"message\":{}}}\n",
        text(&crate::time::format_nanos(now)),
        text(&record.level().as_str().to_ascii_lowercase()),
        text(record.target()),
        text(&record.args().to_string()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_json_line_is_one_object_with_the_four_fields() {
        let line = json_line(
            &log::Record::builder()
                .args(format_args!("listening on \"http://127.0.0.1:1\"\nnext"))
                .level(log::Level::Warn)
                .target("hindsight_serve::reload")
                .build(),
        );
        assert_eq!(line.matches('\n').count(), 1, "{line}");
        assert!(line.starts_with("{\"ts\":\""), "{line}");
        let value: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(value["level"], "warn");
        assert_eq!(value["target"], "hindsight_serve::reload");
        assert_eq!(
            value["message"],
            "listening on \"http://127.0.0.1:1\"\nnext"
        );
        assert!(value["ts"].as_str().unwrap().ends_with('Z'), "{value}");
        assert_eq!(speaker("hindsight_serve::api"), "hindsight serve");
        assert_eq!(speaker("hindsight_index::connections"), "hindsight");
        assert_eq!("json".parse::<LogFormat>(), Ok(LogFormat::Json));
        assert!("xml".parse::<LogFormat>().is_err());
    }
}
