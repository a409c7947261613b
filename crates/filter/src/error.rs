//! Errors of the filter language: a filter that does not parse or does not
//! type-check, with the position of the fault.

use std::fmt;

/// The longest stretch of filter text shown around the error position; longer
/// filters are cut to a window around the caret so that a 64 KiB filter does
/// not produce a 64 KiB message.
const MAX_SHOWN_CHARS: usize = 120;

/// A filter that does not parse or does not type-check, with the position of the fault.
///
/// Its `Display` shows the filter with a caret line under the fault:
///
/// ```text
/// ip.adr == 1.2.3.4
/// ^^^^^^ unknown field "ip.adr"; did you mean "ip.addr"?
/// ```
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct ParseError {
    /// The filter text as given.
    pub filter: String,
    /// What is wrong, lowercase, without a trailing period.
    pub message: String,
    /// The 1-based character (not byte) position where the fault starts; one past
    /// the last character when the filter ends too early.
    pub column: usize,
    /// The offending text (empty at the end of the filter).
    pub fragment: String,
}

impl ParseError {
    /// Returns an error at `column` (1-based, in characters) covering `fragment`.
    pub fn new(
        filter: &str,
        column: usize,
        fragment: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            filter: filter.to_owned(),
            message: message.into(),
            column,
            fragment: fragment.into(),
        }
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let chars: Vec<char> = self
            .filter
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        let caret_start = self.column.saturating_sub(1).min(chars.len());
        let caret_len = self.fragment.chars().count().max(1);
        // Show a window of the filter that contains the start of the fault.
        let window_start = if chars.len() <= MAX_SHOWN_CHARS {
            0
        } else {
            caret_start
                .saturating_sub(MAX_SHOWN_CHARS / 3)
                .min(chars.len().saturating_sub(MAX_SHOWN_CHARS))
        };
        let window_end = (window_start + MAX_SHOWN_CHARS).min(chars.len());
        let prefix = if window_start > 0 { "..." } else { "" };
        let suffix = if window_end < chars.len() { "..." } else { "" };
        let shown: String = chars
            .get(window_start..window_end)
            .unwrap_or_default()
            .iter()
            .collect();
        let indent = prefix.len() + caret_start - window_start;
        let caret_len = caret_len.min(window_end.saturating_sub(caret_start).max(1));
        writeln!(f, "{prefix}{shown}{suffix}")?;
        write!(
            f,
            "{:indent$}{} {}",
            "",
            "^".repeat(caret_len),
            self.message,
            indent = indent
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_error_display_puts_caret_under_column() {
        let error = ParseError::new(
            "ip.adr == 1.2.3.4",
            1,
            "ip.adr",
            "unknown field \"ip.adr\"; did you mean \"ip.addr\"?",
        );
        assert_eq!(
            error.to_string(),
            "ip.adr == 1.2.3.4\n^^^^^^ unknown field \"ip.adr\"; did you mean \"ip.addr\"?"
        );
    }

    #[test]
    fn parse_error_display_at_end_shows_one_caret_past_the_text() {
        let error = ParseError::new("tcp &&", 7, "", "unexpected end of filter");
        assert_eq!(
            error.to_string(),
            "tcp &&\n      ^ unexpected end of filter"
        );
    }

    #[test]
    fn parse_error_display_cuts_long_filters_to_a_window() {
        let filter = format!("{} && bogus", "tcp && ".repeat(100));
        let column = filter.chars().count() - 4;
        let error = ParseError::new(&filter, column, "bogus", "unknown field \"bogus\"");
        let shown = error.to_string();
        let mut lines = shown.lines();
        let text = lines.next().unwrap_or_default();
        let carets = lines.next().unwrap_or_default();
        assert!(text.starts_with("...") && text.ends_with("bogus"));
        assert!(text.chars().count() <= MAX_SHOWN_CHARS + 6);
        let caret_at = carets.find('^').unwrap_or(0);
        assert_eq!(text.get(caret_at..caret_at + 5), Some("bogus"));
    }
}
