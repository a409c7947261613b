//! The role of the filter crate is to turn the text of a filter, written in
//! Wireshark display-filter syntax or as tcpdump primitives, into a typed
//! [`Filter`] that every surface of hindsight (CLI, REST API, live triggers)
//! evaluates the same way, and that the planner can ask which addresses and
//! ports a matching packet must have.
//!
//! The language is documented for users in `docs/filter-language.md`.

#![cfg_attr(
    not(test),
    deny(
        clippy::indexing_slicing,
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic
    )
)]

pub mod ast;
mod bpf;
mod columns;
pub mod error;
mod eval;
pub mod fields;
mod lexer;
pub mod names;
pub mod offsets;
mod parser;
pub mod payload;
mod prune;
mod value;

use std::fmt;
use std::str::FromStr;

pub use ast::{CmpOp, Expr, Field, FieldType, Literal, Quantifier};
pub use eval::Verdict;

pub use crate::error::ParseError;

/// The longest filter text accepted, in bytes.
pub const MAX_FILTER_LEN_BYTES: usize = 64 * 1024;
/// The deepest nesting accepted: of parentheses and negations in the text (`!(`
/// counting once), and of operators in the parsed tree. The printed form of a
/// filter never nests deeper than its tree, so it always parses back.
pub const MAX_NESTING_DEPTH: usize = 256;
/// The most elements a set `{...}` may hold.
pub const MAX_SET_ELEMENTS: usize = 10_000;

/// Returns true if a tree of `depth` (a leaf is 1) nests operators deeper than
/// [`MAX_NESTING_DEPTH`].
fn too_deep(depth: usize) -> bool {
    depth > MAX_NESTING_DEPTH + 1
}

/// Which syntax to read a filter in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum FilterSyntax {
    /// Wireshark syntax, unless the text starts with a tcpdump-only keyword
    /// (`host`, `port`, `net`, `src`...) or only parses as tcpdump syntax.
    #[default]
    Auto,
    /// Wireshark display-filter syntax only.
    Wireshark,
    /// tcpdump (libpcap) filter syntax only.
    Bpf,
}

impl fmt::Display for FilterSyntax {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FilterSyntax::Auto => "auto",
            FilterSyntax::Wireshark => "wireshark",
            FilterSyntax::Bpf => "bpf",
        })
    }
}

/// tcpdump keywords that cannot start a Wireshark filter: text starting with one
/// of them is read as tcpdump syntax in [`FilterSyntax::Auto`].
pub(crate) const BPF_FIRST_KEYWORDS: &[&str] = &[
    "host",
    "net",
    "port",
    "portrange",
    "src",
    "dst",
    "ether",
    "ip6",
    "icmp6",
    "less",
    "greater",
    "proto",
    "broadcast",
    "gateway",
    "multicast",
];

/// Protocols whose `proto[...]` both syntaxes read: a filter starting with one
/// is tried as tcpdump first in [`FilterSyntax::Auto`].
const BPF_BYTE_PROTOCOLS: &[&str] = &["ip", "tcp", "udp", "icmp", "arp", "igmp", "sctp"];

/// A parsed, type-checked packet filter.
///
/// `Display` prints the canonical fully parenthesised Wireshark form, which
/// parses back to an identical filter; the empty filter prints as nothing.
/// Two filters are equal if their trees (and Community ID seeds) are, whatever
/// syntax they were read in.
#[derive(Clone, Debug)]
pub struct Filter {
    /// The tree; `None` matches every packet.
    root: Option<Expr>,
    /// The syntax the text was read in (`Auto` for the empty filter).
    syntax: FilterSyntax,
    /// The tree tests the packet's bytes (derived from it once: a live
    /// trigger asks for every packet).
    reads_bytes: bool,
    /// The seed `community_id` is hashed with (0 unless the archive sets one).
    community_seed: u16,
}

impl Filter {
    /// Returns the filter that matches every packet (what empty text parses to).
    pub fn match_all() -> Self {
        Self {
            root: None,
            syntax: FilterSyntax::Auto,
            reads_bytes: false,
            community_seed: 0,
        }
    }

    /// Parses `text`, detecting its syntax ([`FilterSyntax::Auto`]).
    pub fn parse(text: &str) -> Result<Self, ParseError> {
        Self::parse_with(text, FilterSyntax::Auto)
    }

