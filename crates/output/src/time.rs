//! Time arguments of the command line: `--since`, `--until`, `--between`.
//!
//! Accepted forms, all UTC unless an offset is given:
//! - RFC 3339: `2012-03-01T10:00:00Z`, `2012-03-01T11:00:00+01:00`, fractions allowed;
//! - civil date-time or date: `2012-03-01 10:00:00`, `2012-03-01T10:00`, `2012-03-01`;
//! - Unix epoch seconds, fractions allowed: `1330596000`, `1330596000.25`;
//! - relative to now: `90s`, `15m`, `2h`, `7d`, `3w` (that long ago), and `now`.

use anyhow::{Context, Result, anyhow, bail};
use hindsight_store::TimeRange;
use jiff::Timestamp;
use jiff::tz::TimeZone;

const NANOS_PER_SECOND: i128 = 1_000_000_000;

/// Parses a time argument into ns since the Unix epoch.
pub fn parse_instant(text: &str, now: Timestamp) -> Result<i64> {
    let text = text.trim();
    let nanos = if text.eq_ignore_ascii_case("now") {
        now.as_nanosecond()
    } else if let Some(span_nanos) = parse_relative(text)? {
        now.as_nanosecond() - span_nanos
    } else if let Some(epoch_nanos) = parse_epoch(text) {
        epoch_nanos
    } else if let Ok(ts) = text.parse::<Timestamp>() {
        ts.as_nanosecond()
    } else if let Ok(dt) = text.parse::<jiff::civil::DateTime>() {
        dt.to_zoned(TimeZone::UTC)
            .with_context(|| format!("time {text:?} is out of range"))?
            .timestamp()
            .as_nanosecond()
    } else if let Ok(date) = text.parse::<jiff::civil::Date>() {
        date.to_zoned(TimeZone::UTC)
            .with_context(|| format!("time {text:?} is out of range"))?
            .timestamp()
            .as_nanosecond()
    } else {
        bail!(
            "cannot read {text:?} as a time: use RFC 3339 (2012-03-01T10:00:00Z), \
             a date (2012-03-01), epoch seconds (1330596000.5) or an age (90s, 15m, 2h, 7d, 3w)"
        );
    };
    i64::try_from(nanos).map_err(|_| anyhow!("time {text:?} is out of range"))
}

/// A duration written as the ages are: a whole number and a unit (90s, 15m,
/// 2h, 7d, 3w).
pub fn parse_duration(text: &str) -> Result<std::time::Duration> {
    match parse_relative(text.trim())? {
        Some(nanos) if nanos > 0 => Ok(std::time::Duration::from_nanos(
            u64::try_from(nanos).with_context(|| format!("duration {text:?} is too long"))?,
        )),
        _ => bail!("duration {text:?}: use a whole number and a unit: 10s, 1m, 2h, 1d or 1w"),
    }
}

/// As [`parse_duration`], and `0` or `0s` for no time at all (how far a dump
/// reaches on either side, say).
pub fn parse_span(text: &str) -> Result<std::time::Duration> {
    if matches!(text.trim(), "0" | "0s") {
        return Ok(std::time::Duration::ZERO);
    }
    parse_duration(text)
}

fn parse_relative(text: &str) -> Result<Option<i128>> {
    let Some(unit) = text.chars().last().filter(char::is_ascii_alphabetic) else {
        return Ok(None);
    };
    let number = &text[..text.len() - unit.len_utf8()];
    if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit()) {
        return Ok(None);
    }
    let seconds_per_unit: i128 = match unit {
        's' => 1,
        'm' => 60,
        'h' => 3600,
        'd' => 86_400,
        'w' => 7 * 86_400,
        _ => bail!("unknown time unit {unit:?} in {text:?}: use s, m, h, d or w"),
    };
    let count: i128 = number
        .parse()
        .with_context(|| format!("age {text:?} is too large"))?;
    Ok(Some(count * seconds_per_unit * NANOS_PER_SECOND))
}

