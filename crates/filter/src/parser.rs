//! Parses the Wireshark display-filter syntax into the typed tree. The grammar
//! follows the precedence levels of Wireshark's (`epan/dfilter/grammar.lemon`,
//! plus `xor`):
//!
//! ```text
//! filter     := or_expr
//! or_expr    := xor_expr  (("||" | "or")  xor_expr)*
//! xor_expr   := and_expr  (("^^" | "xor") and_expr)*
//! and_expr   := not_expr  (("&&" | "and") not_expr)*
//! not_expr   := ("!" | "not") not_expr | primary
//! primary    := "(" or_expr ")" | ["any" | "all"] relation
//! relation   := field_ref [cmp_op VALUE | ["not"] "in" set]
//! field_ref  := FIELD [("&" | "bitwise_and") INTEGER]
//! set        := "{" element ([","] element)* "}"
//! element    := VALUE [".." VALUE]
//! ```
//!
//! `not` binds tightest, then `and`, `xor`, `or`; comparisons bind tighter than
//! all of them, so `!ip.addr == 10.0.0.1` is `!(ip.addr == 10.0.0.1)`.
//!
//! The logical levels are parsed by an operator-precedence loop over explicit
//! stacks, so that hostile nesting costs heap rather than call stack; relations
//! and sets by plain recursive descent.

use super::ast::{
    CmpOp, Comparison, Expr, FIELD_ALIASES, FIELDS, Field, FieldRef, FieldType, Literal,
    Membership, Quantifier, SetElement,
};
use super::lexer::{Token, TokenKind, byte_of};
use super::value::{IpLiteral, ipv4_network, ipv6_network, parse_ip, parse_mac, parse_uint};
use super::{BPF_FIRST_KEYWORDS, MAX_NESTING_DEPTH, MAX_SET_ELEMENTS, too_deep};
use crate::error::ParseError;
use hindsight_model::tunnel;

use super::names::{TextField, TextOp, TextTest};
use super::payload::{BytesField, BytesOp, BytesTest, Pattern, Slice, parse_bytes};

/// Parses `tokens` (of `text`) as a Wireshark display filter; `None` for no tokens.
pub fn parse(text: &str, tokens: &[Token<'_>]) -> Result<Option<Expr>, ParseError> {
    if tokens.is_empty() {
        return Ok(None);
    }
    let mut parser = Parser {
        text,
        tokens,
        position: 0,
    };
    parser.logical().map(Some)
}

struct Parser<'t, 'a> {
    text: &'a str,
    tokens: &'t [Token<'a>],
    position: usize,
}

/// A logical operator waiting on the operator stack.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Operator {
    Not,
    And,
    Xor,
    Or,
    Open,
}

impl Operator {
    /// Binding strength of the binary operators, tightest highest.
    fn precedence(self) -> u8 {
        match self {
            Operator::Not => 4,
            Operator::And => 3,
            Operator::Xor => 2,
            Operator::Or => 1,
            Operator::Open => 0,
        }
    }
}

/// An operand on the value stack; `chain` names the operator of an `a && b && c`
/// chain still open for more operands at the same level (closed by parentheses),
/// `depth` is the depth of `expr` (a relation is 1).
struct Operand {
    expr: Expr,
    chain: Option<Operator>,
    depth: usize,
}

