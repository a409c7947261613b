//! Splits filter text into tokens shared by both syntaxes.
//!
//! As in Wireshark's scanner, a run of "word" characters (letters, digits and
//! `_ . : - / \`) is one token whose meaning the parser decides from context:
//! `ip.addr`, `10.0.0.0/8`, `2001:db8::1`, `aa-bb-cc-dd-ee-ff`, `1024-2048` and
//! `80..90` are all words. The lexer never fails: a character it does not know
//! becomes an [`TokenKind::Unknown`] token that the parser reports.

/// What a token is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenKind {
    /// A field name, keyword or literal.
    Word,
    /// `(`
    LParen,
    /// `)`
    RParen,
    /// `{`
    LBrace,
    /// `}`
    RBrace,
    /// `[`
    LBracket,
    /// `,`
    Comma,
    /// `..` (range inside a set)
    DotDot,
    /// `==`
    EqEq,
    /// `===`
    EqEqEq,
    /// `!=`
    NotEq,
    /// `!==`
    NotEqEq,
    /// `~=` (deprecated Wireshark spelling of `!==`)
    TildeEq,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `!`
    Bang,
    /// `&&`
    AndAnd,
    /// `||`
    OrOr,
    /// `^^`
    XorXor,
    /// `&` (bitwise and)
    Amp,
    /// A double-quoted string (not supported by any field, lexed for a clear error).
    Str,
    /// Any other character.
    Unknown,
}

/// One token with its position in the filter text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Token<'a> {
    /// What the token is.
    pub kind: TokenKind,
    /// The token's text.
    pub text: &'a str,
    /// The 1-based character position of the token's first character.
    pub column: usize,
}

/// Returns true for the characters a word token is made of.
pub fn is_word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-' | '/' | '\\')
}

/// The byte offset in `text` of the character at 1-based `column` (a token's
/// position), where byte-level scanners (byte offsets, slices) start.
pub fn byte_of(text: &str, column: usize) -> usize {
    text.char_indices()
        .nth(column.saturating_sub(1))
        .map_or(text.len(), |(at, _)| at)
}

/// The 1-based column of the character at byte `at` of `text`.
pub fn column_of(text: &str, at: usize) -> usize {
    text.get(..at)
        .map_or(1, |before| before.chars().count() + 1)
}