fn parse_epoch(text: &str) -> Option<i128> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    if whole.is_empty()
        || !whole.bytes().all(|b| b.is_ascii_digit())
        || !fraction.bytes().all(|b| b.is_ascii_digit())
        || fraction.len() > 9
        || whole.len() > 12
    {
        return None;
    }
    let seconds: i128 = whole.parse().ok()?;
    let padded = format!("{fraction:0<9}");
    let nanos: i128 = padded.parse().ok()?;
    Some(seconds * NANOS_PER_SECOND + nanos)
}

/// Builds the half-open window `[since, until)` as an inclusive [`TimeRange`].
pub fn time_range(
    since: Option<&str>,
    until: Option<&str>,
    between: Option<&[String]>,
) -> Result<TimeRange> {
    let now = Timestamp::now();
    let (since, until) = match between {
        Some([start, end]) => (Some(start.as_str()), Some(end.as_str())),
        Some(_) => bail!("--between takes two times: START END"),
        None => (since, until),
    };
    let start_nanos = since
        .map(|t| parse_instant(t, now).context("bad --since"))
        .transpose()?
        .unwrap_or(i64::MIN);
    let end_nanos = until
        .map(|t| parse_instant(t, now).context("bad --until"))
        .transpose()?
        .map_or(i64::MAX, |end| end.saturating_sub(1));
    if start_nanos > end_nanos {
        bail!("the time window is empty: its start is not before its end");
    }
    Ok(TimeRange {
        start_nanos,
        end_nanos,
    })
}

/// Formats ns since the epoch as RFC 3339 UTC with nanoseconds.
pub fn format_nanos(ts_nanos: i64) -> String {
    match Timestamp::from_nanosecond(i128::from(ts_nanos)) {
        Ok(ts) => format!("{ts:.9}"),
        Err(_) => ts_nanos.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> Timestamp {
        "2026-01-01T00:00:00Z".parse().unwrap()
    }

    #[test]
    fn reads_every_documented_form() {
        let base = 1_330_596_000_000_000_000_i64;
        for text in [
            "2012-03-01T10:00:00Z",
            "2012-03-01T11:00:00+01:00",
            "2012-03-01 10:00:00",
            "2012-03-01T10:00",
            "1330596000",
            "1330596000.000000000",
        ] {
            assert_eq!(parse_instant(text, now()).unwrap(), base, "{text}");
        }
        assert_eq!(
            parse_instant("1330596000.25", now()).unwrap(),
            base + 250_000_000
        );
        assert_eq!(
            parse_instant("2012-03-01", now()).unwrap(),
            base - 10 * 3600 * 1_000_000_000
        );
        let now_nanos = i64::try_from(now().as_nanosecond()).unwrap();
        assert_eq!(
            parse_instant("2h", now()).unwrap(),
            now_nanos - 7200 * 1_000_000_000
        );
        assert_eq!(parse_instant("now", now()).unwrap(), now_nanos);
    }

    #[test]
    fn rejects_nonsense_with_a_hint() {
        let error = parse_instant("yesterday-ish", now())
            .unwrap_err()
            .to_string();
        assert!(error.contains("RFC 3339"), "{error}");
        let error = parse_instant("5y", now()).unwrap_err().to_string();
        assert!(error.contains("unknown time unit"), "{error}");
    }

    #[test]
    fn window_is_half_open() {
        let range = time_range(Some("100"), Some("200"), None).unwrap();
        assert_eq!(range.start_nanos, 100_000_000_000);
        assert_eq!(range.end_nanos, 200_000_000_000 - 1);
        assert!(time_range(Some("200"), Some("100"), None).is_err());
        let between = ["100".to_owned(), "200".to_owned()];
        assert_eq!(time_range(None, None, Some(&between)).unwrap(), range);
    }

    #[test]
    fn formats_nanoseconds() {
        assert_eq!(
            format_nanos(1_330_596_000_000_000_001),
            "2012-03-01T10:00:00.000000001Z"
        );
    }
}