impl<'t, 'a> Parser<'t, 'a> {
    fn peek(&self) -> Option<Token<'a>> {
        self.tokens.get(self.position).copied()
    }

    fn peek_second(&self) -> Option<Token<'a>> {
        self.tokens.get(self.position + 1).copied()
    }

    fn advance(&mut self) -> Option<Token<'a>> {
        let token = self.peek();
        if token.is_some() {
            self.position += 1;
        }
        token
    }

    fn end_column(&self) -> usize {
        self.text.chars().count() + 1
    }

    fn error_at(&self, token: Token<'_>, message: impl Into<String>) -> ParseError {
        ParseError::new(self.text, token.column, token.text, message)
    }

    fn error_at_end(&self, message: impl Into<String>) -> ParseError {
        ParseError::new(self.text, self.end_column(), "", message)
    }

    /// Returns an error for `token`, or for the end of the filter if it is `None`.
    fn unexpected(&self, token: Option<Token<'_>>, expected: &str) -> ParseError {
        match token {
            Some(token) => self.error_at(
                token,
                format!(
                    "\"{}\" was unexpected here; expected {expected}",
                    token.text
                ),
            ),
            None => self.error_at_end(format!("unexpected end of filter; expected {expected}")),
        }
    }

    fn binary_operator(token: Token<'_>) -> Option<Operator> {
        match (token.kind, token.text) {
            (TokenKind::AndAnd, _) | (TokenKind::Word, "and") => Some(Operator::And),
            (TokenKind::XorXor, _) | (TokenKind::Word, "xor") => Some(Operator::Xor),
            (TokenKind::OrOr, _) | (TokenKind::Word, "or") => Some(Operator::Or),
            _ => None,
        }
    }

    /// Parses the logical structure (`!`, `&&`, `^^`, `||`, parentheses) with an
    /// explicit operator stack, so that deep nesting costs heap, not call stack;
    /// relations are parsed by [`Self::relation`].
    fn logical(&mut self) -> Result<Expr, ParseError> {
        let mut operators: Vec<(Operator, Token<'a>)> = Vec::new();
        let mut operands: Vec<Operand> = Vec::new();
        let mut nesting = 0usize;
        loop {
            // An operand: any number of `!` and `(`, then a relation. `!(` is
            // one level, so that printing `!(a == 1)` for `!a == 1` adds none.
            let mut after_not = false;
            loop {
                match self.peek() {
                    Some(token) if token.kind == TokenKind::Bang || is_word(token, "not") => {
                        self.advance();
                        nesting += 1;
                        self.check_nesting(nesting, token)?;
                        operators.push((Operator::Not, token));
                        after_not = true;
                    }
                    Some(token) if token.kind == TokenKind::LParen => {
                        self.advance();
                        if !after_not {
                            nesting += 1;
                            self.check_nesting(nesting, token)?;
                        }
                        operators.push((Operator::Open, token));
                        after_not = false;
                    }
                    _ => break,
                }
            }
            let expr = self.primary()?;
            operands.push(Operand {
                expr,
                chain: None,
                depth: 1,
            });
            // Closing parentheses, then a binary operator or the end.
            loop {
                match self.peek() {
                    Some(close) if close.kind == TokenKind::RParen => {
                        self.advance();
                        loop {
                            match operators.pop() {
                                Some((Operator::Open, _)) => break,
                                Some((operator, token)) => {
                                    self.reduce(&mut operands, operator, token)?
                                }
                                None => return Err(self.error_at(close, "unmatched \")\"")),
                            }
                        }
                        if let Some(top) = operands.last_mut() {
                            top.chain = None;
                        }
                    }
                    _ => break,
                }
            }
            let Some(token) = self.peek() else {
                break;
            };
            let Some(operator) = Self::binary_operator(token) else {
                let expected = if operators
                    .iter()
                    .any(|(operator, _)| *operator == Operator::Open)
                {
                    "\")\", \"&&\", \"||\" or \"^^\""
                } else {
                    "\"&&\", \"||\", \"^^\" or the end of the filter"
                };
                return Err(self.unexpected(Some(token), expected));
            };
            self.advance();
            while let Some(&(top, _)) = operators.last() {
                if top == Operator::Open || top.precedence() < operator.precedence() {
                    break;
                }
                if let Some((top, top_token)) = operators.pop() {
                    self.reduce(&mut operands, top, top_token)?;
                }
            }
            nesting = count_nesting(&operators);
            operators.push((operator, token));
        }
        while let Some((operator, token)) = operators.pop() {
            if operator == Operator::Open {
                return Err(self.error_at(token, "unclosed \"(\""));
            }
            self.reduce(&mut operands, operator, token)?;
        }
        match (operands.pop(), operands.is_empty()) {
            (Some(operand), true) => Ok(operand.expr),
            _ => Err(self.error_at_end("internal error: unbalanced filter expression")),
        }
    }

    /// Applies `operator` (written at `token`) to the operands on top of the
    /// stack. A binary operator whose left operand is an open chain of the same
    /// operator extends the chain, so `a && b && c` is one node with three operands.
    fn reduce(
        &self,
        operands: &mut Vec<Operand>,
        operator: Operator,
        token: Token<'_>,
    ) -> Result<(), ParseError> {
        let reduced = match operator {
            Operator::Not => operands.pop().map(|operand| Operand {
                expr: Expr::Not(Box::new(operand.expr)),
                chain: None,
                depth: operand.depth + 1,
            }),
            Operator::And | Operator::Xor | Operator::Or => {
                match (operands.pop(), operands.pop()) {
                    (Some(right), Some(mut left)) => {
                        Some(match (left.chain == Some(operator), &mut left.expr) {
                            (true, Expr::And(items) | Expr::Xor(items) | Expr::Or(items)) => {
                                items.push(right.expr);
                                Operand {
                                    expr: left.expr,
                                    chain: Some(operator),
                                    depth: left.depth.max(right.depth + 1),
                                }
                            }
                            _ => {
                                let items = vec![left.expr, right.expr];
                                Operand {
                                    expr: match operator {
                                        Operator::And => Expr::And(items),
                                        Operator::Xor => Expr::Xor(items),
                                        _ => Expr::Or(items),
                                    },
                                    chain: Some(operator),
                                    depth: left.depth.max(right.depth) + 1,
                                }
                            }
                        })
                    }
                    _ => None,
                }
            }
            Operator::Open => return Ok(()),
        };
        let Some(reduced) = reduced else {
            return Err(self.error_at(token, "internal error: operator without operand"));
        };
        if too_deep(reduced.depth) {
            return Err(self.error_at(
                token,
                format!("filter nests deeper than {MAX_NESTING_DEPTH} levels"),
            ));
        }
        operands.push(reduced);
        Ok(())
    }

    fn check_nesting(&self, nesting: usize, token: Token<'_>) -> Result<(), ParseError> {
        if nesting > MAX_NESTING_DEPTH {
            return Err(self.error_at(
                token,
                format!("filter nests deeper than {MAX_NESTING_DEPTH} levels"),
            ));
        }
        Ok(())
    }

    fn primary(&mut self) -> Result<Expr, ParseError> {
        let token = self.peek();
        match token {
            Some(word) if is_word(word, "any") || is_word(word, "all") => {
                let quantifier = if word.text == "any" {
                    Quantifier::Any
                } else {
                    Quantifier::All
                };
                self.advance();
                self.relation(Some((quantifier, word)))
            }
            Some(word) if word.kind == TokenKind::Word => self.relation(None),
            Some(string) if string.kind == TokenKind::Str => {
                Err(self.error_at(string, "a filter starts with a field, not a string"))
            }
            other => Err(self.unexpected(other, "a field, \"!\" or \"(\"")),
        }
    }

    fn resolve_field(&self, token: Token<'_>) -> Result<Field, ParseError> {
        if let Some(field) = Field::from_name(token.text) {
            return Ok(field);
        }
        let message = if KEYWORDS.contains(&token.text) {
            format!(
                "\"{}\" was unexpected here; expected a field, \"!\" or \"(\"",
                token.text
            )
        } else if KEYWORDS.contains(&token.text.to_ascii_lowercase().as_str()) {
            format!(
                "\"{}\" was unexpected here; keywords are lowercase: \"{}\"",
                token.text,
                token.text.to_ascii_lowercase()
            )
        } else if BPF_FIRST_KEYWORDS.contains(&token.text) {
            format!(
                "unknown field \"{}\"; \"{}\" is tcpdump syntax, which cannot be mixed with Wireshark syntax in one filter",
                token.text, token.text
            )
        } else if looks_like_value(token.text) {
            format!(
                "expected a field before the value \"{}\" (e.g. ip.addr == {})",
                token.text, token.text
            )
        } else {
            match nearest_field_name(token.text) {
                Some(suggestion) => format!(
                    "unknown field \"{}\"; did you mean \"{suggestion}\"?",
                    token.text
                ),
                None => format!("unknown field \"{}\"", token.text),
            }
        };
        Err(self.error_at(token, message))
    }

    fn relation(
        &mut self,
        quantifier: Option<(Quantifier, Token<'a>)>,
    ) -> Result<Expr, ParseError> {
        let field_token = match self.advance() {
            Some(token) if token.kind == TokenKind::Word => token,
            other => return Err(self.unexpected(other, "a field")),
        };
        if field_token.text == "pcap_filter"
            && self
                .peek()
                .is_some_and(|token| token.kind == TokenKind::LParen)
        {
            return self.pcap_filter(field_token);
        }
        if let Some(bytes_field) = BytesField::from_name(field_token.text) {
            let next = self.peek();
            let payload = matches!(bytes_field, BytesField::TcpPayload | BytesField::UdpPayload);
            let slice = next.is_some_and(|token| token.kind == TokenKind::LBracket);
            let search =
                next.is_some_and(|token| is_word(token, "contains") || is_word(token, "matches"));
            if payload || slice || search {
                return self.bytes_test(bytes_field, field_token);
            }
        }
        if let Some(text_field) = TextField::from_name(field_token.text) {
            if let Some((_, quantifier_token)) = quantifier {
                return Err(self.error_at(
                    quantifier_token,
                    format!(
                        "\"{}\" does not apply to {}, which a connection has once",
                        quantifier_token.text, field_token.text
                    ),
                ));
            }
            return self.text_test(text_field);
        }
        let field = self.resolve_field(field_token)?;
        if self
            .peek()
            .is_some_and(|token| token.kind == TokenKind::LBracket)
        {
            return Err(self.error_at(
                field_token,
                format!(
                    "slices apply to frame, eth, ip, ipv6, tcp, udp, tcp.payload, udp.payload and \
                     eth.src/dst/addr, not to {}",
                    field_token.text
                ),
            ));
        }
        let mut mask = None;
        if let Some(amp) = self
            .peek()
            .filter(|token| token.kind == TokenKind::Amp || is_word(*token, "bitwise_and"))
        {
            self.advance();
            if !matches!(field.field_type(), FieldType::UInt { .. }) {
                return Err(self.error_at(
                    amp,
                    format!("\"&\" needs an integer field; {field} is not one"),
                ));
            }
            let mask_token = match self.advance() {
                Some(token) if token.kind == TokenKind::Word => token,
                other => return Err(self.unexpected(other, "an integer mask")),
            };
            let value = parse_uint(mask_token.text)
                .map_err(|message| self.error_at(mask_token, message))?;
            mask = Some(value);
        }
        let left = FieldRef { field, mask };

        let next = self.peek();
        if field == Field::CommunityId
            && let Some(op_token) = next
            && let Some((op, _)) = comparison_operator(op_token)
        {
            self.advance();
            if !matches!(op, CmpOp::Eq | CmpOp::Ne) {
                return Err(
                    self.error_at(op_token, "a Community ID is compared with == or != only")
                );
            }
            let value_token = match self.advance() {
                Some(token) if matches!(token.kind, TokenKind::Word | TokenKind::Str) => token,
                other => return Err(self.unexpected(other, "a Community ID such as \"1:...\"")),
            };
            let text = value_token.text.trim_matches('"');
            let hash = hindsight_model::community::parse_community_id(text).ok_or_else(|| {
                self.error_at(
                    value_token,
                    format!("\"{text}\" is not a Community ID (\"1:\" and 28 base64 characters)"),
                )
            })?;
            let quantifier = quantifier.map_or(Quantifier::Any, |(quantifier, _)| quantifier);
            return Ok(Expr::Compare(Comparison::new(
                left,
                quantifier,
                op,
                Literal::CommunityId(hash),
            )));
        }
        if field == Field::TunnelType
            && mask.is_none()
            && let Some(op_token) = next
            && let Some((op @ (CmpOp::Eq | CmpOp::Ne), _)) = comparison_operator(op_token)
        {
            // `tunnel.type == "gre"`: a test of the encapsulation's bit.
            self.advance();
            let name_token = match self.advance() {
                Some(token) if matches!(token.kind, TokenKind::Word | TokenKind::Str) => token,
                other => return Err(self.unexpected(other, "a tunnel type such as \"gre\"")),
            };
            let name = name_token.text.trim_matches('"');
            let Some((_, bit)) = tunnel::NAMES.iter().find(|(known, _)| *known == name) else {
                let known: Vec<&str> = tunnel::NAMES.iter().map(|(known, _)| *known).collect();
                return Err(self.error_at(
                    name_token,
                    format!(
                        "unknown tunnel type \"{name}\"; the types are {}",
                        known.join(", ")
                    ),
                ));
            };
            let test = Expr::BitTest(FieldRef {
                field,
                mask: Some(u64::from(*bit)),
            });
            return Ok(match op {
                CmpOp::Ne => Expr::Not(Box::new(test)),
                _ => test,
            });
        }
        if let Some(op_token) = next
            && let Some((op, default_quantifier)) = comparison_operator(op_token)
        {
            self.advance();
            self.check_comparable(field_token, field)?;
            let quantifier = quantifier.map_or(default_quantifier, |(quantifier, _)| quantifier);
            let value_token = self.value_token()?;
            let value = self.literal(field, value_token)?;
            if value.is_network() && !matches!(op, CmpOp::Eq | CmpOp::Ne) {
                return Err(self.error_at(
                    value_token,
                    format!(
                        "a network can only be compared with == or !=, not \"{}\"",
                        op_token.text
                    ),
                ));
            }
            if let Some(chained) = self
                .peek()
                .filter(|token| comparison_operator(*token).is_some())
            {
                return Err(self.error_at(
                    chained,
                    "chained comparisons are not supported; join two comparisons with &&",
                ));
            }
            return Ok(Expr::Compare(Comparison::new(left, quantifier, op, value)));
        }
        let negated = next.is_some_and(|token| is_word(token, "not"))
            && self.peek_second().is_some_and(|token| is_word(token, "in"));
        if negated || next.is_some_and(|token| is_word(token, "in")) {
            if negated {
                self.advance();
            }
            self.advance();
            self.check_comparable(field_token, field)?;
            let quantifier = quantifier.map_or(Quantifier::Any, |(quantifier, _)| quantifier);
            let elements = self.set(field)?;
            let membership = Expr::In(Membership::new(left, quantifier, elements));
            return Ok(if negated {
                Expr::Not(Box::new(membership))
            } else {
                membership
            });
        }
        if let Some(token) =
            next.filter(|token| is_word(*token, "contains") || is_word(*token, "matches"))
        {
            return Err(self.error_at(
                token,
                format!(
                    "\"{}\" searches bytes: frame, eth, ip, ipv6, tcp, udp, tcp.payload, \
                     udp.payload and eth.src/dst/addr hold them, not {field}",
                    token.text
                ),
            ));
        }
        if let Some((_, quantifier_token)) = quantifier {
            return Err(self.error_at(
                quantifier_token,
                format!(
                    "\"{}\" needs a comparison such as {} == VALUE",
                    quantifier_token.text, field
                ),
            ));
        }
        Ok(match mask {
            Some(_) => Expr::BitTest(left),
            None => Expr::Exists(field),
        })
    }

    /// A test of a byte field, its name already read: an optional slice, then
    /// `==`/`!=` bytes, `contains` bytes, `matches` "regex", or nothing
    /// (`tcp.payload` alone: the segment has a payload).
    fn bytes_test(&mut self, field: BytesField, name: Token<'_>) -> Result<Expr, ParseError> {
        let mut slice = None;
        if let Some(open) = self
            .peek()
            .filter(|token| token.kind == TokenKind::LBracket)
        {
            let start = byte_of(self.text, open.column) + 1;
            let Some(close) = self.text.get(start..).and_then(|rest| rest.find(']')) else {
                return Err(self.error_at(open, "unclosed \"[\""));
            };
            let inside = &self.text[start..start + close];
            slice = Some(Slice::parse(inside).map_err(|message| self.error_at(open, message))?);
            while self
                .peek()
                .is_some_and(|token| byte_of(self.text, token.column) <= start + close)
            {
                self.position += 1;
            }
        }
        let op_token = self.peek();
        let value_token = |parser: &mut Self, what: &str| match parser.advance() {
            Some(token) if matches!(token.kind, TokenKind::Word | TokenKind::Str) => Ok(token),
            other => Err(parser.unexpected(other, what)),
        };
        let bytes_of = |parser: &Self, token: Token<'_>| {
            let quoted = token.kind == TokenKind::Str;
            let text = if quoted {
                strip_quotes(token.text)
            } else {
                token.text
            };
            parse_bytes(text, quoted).map_err(|message| parser.error_at(token, message))
        };
        let op = match op_token {
            Some(token) if is_word(token, "contains") => {
                self.advance();
                let value = value_token(self, "bytes to search for (a quoted string or 16:03:01)")?;
                BytesOp::Contains(bytes_of(self, value)?)
            }
            Some(token) if is_word(token, "matches") => {
                self.advance();
                BytesOp::Matches(self.pattern()?)
            }
            Some(token) if comparison_operator(token).is_some() => {
                let (op, _) = comparison_operator(token).unwrap_or((CmpOp::Eq, Quantifier::Any));
                self.advance();
                let value = value_token(self, "bytes (a quoted string or hex such as 16:03:01)")?;
                let bytes = bytes_of(self, value)?;
                match op {
                    CmpOp::Eq => BytesOp::Eq(bytes),
                    CmpOp::Ne => BytesOp::Ne(bytes),
                    _ => {
                        return Err(self.error_at(
                            token,
                            "bytes are compared with ==, != , contains or matches only",
                        ));
                    }
                }
            }
            _ if matches!(field, BytesField::TcpPayload | BytesField::UdpPayload)
                && slice.is_none() =>
            {
                BytesOp::Exists
            }
            _ if slice.is_some() => BytesOp::Exists,
            other => {
                return Err(self.unexpected(
                    other,
                    &format!("==, !=, contains or matches after {}", name.text),
                ));
            }
        };
        Ok(Expr::Bytes(Box::new(BytesTest { field, slice, op })))
    }

    /// The quoted regular expression after `matches`, compiled.
    fn pattern(&mut self) -> Result<Pattern, ParseError> {
        let value = match self.advance() {
            Some(token) if token.kind == TokenKind::Str => token,
            other => return Err(self.unexpected(other, "a quoted regular expression")),
        };
        let source = parse_bytes(strip_quotes(value.text), true)
            .map_err(|message| self.error_at(value, message))?;
        let source = String::from_utf8(source)
            .map_err(|_| self.error_at(value, "a regular expression is text (UTF-8)"))?;
        Pattern::new(&source).map_err(|message| self.error_at(value, message))
    }

    /// A test of a connection's text field, its name already read: `==` or
    /// `!=` a string, `contains` a string, `matches` "regex", or nothing
    /// (the field is there).
    fn text_test(&mut self, field: TextField) -> Result<Expr, ParseError> {
        if field.is_number() {
            return self.number_test(field);
        }
        let text_of = |parser: &mut Self| -> Result<String, ParseError> {
            let token = match parser.advance() {
                Some(token) if matches!(token.kind, TokenKind::Word | TokenKind::Str) => token,
                other => return Err(parser.unexpected(other, "a quoted string")),
            };
            let quoted = token.kind == TokenKind::Str;
            let bytes = match quoted {
                true => parse_bytes(strip_quotes(token.text), true)
                    .map_err(|message| parser.error_at(token, message))?,
                false => token.text.as_bytes().to_vec(),
            };
            String::from_utf8(bytes).map_err(|_| {
                parser.error_at(token, format!("{field} is compared with text (UTF-8)"))
            })
        };
        let op = match self.peek() {
            Some(token) if is_word(token, "contains") => {
                self.advance();
                TextOp::Contains(text_of(self)?)
            }
            Some(token) if is_word(token, "matches") => {
                self.advance();
                TextOp::Matches(self.pattern()?)
            }
            Some(token) if comparison_operator(token).is_some() => {
                self.advance();
                match comparison_operator(token) {
                    Some((CmpOp::Eq, _)) => TextOp::Eq(text_of(self)?),
                    Some((CmpOp::Ne, _)) => TextOp::Ne(text_of(self)?),
                    _ => {
                        return Err(self.error_at(
                            token,
                            format!("{field} is compared with ==, !=, contains or matches only"),
                        ));
                    }
                }
            }
            Some(token) if is_word(token, "in") => {
                return Err(self.error_at(
                    token,
                    format!("sets of text are not supported; join {field} == ... with ||"),
                ));
            }
            _ => TextOp::Exists,
        };
        Ok(Expr::Text(Box::new(TextTest { field, op })))
    }

    /// A test of a connection's number field, its name already read: a
    /// comparison with a number, or nothing (the field is there).
    fn number_test(&mut self, field: TextField) -> Result<Expr, ParseError> {
        let op = match self.peek() {
            Some(token) => match comparison_operator(token) {
                Some((op, _)) => {
                    self.advance();
                    let number = match self.advance() {
                        Some(value) if value.kind == TokenKind::Word => parse_uint(value.text)
                            .map_err(|message| self.error_at(value, message))?,
                        other => return Err(self.unexpected(other, "a number")),
                    };
                    TextOp::Compare(op, number)
                }
                None if ["contains", "matches", "in"]
                    .iter()
                    .any(|w| is_word(token, w)) =>
                {
                    return Err(self.error_at(
                        token,
                        format!("{field} is a number: compare it with ==, !=, <, <=, > or >="),
                    ));
                }
                None => TextOp::Exists,
            },
            None => TextOp::Exists,
        };
        Ok(Expr::Text(Box::new(TextTest { field, op })))
    }

    /// `pcap_filter("TCPDUMP FILTER")`: a tcpdump filter inside a Wireshark one,
    /// how byte offsets print.
    fn pcap_filter(&mut self, name: Token<'_>) -> Result<Expr, ParseError> {
        self.advance();
        let string = match self.advance() {
            Some(token) if token.kind == TokenKind::Str => token,
            other => return Err(self.unexpected(other, "a quoted tcpdump filter")),
        };
        match self.advance() {
            Some(token) if token.kind == TokenKind::RParen => {}
            other => return Err(self.unexpected(other, "\")\" after the tcpdump filter")),
        }
        let inner = unquote(string.text);
        let tokens = super::lexer::tokenize(&inner);
        match super::bpf::parse(&inner, &tokens) {
            Ok(Some(expr)) => Ok(expr),
            Ok(None) => Err(self.error_at(string, "pcap_filter needs a tcpdump filter")),
            Err(error) => {
                Err(self.error_at(string, format!("in {}: {}", name.text, error.message)))
            }
        }
    }

    fn check_comparable(&self, field_token: Token<'_>, field: Field) -> Result<(), ParseError> {
        if field.field_type() == FieldType::Protocol {
            return Err(self.error_at(
                field_token,
                format!(
                    "protocol \"{field}\" can only be tested for presence (write {field} alone, or compare one of its fields)"
                ),
            ));
        }
        Ok(())
    }

    fn value_token(&mut self) -> Result<Token<'a>, ParseError> {
        match self.advance() {
            Some(token) if token.kind == TokenKind::Word => Ok(token),
            Some(token) if token.kind == TokenKind::Str => Err(self.error_at(
                token,
                "quoted strings are not supported; write the value without quotes",
            )),
            other => Err(self.unexpected(other, "a value")),
        }
    }

    fn literal(&self, field: Field, token: Token<'_>) -> Result<Literal, ParseError> {
        if Field::from_name(token.text).is_some() && !looks_like_value(token.text) {
            return Err(self.error_at(
                token,
                "comparing two fields is not supported; compare a field with a value",
            ));
        }
        typed_literal(field, token.text).map_err(|message| self.error_at(token, message))
    }

    fn set(&mut self, field: Field) -> Result<Vec<SetElement>, ParseError> {
        let open = match self.advance() {
            Some(token) if token.kind == TokenKind::LBrace => token,
            other => return Err(self.unexpected(other, "\"{\" to open a set")),
        };
        let mut elements = Vec::new();
        loop {
            match self.peek() {
                Some(token) if token.kind == TokenKind::RBrace => {
                    self.advance();
                    if elements.is_empty() {
                        return Err(self.error_at(token, "a set needs at least one element"));
                    }
                    return Ok(elements);
                }
                Some(token) if token.kind == TokenKind::Comma && !elements.is_empty() => {
                    self.advance();
                    if self.peek().is_some_and(|next| {
                        matches!(next.kind, TokenKind::RBrace | TokenKind::Comma)
                    }) {
                        return Err(self.unexpected(self.peek(), "a value after \",\""));
                    }
                }
                Some(token) if token.kind == TokenKind::Word => {
                    if elements.len() >= MAX_SET_ELEMENTS {
                        return Err(self.error_at(
                            token,
                            format!("a set holds at most {MAX_SET_ELEMENTS} elements"),
                        ));
                    }
                    self.advance();
                    elements.push(self.set_element(field, token)?);
                }
                None => return Err(self.error_at(open, "unclosed \"{\"")),
                other => return Err(self.unexpected(other, "a value, \",\" or \"}\"")),
            }
        }
    }

    fn set_element(&mut self, field: Field, token: Token<'a>) -> Result<SetElement, ParseError> {
        // The range may be one word (`80..90`), end in `..` (`80.. 90`), or be
        // written with spaces (`80 .. 90`).
        let (low_text, high_text) = match token.text.split_once("..") {
            Some((low, high)) => (low, Some(high)),
            None => (token.text, None),
        };
        let low_token = Token {
            kind: TokenKind::Word,
            text: low_text,
            column: token.column,
        };
        if low_text.is_empty() {
            return Err(self.error_at(token, "a range needs a low value before \"..\""));
        }
        let low = self.literal(field, low_token)?;
        let high_token = match high_text {
            Some("") => Some(self.range_end()?),
            Some(high) => Some(Token {
                kind: TokenKind::Word,
                text: high,
                column: token.column + low_text.chars().count() + 2,
            }),
            None if self
                .peek()
                .is_some_and(|next| next.kind == TokenKind::DotDot) =>
            {
                self.advance();
                Some(self.range_end()?)
            }
            None => None,
        };
        let high = match high_token {
            Some(high_token) => {
                let high = self.literal(field, high_token)?;
                if low.is_network() || high.is_network() {
                    return Err(self.error_at(
                        token,
                        "a range cannot have a network as an end; write two addresses",
                    ));
                }
                Some(high)
            }
            None => None,
        };
        Ok(SetElement { low, high })
    }

    fn range_end(&mut self) -> Result<Token<'a>, ParseError> {
        match self.advance() {
            Some(token) if token.kind == TokenKind::Word => Ok(token),
            other => Err(self.unexpected(other, "the high value of the range")),
        }
    }
}

