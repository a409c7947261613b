//! A watch as a user asks for one (the command line, `[[watch]]` in serve's
//! configuration, `POST /api/v1/watches`): a name, a statement or a built-in
//! analysis, a window, parameters; made into a [`WatchSpec`] in one place.

use std::time::Duration;

use crate::analyses::{Analysis, param_value};
use crate::{Bounds, WatchSpec, WindowSpec};

/// A watch as asked for.
#[derive(Clone, Debug, Default)]
pub struct WatchRequest {
    /// Its name: letters, digits, `-` and `_`, at most 64.
    pub name: String,
    /// The statement or script, unless `analysis`.
    pub sql: Option<String>,
    /// A built-in analysis, unless `sql`.
    pub analysis: Option<String>,
    /// Length of a window (of a slide, for an analysis whose window is
    /// several slides).
    pub window: Duration,
    /// Time between two windows' ends (not with an analysis); default: the window.
    pub slide: Option<Duration>,
    /// Named parameters, as text (`k` = `10`).
    pub params: Vec<(String, String)>,
    /// Most rows a window holds.
    pub max_window_rows: Option<usize>,
    /// Longest a window's statement runs (default [`crate::WINDOW_TIMEOUT`]).
    pub window_timeout: Option<Duration>,
}

/// Longest name of a watch.
const MAX_NAME: usize = 64;

impl WatchRequest {
    /// The watch, and the analysis it runs if any; or what is wrong with the request.
    pub fn spec(&self) -> Result<(WatchSpec, Option<Analysis>), String> {
        if self.name.is_empty()
            || self.name.len() > MAX_NAME
            || !self
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(format!(
                "watch name {:?}: use 1 to {MAX_NAME} letters, digits, - and _",
                self.name
            ));
        }
        let (sql, params, window, analysis) = match (&self.analysis, &self.sql) {
            (Some(_), Some(_)) => {
                return Err(format!(
                    "watch {}: give sql or analysis, not both",
                    self.name
                ));
            }
            (Some(name), None) => {
                let analysis = Analysis::named(name)?;
                if self.slide.is_some() {
                    return Err(format!(
                        "watch {}: an analysis sets its own slide (the window)",
                        self.name
                    ));
                }
                let window = WindowSpec {
                    range: self.window * analysis.slides,
                    slide: self.window,
                };
                (
                    analysis.sql.to_owned(),
                    analysis.bind(&self.params)?,
                    window,
                    Some(analysis),
                )
            }
            (None, Some(sql)) => (
                sql.clone(),
                self.params
                    .iter()
                    .map(|(name, value)| (name.clone(), param_value(value)))
                    .collect(),
                WindowSpec {
                    range: self.window,
                    slide: self.slide.unwrap_or(self.window),
                },
                None,
            ),
            (None, None) => return Err(format!("watch {}: give sql or analysis", self.name)),
        };
        window
            .validate()
            .map_err(|e| format!("watch {}: {e}", self.name))?;
        let mut bounds = Bounds::default();
        if let Some(rows) = self.max_window_rows {
            bounds.max_rows = rows;
        }
        if let Some(timeout) = self.window_timeout {
            bounds.window_timeout = timeout;
        }
        Ok((
            WatchSpec {
                name: self.name.clone(),
                sql,
                params,
                window,
                bounds,
            },
            analysis,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_become_watches_or_say_what_is_wrong() {
        let request = WatchRequest {
            name: "scans".to_owned(),
            analysis: Some("dispersion".to_owned()),
            window: Duration::from_secs(10),
            ..WatchRequest::default()
        };
        let (spec, analysis) = request.spec().unwrap();
        assert_eq!(analysis.unwrap().name, "dispersion");
        assert_eq!(spec.window.range, Duration::from_secs(100));
        for (request, expected) in [
            (
                WatchRequest {
                    name: "a b".to_owned(),
                    ..request.clone()
                },
                "letters, digits",
            ),
            (
                WatchRequest {
                    sql: Some("SELECT 1".to_owned()),
                    ..request.clone()
                },
                "not both",
            ),
            (
                WatchRequest {
                    analysis: None,
                    ..request.clone()
                },
                "give sql or analysis",
            ),
            (
                WatchRequest {
                    analysis: Some("nope".to_owned()),
                    ..request.clone()
                },
                "no analysis is named",
            ),
            (
                WatchRequest {
                    analysis: None,
                    sql: Some("SELECT 1".to_owned()),
                    slide: Some(Duration::from_secs(3)),
                    ..request.clone()
                },
                "whole number of slides",
            ),
        ] {
            let error = request.spec().unwrap_err();
            assert!(error.contains(expected), "{error}");
        }
    }
}
