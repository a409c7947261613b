//! The bound on how deep a statement can nest, checked on its tokens before it
//! is parsed.
//!
//! The parser nests parentheses, subqueries and prefix operators only as deep
//! as its recursion limit, but it builds a chain of binary operators
//! (`1+1+...+1`, `a OR b OR ...`), set operations (`UNION ALL`) or joins
//! iteratively, as a tree one level deeper per link. Everything after the
//! parser walks such a tree recursively: the planner, the optimizer, the
//! evaluation of each row, printing an error and dropping it. A chain of a
//! thousand links is a real statement (an indicator list written out as
//! `OR`s); one of a hundred thousand exhausts any thread's stack, which aborts
//! the whole process. So the links are counted on the tokens, which the
//! tokenizer reads in a loop, and a statement with more than [`MAX_LINKS`] is
//! refused before any tree exists. Every link token counts wherever it
//! stands, so the count bounds the depth of any chain the statement can make.

use datafusion::execution::context::SessionState;
use datafusion::sql::sqlparser::dialect::{Dialect, dialect_from_str};
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};

use crate::SqlError;

/// Most operators, joins and set operations one statement may hold. The
/// threads that plan and run statements have [`STACK_BYTES`] of stack, which
/// holds chains several times this deep in a debug build
/// (`a_long_chain_runs_and_a_longer_one_is_refused`). Planning takes time
/// quadratic in a chain's length and cannot be cancelled (see `abandoned`):
/// a `UNION ALL` of 2,000 arms plans for about 10 s in a release build, one
/// of 4,000 for 40 s; an indicator list of 1,000 `x = a OR ...` terms (2,000
/// links) is still taken.
pub const MAX_LINKS: usize = 2048;

/// The stack of every thread that parses, plans or runs a statement.
pub const STACK_BYTES: usize = 64 << 20;

/// Refuses `sql` if it holds more than [`MAX_LINKS`] links, in the dialect
/// `state` parses.
pub(crate) fn check_in(state: &SessionState, sql: &str) -> Result<(), SqlError> {
    let name = &state.config().options().sql_parser.dialect;
    let dialect = dialect_from_str(name).ok_or_else(|| {
        datafusion::error::DataFusionError::Plan(format!("unknown SQL dialect {name}"))
    })?;
    check(dialect.as_ref(), sql)
}

/// Refuses `sql` if it holds more than [`MAX_LINKS`] links.
fn check(dialect: &dyn Dialect, sql: &str) -> Result<(), SqlError> {
    use datafusion::sql::sqlparser::parser::ParserError;
    let tokens = Tokenizer::new(dialect, sql)
        .tokenize()
        .map_err(|e| datafusion::error::DataFusionError::from(ParserError::from(e)))?;
    let links = tokens.iter().filter(|token| is_link(token)).count();
    if links > MAX_LINKS {
        return Err(SqlError::TooDeep {
            links,
            max: MAX_LINKS,
        });
    }
    Ok(())
}

/// Whether `token` can join two expressions, queries or tables into one a
/// level deeper: an operator or a keyword that does.
fn is_link(token: &Token) -> bool {
    match token {
        Token::Word(word) => matches!(
            word.keyword,
            Keyword::AND
                | Keyword::OR
                | Keyword::XOR
                | Keyword::NOT
                | Keyword::UNION
                | Keyword::INTERSECT
                | Keyword::EXCEPT
                | Keyword::MINUS
                | Keyword::JOIN
                | Keyword::IS
                | Keyword::IN
                | Keyword::LIKE
                | Keyword::ILIKE
                | Keyword::SIMILAR
                | Keyword::BETWEEN
                | Keyword::AT
                | Keyword::COLLATE
                | Keyword::DIV
                | Keyword::OPERATOR
                | Keyword::OVERLAPS
                | Keyword::REGEXP
                | Keyword::RLIKE
                | Keyword::MATCH
        ),
        Token::EOF
        | Token::Number(..)
        | Token::Char(_)
        | Token::SingleQuotedString(_)
        | Token::DoubleQuotedString(_)
        | Token::TripleSingleQuotedString(_)
        | Token::TripleDoubleQuotedString(_)
        | Token::DollarQuotedString(_)
        | Token::SingleQuotedByteStringLiteral(_)
        | Token::DoubleQuotedByteStringLiteral(_)
        | Token::TripleSingleQuotedByteStringLiteral(_)
        | Token::TripleDoubleQuotedByteStringLiteral(_)
        | Token::SingleQuotedRawStringLiteral(_)
        | Token::DoubleQuotedRawStringLiteral(_)
        | Token::TripleSingleQuotedRawStringLiteral(_)
        | Token::TripleDoubleQuotedRawStringLiteral(_)
        | Token::NationalStringLiteral(_)
        | Token::QuoteDelimitedStringLiteral(_)
        | Token::NationalQuoteDelimitedStringLiteral(_)
        | Token::EscapedStringLiteral(_)
        | Token::UnicodeStringLiteral(_)
        | Token::HexStringLiteral(_)
        | Token::Comma
        | Token::Whitespace(_)
        | Token::LParen
        | Token::RParen
        | Token::SemiColon => false,
        // Every other token is an operator or punctuation that may chain
        // (`::`, `[`, `.`, `->`): counted.
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use datafusion::sql::sqlparser::dialect::GenericDialect;

    use super::*;

    fn links(sql: &str) -> Result<(), SqlError> {
        check(&GenericDialect {}, sql)
    }

    #[test]
    fn chains_are_counted_whatever_makes_them() {
        let chain = |link: &str, n: usize| {
            let mut sql = String::from("SELECT 1");
            for _ in 1..n {
                sql.push_str(link);
                sql.push('1');
            }
            sql
        };
        for link in ["+", " OR ", " AND ", "||", " UNION ALL SELECT ", "::INT+"] {
            assert!(links(&chain(link, 1000)).is_ok(), "{link} x 1000");
            let refused = links(&chain(link, 100_000)).unwrap_err();
            assert!(
                matches!(refused, SqlError::TooDeep { links, max: MAX_LINKS } if links >= 99_999),
                "{link}: {refused}"
            );
        }
    }

    #[test]
    fn long_lists_are_not_chains() {
        let list = (0..50_000).map(|i| format!("'10.0.{}.{}'", i / 256, i % 256));
        let sql = format!(
            "SELECT count(*) FROM packets WHERE ip_str(src_addr) IN ({})",
            list.collect::<Vec<_>>().join(", ")
        );
        assert!(links(&sql).is_ok());
    }
}