/// Returns how many `!` and `(` are open on the operator stack, a `(` right
/// after a `!` not counting.
fn count_nesting(operators: &[(Operator, Token<'_>)]) -> usize {
    let mut previous = None;
    let mut nesting = 0;
    for (operator, _) in operators {
        match (operator, previous) {
            (Operator::Not, _) => nesting += 1,
            (Operator::Open, Some(Operator::Not)) => {}
            (Operator::Open, _) => nesting += 1,
            _ => {}
        }
        previous = Some(*operator);
    }
    nesting
}

/// The words with a meaning of their own in the Wireshark syntax.
const KEYWORDS: &[&str] = &[
    "and",
    "or",
    "xor",
    "not",
    "in",
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "any_eq",
    "all_eq",
    "any_ne",
    "all_ne",
    "any",
    "all",
    "contains",
    "matches",
    "bitwise_and",
];

fn is_word(token: Token<'_>, word: &str) -> bool {
    token.kind == TokenKind::Word && token.text == word
}

/// Returns the operator a token spells and the quantifier it implies (Wireshark 4:
/// `==` any equal, `===` all equal, `!=` all not equal, `!==`/`~=` any not equal).
fn comparison_operator(token: Token<'_>) -> Option<(CmpOp, Quantifier)> {
    use Quantifier::{All, Any};
    Some(match token.kind {
        TokenKind::EqEq => (CmpOp::Eq, Any),
        TokenKind::EqEqEq => (CmpOp::Eq, All),
        TokenKind::NotEq => (CmpOp::Ne, All),
        TokenKind::NotEqEq | TokenKind::TildeEq => (CmpOp::Ne, Any),
        TokenKind::Lt => (CmpOp::Lt, Any),
        TokenKind::Le => (CmpOp::Le, Any),
        TokenKind::Gt => (CmpOp::Gt, Any),
        TokenKind::Ge => (CmpOp::Ge, Any),
        TokenKind::Word => match token.text {
            "eq" | "any_eq" => (CmpOp::Eq, Any),
            "all_eq" => (CmpOp::Eq, All),
            "ne" | "all_ne" => (CmpOp::Ne, All),
            "any_ne" => (CmpOp::Ne, Any),
            "lt" => (CmpOp::Lt, Any),
            "le" => (CmpOp::Le, Any),
            "gt" => (CmpOp::Gt, Any),
            "ge" => (CmpOp::Ge, Any),
            _ => return None,
        },
        _ => return None,
    })
}

/// Returns true if `text` starts like a literal (a digit, or an IPv6 `::`).
fn looks_like_value(text: &str) -> bool {
    text.starts_with(|c: char| c.is_ascii_digit()) || text.starts_with("::")
}

/// Returns the literal `text` stands for as a value of `field`, or the reason it cannot.
pub fn typed_literal(field: Field, text: &str) -> Result<Literal, String> {
    match field.field_type() {
        FieldType::Protocol => Err(format!(
            "protocol \"{field}\" can only be tested for presence"
        )),
        FieldType::UInt { max } => {
            let value = parse_uint(text)?;
            if value > max {
                return Err(format!("{value} is too large for {field} (maximum {max})"));
            }
            Ok(Literal::UInt(value))
        }
        FieldType::Bool => match text {
            "true" | "True" | "TRUE" => Ok(Literal::Bool(true)),
            "false" | "False" | "FALSE" => Ok(Literal::Bool(false)),
            _ => parse_uint(text)
                .map(|value| Literal::Bool(value != 0))
                .map_err(|_| format!("\"{text}\" is not a flag value; use 1, 0, true or false")),
        },
        FieldType::Ipv4 => match parse_ip(text)? {
            IpLiteral::V4(addr, prefix_len) => Ok(Literal::Ipv4 {
                addr: ipv4_network(addr, prefix_len),
                prefix_len,
            }),
            IpLiteral::V6(..) => Err(match field.other_family() {
                Some(other) => format!(
                    "\"{text}\" is an IPv6 address but {field} holds IPv4 addresses; use {other}"
                ),
                None => format!("\"{text}\" is an IPv6 address but {field} holds IPv4 addresses"),
            }),
        },
        FieldType::Ipv6 => match parse_ip(text)? {
            IpLiteral::V6(addr, prefix_len) => Ok(Literal::Ipv6 {
                addr: ipv6_network(addr, prefix_len),
                prefix_len,
            }),
            IpLiteral::V4(..) => Err(match field.other_family() {
                Some(other) => format!(
                    "\"{text}\" is an IPv4 address but {field} holds IPv6 addresses; use {other}"
                ),
                None => format!("\"{text}\" is an IPv4 address but {field} holds IPv6 addresses"),
            }),
        },
        FieldType::Addr => match parse_ip(text)? {
            IpLiteral::V6(addr, prefix_len) => Ok(Literal::Ipv6 {
                addr: ipv6_network(addr, prefix_len),
                prefix_len,
            }),
            IpLiteral::V4(addr, prefix_len) => {
                let mapped = ipv4_network(addr, prefix_len).to_ipv6_mapped();
                Ok(Literal::Ipv6 {
                    addr: mapped,
                    prefix_len: prefix_len.saturating_add(96),
                })
            }
        },
        FieldType::CommunityId => {
            hindsight_model::community::parse_community_id(text.trim_matches('"'))
                .map(Literal::CommunityId)
                .ok_or_else(|| {
                    format!("\"{text}\" is not a Community ID (\"1:\" and 28 base64 characters)")
                })
        }
        FieldType::Mac => parse_mac(text).map(Literal::Mac).ok_or_else(|| {
            format!("\"{text}\" is not a MAC address (write six hex bytes, e.g. aa:bb:cc:dd:ee:ff)")
        }),
    }
}

/// A quoted string token's text inside its quotes, escapes left as written.
fn strip_quotes(token: &str) -> &str {
    let inner = token.strip_prefix('"').unwrap_or(token);
    inner.strip_suffix('"').unwrap_or(inner)
}

/// The text of a quoted string token: without its quotes, `\"` and `\\`
/// read as the characters they escape.
fn unquote(token: &str) -> String {
    let inner = token
        .strip_prefix('"')
        .map(|rest| rest.strip_suffix('"').unwrap_or(rest))
        .unwrap_or(token);
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.extend(chars.next()),
            c => out.push(c),
        }
    }
    out
}

