//! The five analyses of `fastbit-telegraphcq` (section 6), built in as named
//! watches: each a script of stages in `crates/watch/analyses/NAME.sql`, with
//! its live part, its historical part and the join, which a user can read,
//! copy and change (`hindsight watch --analysis NAME --show`).
//!
//! A file declares its parameters in its heading, one per line:
//! `-- :name = default   what it means`. A default is a number (`10`,
//! `0.5`), a duration (`7d`, `10s`: an interval) or text.

use std::time::Duration;

use hindsight_sql::ScalarValue;

/// One built-in analysis.
#[derive(Clone, Copy, Debug)]
pub struct Analysis {
    /// Its name (`portscan`).
    pub name: &'static str,
    /// Its script.
    pub sql: &'static str,
    /// How many slides its window is long (the user's `--window` is the
    /// slide): 1 but for `dispersion`, whose window is its period.
    pub slides: u32,
}

/// The built-in analyses.
pub const ANALYSES: [Analysis; 5] = [
    Analysis {
        name: "elephants",
        sql: include_str!("../analyses/elephants.sql"),
        slides: 1,
    },
    Analysis {
        name: "mice",
        sql: include_str!("../analyses/mice.sql"),
        slides: 1,
    },
    Analysis {
        name: "portscan",
        sql: include_str!("../analyses/portscan.sql"),
        slides: 1,
    },
    Analysis {
        name: "matrix",
        sql: include_str!("../analyses/matrix.sql"),
        slides: 1,
    },
    Analysis {
        name: "dispersion",
        sql: include_str!("../analyses/dispersion.sql"),
        slides: 10,
    },
];

/// A parameter an analysis declares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Param {
    /// Its name, without the colon.
    pub name: String,
    /// Its default, as written.
    pub default: String,
    /// What it means.
    pub meaning: String,
}

impl Analysis {
    /// The analysis named `name`, or an error naming the ones there are.
    pub fn named(name: &str) -> Result<Self, String> {
        ANALYSES
            .iter()
            .find(|analysis| analysis.name == name)
            .copied()
            .ok_or_else(|| {
                format!(
                    "no analysis is named {name:?}; the analyses are {}",
                    ANALYSES.map(|a| a.name).join(", ")
                )
            })
    }

    /// The first paragraph of its heading, without the name and the reference.
    pub fn summary(&self) -> String {
        let paragraph: Vec<&str> = self
            .sql
            .lines()
            .map(|line| line.trim_start_matches("--").trim())
            .take_while(|line| !line.is_empty())
            .collect();
        let text = paragraph.join(" ");
        let text = text
            .split_once(": ")
            .map_or(text.as_str(), |(_, rest)| rest);
        let text = text.split(" (fastbit-telegraphcq").next().unwrap_or(text);
        text.trim_end_matches('.').to_owned()
    }

    /// The parameters its heading declares.
    pub fn params(&self) -> Vec<Param> {
        self.sql
            .lines()
            .take_while(|line| line.starts_with("--"))
            .filter_map(|line| {
                let declaration = line.trim_start_matches("--").trim().strip_prefix(':')?;
                let (name, rest) = declaration.split_once('=')?;
                let rest = rest.trim();
                let (default, meaning) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
                Some(Param {
                    name: name.trim().to_owned(),
                    default: default.to_owned(),
                    meaning: meaning.trim().to_owned(),
                })
            })
            .collect()
    }

    /// Its parameters' values: the defaults, with `overrides` (`name=value`)
    /// on top; an override of a parameter it does not declare is an error.
    pub fn bind(
        &self,
        overrides: &[(String, String)],
    ) -> Result<Vec<(String, ScalarValue)>, String> {
        let params = self.params();
        for (name, _) in overrides {
            if !params.iter().any(|p| p.name == *name) {
                return Err(format!(
                    "the analysis {} has no parameter {name:?}; its parameters are {}",
                    self.name,
                    params
                        .iter()
                        .map(|p| p.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
        }
        params
            .into_iter()
            .map(|param| {
                let text = overrides
                    .iter()
                    .rev()
                    .find(|(name, _)| *name == param.name)
                    .map_or(param.default.as_str(), |(_, value)| value.as_str());
                Ok((param.name, param_value(text)))
            })
            .collect()
    }
}

/// A parameter's value from its text: an integer, a decimal number, a
/// duration (`10s`, `7d`: an interval), or else the text.
pub fn param_value(text: &str) -> ScalarValue {
    if let Ok(n) = text.parse::<i64>() {
        return ScalarValue::Int64(Some(n));
    }
    if let Ok(x) = text.parse::<f64>() {
        return ScalarValue::Float64(Some(x));
    }
    if let Ok(duration) = hindsight_output::time::parse_duration(text) {
        return interval(duration);
    }
    ScalarValue::Utf8(Some(text.to_owned()))
}

/// A duration as a SQL interval.
pub fn interval(duration: Duration) -> ScalarValue {
    ScalarValue::new_interval_mdn(0, 0, i64::try_from(duration.as_nanos()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_analysis_declares_its_parameters_and_binds_overrides() {
        for analysis in ANALYSES {
            assert!(!analysis.summary().is_empty(), "{}", analysis.name);
            assert!(!analysis.params().is_empty(), "{}", analysis.name);
        }
        let portscan = Analysis::named("portscan").unwrap();
        let names: Vec<String> = portscan.params().into_iter().map(|p| p.name).collect();
        assert_eq!(names, ["k", "min_fanout", "history"]);
        let bound = portscan
            .bind(&[("min_fanout".to_owned(), "5".to_owned())])
            .unwrap();
        assert_eq!(
            bound[1],
            ("min_fanout".to_owned(), ScalarValue::Int64(Some(5)))
        );
        assert_eq!(
            bound[2].1,
            ScalarValue::new_interval_mdn(0, 0, 7 * 86_400 * 1_000_000_000)
        );
        let error = portscan
            .bind(&[("kk".to_owned(), "1".to_owned())])
            .unwrap_err();
        assert!(
            error.contains("kk") && error.contains("min_fanout"),
            "{error}"
        );
        let error = Analysis::named("portscans").unwrap_err();
        assert!(error.contains("dispersion"), "{error}");
    }
}