    /// Parses `text` in `syntax`. Empty or blank text matches everything.
    pub fn parse_with(text: &str, syntax: FilterSyntax) -> Result<Self, ParseError> {
        if text.len() > MAX_FILTER_LEN_BYTES {
            let column = text
                .char_indices()
                .take_while(|(index, _)| *index < MAX_FILTER_LEN_BYTES)
                .count()
                + 1;
            return Err(ParseError::new(
                text,
                column,
                "",
                format!(
                    "filter is {} bytes long; the limit is {MAX_FILTER_LEN_BYTES}",
                    text.len()
                ),
            ));
        }
        let tokens = lexer::tokenize(text);
        if tokens.is_empty() {
            return Ok(Self::match_all());
        }
        let wireshark = |tokens: &[lexer::Token<'_>]| {
            parser::parse(text, tokens).map(|root| Self::of_tree(root, FilterSyntax::Wireshark))
        };
        let bpf = |tokens: &[lexer::Token<'_>]| {
            bpf::parse(text, tokens).map(|root| Self::of_tree(root, FilterSyntax::Bpf))
        };
        match syntax {
            FilterSyntax::Wireshark => wireshark(&tokens),
            FilterSyntax::Bpf => bpf(&tokens),
            FilterSyntax::Auto => {
                let starts_like_bpf = tokens.first().is_some_and(|token| {
                    token.kind == lexer::TokenKind::Word && BPF_FIRST_KEYWORDS.contains(&token.text)
                });
                // `tcp[13] == 18`: tcpdump's byte offset (decimal 18) before
                // Wireshark's slice (the byte 0x18), when both read it.
                let byte_offset = tokens.first().is_some_and(|token| {
                    token.kind == lexer::TokenKind::Word && BPF_BYTE_PROTOCOLS.contains(&token.text)
                }) && tokens
                    .get(1)
                    .is_some_and(|token| token.kind == lexer::TokenKind::LBracket);
                if byte_offset && let Ok(filter) = bpf(&tokens) {
                    return Ok(filter);
                }
                if starts_like_bpf {
                    return bpf(&tokens);
                }
                match wireshark(&tokens) {
                    Ok(filter) => Ok(filter),
                    Err(wireshark_error) => match bpf(&tokens) {
                        Ok(filter) => Ok(filter),
                        // Report the tcpdump reading only if it got further and
                        // passed a tcpdump-only keyword on the way (`tcp port http`).
                        Err(bpf_error)
                            if bpf_error.column > wireshark_error.column
                                && tokens.iter().any(|token| {
                                    token.column < bpf_error.column
                                        && token.kind == lexer::TokenKind::Word
                                        && BPF_FIRST_KEYWORDS.contains(&token.text)
                                }) =>
                        {
                            Err(bpf_error)
                        }
                        Err(_) => Err(wireshark_error),
                    },
                }
            }
        }
    }

    /// The filter of a tree built by hindsight itself (not parsed), printed in
    /// the Wireshark syntax.
    pub(crate) fn from_root(root: Option<Expr>) -> Self {
        Self::of_tree(root, FilterSyntax::Wireshark)
    }

    fn of_tree(root: Option<Expr>, syntax: FilterSyntax) -> Self {
        let reads_bytes = root.as_ref().is_some_and(eval::reads_bytes);
        Self {
            root,
            syntax,
            reads_bytes,
            community_seed: 0,
        }
    }

    /// Returns this filter with `community_id` hashed with `seed` (the
    /// archive's `[connections] community_id_seed`) rather than 0.
    pub fn with_community_seed(mut self, seed: u16) -> Self {
        self.community_seed = seed;
        self
    }

    /// Returns the seed `community_id` is hashed with.
    pub fn community_seed(&self) -> u16 {
        self.community_seed
    }

    /// Returns true if the filter tests `community_id` anywhere (so its seed
    /// matters).
    pub fn names_community_id(&self) -> bool {
        self.root
            .as_ref()
            .is_some_and(|root| root.names(crate::ast::Field::CommunityId))
    }

    /// Returns the tree, or `None` for the filter that matches everything.
    pub fn root(&self) -> Option<&Expr> {
        self.root.as_ref()
    }

    /// Returns true for the filter that matches everything.
    pub fn is_match_all(&self) -> bool {
        self.root.is_none()
    }

    /// Returns the syntax the filter was read in (`Auto` for the empty filter).
    pub fn syntax(&self) -> FilterSyntax {
        self.syntax
    }
}

impl PartialEq for Filter {
    fn eq(&self, other: &Self) -> bool {
        self.root == other.root && self.community_seed == other.community_seed
    }
}

impl Eq for Filter {}

impl Default for Filter {
    fn default() -> Self {
        Self::match_all()
    }
}

impl FromStr for Filter {
    type Err = ParseError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::parse(text)
    }
}

impl fmt::Display for Filter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.root {
            Some(root) => write!(f, "{root}"),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests;