/// Returns the tokens of `text`, skipping whitespace.
pub fn tokenize(text: &str) -> Vec<Token<'_>> {
    let mut tokens = Vec::new();
    let mut chars = text.char_indices().peekable();
    let mut column = 0usize;
    while let Some((start, c)) = chars.next() {
        column += 1;
        if c.is_whitespace() {
            continue;
        }
        let token_column = column;
        let next = chars.peek().map(|&(_, next)| next);
        let (kind, len_chars) = match (c, next) {
            ('.', Some('.')) => (TokenKind::DotDot, 2),
            (c, _) if is_word_char(c) => (TokenKind::Word, 0),
            ('(', _) => (TokenKind::LParen, 1),
            (')', _) => (TokenKind::RParen, 1),
            ('{', _) => (TokenKind::LBrace, 1),
            ('}', _) => (TokenKind::RBrace, 1),
            ('[', _) => (TokenKind::LBracket, 1),
            (',', _) => (TokenKind::Comma, 1),
            ('=', Some('=')) => {
                if text.get(start + 2..start + 3) == Some("=") {
                    (TokenKind::EqEqEq, 3)
                } else {
                    (TokenKind::EqEq, 2)
                }
            }
            ('!', Some('=')) => {
                if text.get(start + 2..start + 3) == Some("=") {
                    (TokenKind::NotEqEq, 3)
                } else {
                    (TokenKind::NotEq, 2)
                }
            }
            ('!', _) => (TokenKind::Bang, 1),
            ('~', Some('=')) => (TokenKind::TildeEq, 2),
            ('<', Some('=')) => (TokenKind::Le, 2),
            ('<', _) => (TokenKind::Lt, 1),
            ('>', Some('=')) => (TokenKind::Ge, 2),
            ('>', _) => (TokenKind::Gt, 1),
            ('&', Some('&')) => (TokenKind::AndAnd, 2),
            ('&', _) => (TokenKind::Amp, 1),
            ('|', Some('|')) => (TokenKind::OrOr, 2),
            ('^', Some('^')) => (TokenKind::XorXor, 2),
            ('"', _) => (TokenKind::Str, 0),
            _ => (TokenKind::Unknown, 1),
        };
        let mut end = start + c.len_utf8();
        match kind {
            TokenKind::Word => {
                while let Some(&(index, next)) = chars.peek() {
                    if !is_word_char(next) {
                        break;
                    }
                    // `80..90` stays one word; the parser splits it at `..`.
                    chars.next();
                    column += 1;
                    end = index + next.len_utf8();
                }
            }
            TokenKind::Str => {
                let mut escaped = false;
                for (index, next) in chars.by_ref() {
                    column += 1;
                    end = index + next.len_utf8();
                    if escaped {
                        escaped = false;
                    } else if next == '\\' {
                        escaped = true;
                    } else if next == '"' {
                        break;
                    }
                }
            }
            _ => {
                for _ in 1..len_chars {
                    if let Some((index, next)) = chars.next() {
                        column += 1;
                        end = index + next.len_utf8();
                    }
                }
            }
        }
        tokens.push(Token {
            kind,
            text: text.get(start..end).unwrap_or_default(),
            column: token_column,
        });
    }
    tokens
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds_and_texts(text: &str) -> Vec<(TokenKind, &str, usize)> {
        tokenize(text)
            .into_iter()
            .map(|token| (token.kind, token.text, token.column))
            .collect()
    }

    #[test]
    fn words_keep_addresses_networks_and_ranges_whole() {
        use TokenKind::*;
        assert_eq!(
            kinds_and_texts("ip.addr==10.0.0.0/8 && ipv6.src != 2001:db8::1"),
            vec![
                (Word, "ip.addr", 1),
                (EqEq, "==", 8),
                (Word, "10.0.0.0/8", 10),
                (AndAnd, "&&", 21),
                (Word, "ipv6.src", 24),
                (NotEq, "!=", 33),
                (Word, "2001:db8::1", 36),
            ]
        );
        assert_eq!(
            kinds_and_texts("tcp.port in {80,8000..8004 9000 .. 9001}"),
            vec![
                (Word, "tcp.port", 1),
                (Word, "in", 10),
                (LBrace, "{", 13),
                (Word, "80", 14),
                (Comma, ",", 16),
                (Word, "8000..8004", 17),
                (Word, "9000", 28),
                (DotDot, "..", 33),
                (Word, "9001", 36),
                (RBrace, "}", 40),
            ]
        );
    }

    #[test]
    fn operators_take_the_longest_match() {
        use TokenKind::*;
        let kinds: Vec<TokenKind> = tokenize("=== == !== != ! ~= <= < >= > && & || ^^")
            .iter()
            .map(|token| token.kind)
            .collect();
        assert_eq!(
            kinds,
            vec![
                EqEqEq, EqEq, NotEqEq, NotEq, Bang, TildeEq, Le, Lt, Ge, Gt, AndAnd, Amp, OrOr,
                XorXor
            ]
        );
    }

    #[test]
    fn columns_count_characters_not_bytes() {
        let tokens = tokenize("é tcp \"ab\\\"c\" ¤");
        let summary: Vec<(TokenKind, &str, usize)> = tokens
            .iter()
            .map(|token| (token.kind, token.text, token.column))
            .collect();
        assert_eq!(
            summary,
            vec![
                (TokenKind::Unknown, "é", 1),
                (TokenKind::Word, "tcp", 3),
                (TokenKind::Str, "\"ab\\\"c\"", 7),
                (TokenKind::Unknown, "¤", 15),
            ]
        );
    }

    #[test]
    fn unterminated_string_runs_to_the_end() {
        let tokens = tokenize("x == \"abc");
        assert_eq!(tokens.last().map(|token| token.text), Some("\"abc"));
    }
}