/// Returns the known field name closest to `name` by edit distance, if it is
/// close enough to be a plausible typo.
pub fn nearest_field_name(name: &str) -> Option<&'static str> {
    let name_len = name.chars().count();
    let limit = (name_len / 3).max(2);
    FIELDS
        .iter()
        .map(|def| def.name)
        .chain(FIELD_ALIASES.iter().map(|(known, _)| *known))
        // The distance is at least the difference in length: skip hopeless names.
        .filter(|known| known.len().abs_diff(name_len) <= limit)
        .map(|known| (edit_distance(name, known), known))
        .filter(|(distance, _)| *distance <= limit)
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, known)| known)
}

/// Returns the Levenshtein distance between `a` and `b` (case-insensitive).
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().map(|c| c.to_ascii_lowercase()).collect();
    let b: Vec<char> = b.chars().map(|c| c.to_ascii_lowercase()).collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    let mut current = vec![0usize; b.len() + 1];
    for (i, ca) in a.iter().enumerate() {
        if let Some(first) = current.first_mut() {
            *first = i + 1;
        }
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous.get(j).copied().unwrap_or(0) + usize::from(ca != cb);
            let deletion = previous.get(j + 1).copied().unwrap_or(0) + 1;
            let insertion = current.get(j).copied().unwrap_or(0) + 1;
            if let Some(cell) = current.get_mut(j + 1) {
                *cell = substitution.min(deletion).min(insertion);
            }
        }
        std::mem::swap(&mut previous, &mut current);
    }
    previous.last().copied().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distance_counts_single_edits() {
        assert_eq!(edit_distance("ip.adr", "ip.addr"), 1);
        assert_eq!(edit_distance("tcp.prot", "tcp.port"), 2);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("same", "same"), 0);
    }

    #[test]
    fn nearest_field_name_suggests_plausible_typos_only() {
        assert_eq!(nearest_field_name("ip.adr"), Some("ip.addr"));
        assert_eq!(nearest_field_name("tcp.dstprot"), Some("tcp.dstport"));
        assert_eq!(nearest_field_name("IP.SRC"), Some("ip.src"));
        assert_eq!(nearest_field_name("dns.qry.name"), None);
    }
}
