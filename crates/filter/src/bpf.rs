//! Parses tcpdump (libpcap `pcap-filter(7)`) primitives and translates each into
//! the typed tree, with tcpdump's meaning:
//!
//! ```text
//! expr      := unary (("and" | "&&" | "or" | "||") unary)*   equal precedence, left to right
//! unary     := ("not" | "!") unary | "(" expr ")" | primitive
//! primitive := [proto] [dir] [kind] ID | proto | "vlan" [ID] | "less" N | "greater" N
//!            | [ip | ip6 | ether] "proto" ID | ["ether"] ("broadcast" | "multicast")
//! proto     := ether | ip | ip6 | arp | rarp | tcp | udp | sctp | icmp | icmp6 | igmp
//! dir       := src | dst | src or dst | src and dst
//! kind      := host | net | port | portrange
//! ```
//!
//! A bare ID continues with the qualifiers of the previous primitive, as in
//! libpcap: `host a or b` is `host a or host b`, `tcp port 80 or 443` is
//! `tcp port 80 or tcp port 443`.
//!
//! The translations follow the code libpcap generates: `host X` tests the IPv4
//! addresses and the ARP sender/target addresses; `port N` tests TCP, UDP and
//! SCTP ports (never on non-first fragments); `tcp` is the IP protocol number,
//! fragments included.

use std::net::Ipv4Addr;

use super::ast::{
    CmpOp, Comparison, Expr, Field, FieldRef, Literal, Membership, Quantifier, SetElement,
};
use super::lexer::{Token, TokenKind, byte_of, column_of};
use super::value::{IpLiteral, ipv4_network, ipv6_network, parse_ip, parse_mac, parse_uint};
use super::{MAX_NESTING_DEPTH, too_deep};
use crate::error::ParseError;

/// The ethertype of RARP, which libpcap's `host` also matches.
const ETHERTYPE_RARP: u64 = 0x8035;

/// Parses `tokens` (of `text`) as a tcpdump filter; `None` for no tokens.
pub fn parse(text: &str, tokens: &[Token<'_>]) -> Result<Option<Expr>, ParseError> {
    if tokens.is_empty() {
        return Ok(None);
    }
    let mut parser = Parser {
        text,
        tokens,
        position: 0,
        nesting: 0,
        previous: None,
    };
    let (expr, _) = parser.expr()?;
    match parser.peek() {
        None => Ok(Some(expr)),
        Some(token) if token.kind == TokenKind::RParen => {
            Err(parser.error_at(token, "unmatched \")\""))
        }
        Some(token) => Err(parser.error_at(
            token,
            format!(
                "\"{}\" was unexpected here; expected \"and\", \"or\" or the end of the filter",
                token.text
            ),
        )),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Proto {
    Ether,
    Ip,
    Ip6,
    Arp,
    Rarp,
    Tcp,
    Udp,
    Sctp,
    Icmp,
    Icmp6,
    Igmp,
}

impl Proto {
    fn from_word(word: &str) -> Option<Self> {
        Some(match word {
            "ether" | "link" => Proto::Ether,
            "ip" => Proto::Ip,
            "ip6" => Proto::Ip6,
            "arp" => Proto::Arp,
            "rarp" => Proto::Rarp,
            "tcp" => Proto::Tcp,
            "udp" => Proto::Udp,
            "sctp" => Proto::Sctp,
            "icmp" => Proto::Icmp,
            "icmp6" => Proto::Icmp6,
            "igmp" => Proto::Igmp,
            _ => return None,
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dir {
    SrcOrDst,
    Src,
    Dst,
    SrcAndDst,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Host,
    Net,
    Port,
    PortRange,
    Proto,
}

impl Kind {
    fn from_word(word: &str) -> Option<Self> {
        Some(match word {
            "host" => Kind::Host,
            "net" => Kind::Net,
            "port" => Kind::Port,
            "portrange" => Kind::PortRange,
            "proto" => Kind::Proto,
            _ => return None,
        })
    }
}

/// `ether broadcast` (the destination is all ones) or `ether multicast` (its
/// group bit is set: `ether[0] & 1 != 0`).
fn ether_cast(word: &str) -> Expr {
    match word {
        "broadcast" => Expr::eq(Field::EthDst, Literal::Mac([0xff; 6])),
        _ => Expr::eq(Field::EthDstIg, Literal::Bool(true)),
    }
}

/// The qualifiers of a primitive, remembered for the bare IDs that follow it.
#[derive(Clone, Copy, Debug)]
struct Qualifiers {
    proto: Option<Proto>,
    dir: Dir,
    kind: Kind,
}

/// Primitives libpcap knows that hindsight does not translate.
const UNSUPPORTED: &[&str] = &[
    "gateway",
    "inbound",
    "outbound",
    "ifname",
    "on",
    "rnr",
    "rulenum",
    "reason",
    "rset",
    "srnr",
    "subrulenum",
    "action",
    "mpls",
    "pppoed",
    "pppoes",
    "geneve",
    "vxlan",
    "iso",
    "esis",
    "isis",
    "clnp",
    "stp",
    "ipx",
    "netbeui",
    "atalk",
    "aarp",
    "decnet",
    "lat",
    "sca",
    "moprc",
    "mopdl",
    "llc",
    "wlan",
    "type",
    "subtype",
    "dir",
    "fddi",
    "tr",
    "ppp",
    "slip",
    "radio",
    "ah",
    "esp",
    "pim",
    "vrrp",
    "carp",
];

struct Parser<'t, 'a> {
    text: &'a str,
    tokens: &'t [Token<'a>],
    position: usize,
    nesting: usize,
    previous: Option<Qualifiers>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Logical {
    And,
    Or,
}

impl<'t, 'a> Parser<'t, 'a> {
    fn peek(&self) -> Option<Token<'a>> {
        self.tokens.get(self.position).copied()
    }

    fn peek_at(&self, offset: usize) -> Option<Token<'a>> {
        self.tokens.get(self.position + offset).copied()
    }

    fn peek_word(&self) -> Option<&'a str> {
        self.peek()
            .filter(|token| token.kind == TokenKind::Word)
            .map(|token| token.text)
    }

    fn advance(&mut self) -> Option<Token<'a>> {
        let token = self.peek();
        if token.is_some() {
            self.position += 1;
        }
        token
    }

    fn error_at(&self, token: Token<'_>, message: impl Into<String>) -> ParseError {
        ParseError::new(self.text, token.column, token.text, message)
    }

    fn unexpected(&self, token: Option<Token<'_>>, expected: &str) -> ParseError {
        match token {
            Some(token) => self.error_at(
                token,
                format!(
                    "\"{}\" was unexpected here; expected {expected}",
                    token.text
                ),
            ),
            None => ParseError::new(
                self.text,
                self.text.chars().count() + 1,
                "",
                format!("unexpected end of filter; expected {expected}"),
            ),
        }
    }

    fn logical(token: Option<Token<'_>>) -> Option<Logical> {
        let token = token?;
        match (token.kind, token.text) {
            (TokenKind::AndAnd, _) | (TokenKind::Word, "and") => Some(Logical::And),
            (TokenKind::OrOr, _) | (TokenKind::Word, "or") => Some(Logical::Or),
            _ => None,
        }
    }

    /// Parses a chain of `and`/`or` of equal precedence, left to right. Returns the
    /// tree and its depth: each change of operator wraps what came before, so a
    /// long alternating chain is refused rather than built arbitrarily deep.
    fn expr(&mut self) -> Result<(Expr, usize), ParseError> {
        let (first, first_depth) = self.unary()?;
        let mut operands = vec![first];
        let mut depth = first_depth;
        let mut current: Option<Logical> = None;
        while let Some(op) = Self::logical(self.peek()) {
            let op_token = self.advance();
            if current.is_some_and(|current| current != op) {
                let node = build(current, std::mem::take(&mut operands));
                operands.push(node);
                depth += 1;
                if too_deep(depth) {
                    return Err(self.unexpected_depth(op_token));
                }
            }
            current = Some(op);
            let (operand, operand_depth) = self.unary()?;
            depth = depth.max(operand_depth);
            operands.push(operand);
        }
        let depth = if current.is_some() { depth + 1 } else { depth };
        if too_deep(depth) {
            return Err(self.unexpected_depth(self.peek()));
        }
        Ok((build(current, operands), depth))
    }

    fn unexpected_depth(&self, token: Option<Token<'_>>) -> ParseError {
        let message = format!("filter nests deeper than {MAX_NESTING_DEPTH} levels");
        match token {
            Some(token) => self.error_at(token, message),
            None => ParseError::new(self.text, self.text.chars().count() + 1, "", message),
        }
    }

    fn enter(&mut self, token: Token<'_>) -> Result<(), ParseError> {
        self.nesting += 1;
        if self.nesting > MAX_NESTING_DEPTH {
            return Err(self.unexpected_depth(Some(token)));
        }
        Ok(())
    }

    fn unary(&mut self) -> Result<(Expr, usize), ParseError> {
        match self.peek() {
            Some(token)
                if token.kind == TokenKind::Bang
                    || (token.kind == TokenKind::Word && token.text == "not") =>
            {
                self.advance();
                self.enter(token)?;
                let (inner, depth) = self.unary()?;
                self.nesting -= 1;
                if too_deep(depth + 1) {
                    return Err(self.unexpected_depth(Some(token)));
                }
                Ok((Expr::Not(Box::new(inner)), depth + 1))
            }
            Some(open) if open.kind == TokenKind::LParen => {
                // `(tcp[13] & 2) != 0`: an expression in parentheses, if it
                // reads as a relation; else a group of primitives.
                let position = self.position;
                if let Ok(expr) = self.relation(open) {
                    let depth = expr.depth();
                    return Ok((expr, depth));
                }
                self.position = position;
                self.advance();
                self.enter(open)?;
                let inner = self.expr()?;
                self.nesting -= 1;
                match self.advance() {
                    Some(close) if close.kind == TokenKind::RParen => Ok(inner),
                    None => Err(self.error_at(open, "unclosed \"(\"")),
                    other => Err(self.unexpected(other, "\")\", \"and\" or \"or\"")),
                }
            }
            Some(token) if token.kind == TokenKind::Word => {
                let expr = self.primitive()?;
                let depth = expr.depth();
                Ok((expr, depth))
            }
            other => Err(self.unexpected(other, "a tcpdump primitive (host, net, port, tcp...)")),
        }
    }

    fn primitive(&mut self) -> Result<Expr, ParseError> {
        let Some(token) = self.peek() else {
            return Err(self.unexpected(None, "a tcpdump primitive"));
        };
        if token.text == "len"
            || token.text.starts_with('-')
            || self
                .peek_at(1)
                .is_some_and(|next| next.kind == TokenKind::LBracket)
        {
            return self.relation(token).map_err(|(error, _)| error);
        }
        if starts_with_digit(token.text) {
            // `2 < ip[0]`; else a bare value continuing the previous primitive.
            let position = self.position;
            if let Ok(expr) = self.relation(token) {
                return Ok(expr);
            }
            self.position = position;
        }
        match token.text {
            "less" | "greater" => {
                self.advance();
                let value_token = self.id_token("a length in bytes")?;
                let value = self.number(value_token, u64::from(u32::MAX))?;
                let op = if token.text == "less" {
                    CmpOp::Le
                } else {
                    CmpOp::Ge
                };
                Ok(compare(Field::FrameLen, op, Literal::UInt(value)))
            }
            "vlan" => {
                self.advance();
                match self.peek() {
                    Some(id) if id.kind == TokenKind::Word && starts_with_digit(id.text) => {
                        self.advance();
                        let value = self.number(id, 4095)?;
                        Ok(Expr::eq(Field::VlanId, Literal::UInt(value)))
                    }
                    _ => Ok(Expr::Exists(Field::Vlan)),
                }
            }
            word @ ("broadcast" | "multicast") => {
                self.advance();
                Ok(ether_cast(word))
            }
            word if UNSUPPORTED.contains(&word) => Err(self.error_at(
                token,
                format!("the tcpdump primitive \"{word}\" is not supported"),
            )),
            word if Proto::from_word(word).is_some()
                || Kind::from_word(word).is_some()
                || matches!(word, "src" | "dst") =>
            {
                self.qualified()
            }
            _ => self.continuation(token),
        }
    }

    /// Parses a relation over the packet's bytes starting at `first`, moving
    /// past the tokens it spans.
    fn relation(&mut self, first: Token<'a>) -> Result<Expr, (ParseError, usize)> {
        let start = byte_of(self.text, first.column);
        let (relation, end) =
            crate::offsets::parse_relation(self.text, start).map_err(|(message, at)| {
                let column = column_of(self.text, at);
                (ParseError::new(self.text, column, "", message), at)
            })?;
        while let Some(token) = self
            .peek()
            .filter(|token| byte_of(self.text, token.column) < end)
        {
            if byte_of(self.text, token.column) + token.text.len() > end {
                // A word the relation ends inside of (`udp[0:2] == 00:35`).
                let column = column_of(self.text, end);
                return Err((
                    ParseError::new(
                        self.text,
                        column,
                        "",
                        "unexpected text after the comparison's value",
                    ),
                    end,
                ));
            }
            self.position += 1;
        }
        Ok(Expr::Offsets(Box::new(relation)))
    }

    /// Parses `[proto] [dir] [kind] ID`, or a protocol alone.
    fn qualified(&mut self) -> Result<Expr, ParseError> {
        let mut proto = None;
        let mut proto_token = None;
        if let Some(word) = self.peek_word().and_then(Proto::from_word) {
            proto = Some(word);
            proto_token = self.advance();
        }
        if let (Some(proto), Some(proto_token)) = (proto, proto_token) {
            match self.peek_word() {
                Some("proto") if matches!(proto, Proto::Ether | Proto::Ip | Proto::Ip6) => {
                    self.advance();
                    let id = self.id_token("a protocol number or name")?;
                    self.previous = Some(Qualifiers {
                        proto: Some(proto),
                        dir: Dir::SrcOrDst,
                        kind: Kind::Proto,
                    });
                    return self.proto_expr(Some(proto), id);
                }
                Some(word @ ("broadcast" | "multicast")) if proto == Proto::Ether => {
                    self.advance();
                    return Ok(ether_cast(word));
                }
                Some(word) if matches!(word, "src" | "dst") || Kind::from_word(word).is_some() => {}
                Some(word) if proto == Proto::Ether && parse_mac(word).is_some() => {}
                _ => return self.protocol_alone(proto, proto_token),
            }
        }
        let dir = self.dir();
        let kind_token = self
            .peek()
            .filter(|token| token.kind == TokenKind::Word && Kind::from_word(token.text).is_some());
        let kind = kind_token.and_then(|token| Kind::from_word(token.text));
        if kind_token.is_some() {
            self.advance();
        }
        let id = self.id_token("an address, network or port")?;
        let qualifiers = Qualifiers {
            proto,
            dir: dir.unwrap_or(Dir::SrcOrDst),
            kind: kind.unwrap_or(Kind::Host),
        };
        self.previous = Some(qualifiers);
        self.build_qualified(qualifiers, id)
    }

    /// A bare ID: the qualifiers of the previous primitive apply (or `host`).
    fn continuation(&mut self, token: Token<'a>) -> Result<Expr, ParseError> {
        self.advance();
        let qualifiers = self.previous.unwrap_or(Qualifiers {
            proto: None,
            dir: Dir::SrcOrDst,
            kind: Kind::Host,
        });
        if self.previous.is_none()
            && parse_ip(token.text).is_err()
            && parse_mac(token.text).is_none()
        {
            return Err(self.error_at(
                token,
                format!(
                    "\"{}\" is not a tcpdump primitive (host, net, port, portrange, tcp, udp...)",
                    token.text
                ),
            ));
        }
        self.build_qualified(qualifiers, token)
    }

    fn dir(&mut self) -> Option<Dir> {
        let first = self.peek_word()?;
        if !matches!(first, "src" | "dst") {
            return None;
        }
        self.advance();
        let joined = match (self.peek_word(), self.peek_at(1)) {
            (Some(op @ ("or" | "and")), Some(second))
                if second.kind == TokenKind::Word
                    && matches!(second.text, "src" | "dst")
                    && second.text != first =>
            {
                Some(if op == "or" {
                    Dir::SrcOrDst
                } else {
                    Dir::SrcAndDst
                })
            }
            _ => None,
        };
        if let Some(joined) = joined {
            self.advance();
            self.advance();
            return Some(joined);
        }
        Some(if first == "src" { Dir::Src } else { Dir::Dst })
    }

    fn id_token(&mut self, expected: &str) -> Result<Token<'a>, ParseError> {
        match self.peek() {
            Some(token)
                if token.kind == TokenKind::Word && !matches!(token.text, "and" | "or" | "not") =>
            {
                self.advance();
                Ok(token)
            }
            other => Err(self.unexpected(other, expected)),
        }
    }

    fn number(&self, token: Token<'_>, max: u64) -> Result<u64, ParseError> {
        let value = parse_uint(token.text).map_err(|message| self.error_at(token, message))?;
        if value > max {
            return Err(self.error_at(token, format!("{value} is too large (maximum {max})")));
        }
        Ok(value)
    }

    fn build_qualified(
        &mut self,
        qualifiers: Qualifiers,
        id: Token<'_>,
    ) -> Result<Expr, ParseError> {
        match qualifiers.kind {
            Kind::Host | Kind::Net => self.address_expr(qualifiers, id),
            Kind::Port | Kind::PortRange => self.port_expr(qualifiers, id),
            Kind::Proto => self.proto_expr(qualifiers.proto, id),
        }
    }

    fn protocol_alone(&self, proto: Proto, token: Token<'_>) -> Result<Expr, ParseError> {
        Ok(match proto {
            Proto::Ether => {
                return Err(self.error_at(
                    token,
                    "\"ether\" needs host, src, dst, proto, broadcast or multicast after it",
                ));
            }
            Proto::Ip => Expr::Exists(Field::Ip),
            Proto::Ip6 => Expr::Exists(Field::Ipv6),
            Proto::Arp => Expr::Exists(Field::Arp),
            Proto::Rarp => Expr::eq(Field::EthType, Literal::UInt(ETHERTYPE_RARP)),
            Proto::Tcp => ip_protocol(None, 6),
            Proto::Udp => ip_protocol(None, 17),
            Proto::Sctp => ip_protocol(None, 132),
            Proto::Icmp => ip_protocol(Some(Proto::Ip), 1),
            Proto::Icmp6 => ip_protocol(Some(Proto::Ip6), 58),
            Proto::Igmp => ip_protocol(Some(Proto::Ip), 2),
        })
    }

    fn proto_expr(&self, proto: Option<Proto>, id: Token<'_>) -> Result<Expr, ParseError> {
        let name = id.text.strip_prefix('\\').unwrap_or(id.text);
        if proto == Some(Proto::Ether) {
            let value = match name {
                "ip" => 0x0800,
                "ip6" => 0x86dd,
                "arp" => 0x0806,
                "rarp" => ETHERTYPE_RARP,
                _ => self.number(id, u64::from(u16::MAX))?,
            };
            return Ok(Expr::eq(Field::EthType, Literal::UInt(value)));
        }
        let value = match name {
            "icmp" => 1,
            "igmp" => 2,
            "tcp" => 6,
            "udp" => 17,
            "icmp6" => 58,
            "sctp" => 132,
            _ => self.number(id, u64::from(u8::MAX))?,
        };
        match proto {
            None | Some(Proto::Ip) | Some(Proto::Ip6) => Ok(ip_protocol(proto, value)),
            Some(_) => Err(self.error_at(id, "\"proto\" follows ip, ip6 or ether")),
        }
    }

    fn address_expr(&mut self, qualifiers: Qualifiers, id: Token<'_>) -> Result<Expr, ParseError> {
        let Qualifiers { proto, dir, kind } = qualifiers;
        if let Some(mac) = parse_mac(id.text).filter(|_| parse_ip(id.text).is_err()) {
            if !matches!(proto, None | Some(Proto::Ether)) || kind != Kind::Host {
                return Err(self.error_at(id, "a MAC address goes with \"ether host\""));
            }
            return Ok(by_direction(
                dir,
                Field::EthSrc,
                Field::EthDst,
                Field::EthAddr,
                Literal::Mac(mac),
            ));
        }
        if proto == Some(Proto::Ether) {
            return Err(self.error_at(
                id,
                format!(
                    "\"{}\" is not a MAC address (ether host takes aa:bb:cc:dd:ee:ff)",
                    id.text
                ),
            ));
        }
        let literal = match kind {
            Kind::Net => self.network_literal(id)?,
            _ => self.host_literal(id)?,
        };
        match literal {
            Literal::Ipv4 { .. } => {
                let ip = by_direction(dir, Field::IpSrc, Field::IpDst, Field::IpAddr, literal);
                let arp = || match dir {
                    Dir::SrcOrDst => Expr::Or(vec![
                        Expr::eq(Field::ArpSrcProtoIpv4, literal),
                        Expr::eq(Field::ArpDstProtoIpv4, literal),
                    ]),
                    Dir::Src => Expr::eq(Field::ArpSrcProtoIpv4, literal),
                    Dir::Dst => Expr::eq(Field::ArpDstProtoIpv4, literal),
                    Dir::SrcAndDst => Expr::And(vec![
                        Expr::eq(Field::ArpSrcProtoIpv4, literal),
                        Expr::eq(Field::ArpDstProtoIpv4, literal),
                    ]),
                };
                match proto {
                    None => {
                        // libpcap: `ip host X or arp host X or rarp host X`.
                        let mut operands = vec![ip];
                        match arp() {
                            Expr::Or(both) => operands.extend(both),
                            other => operands.push(other),
                        }
                        Ok(Expr::Or(operands))
                    }
                    Some(Proto::Ip) => Ok(ip),
                    Some(Proto::Arp) => Ok(arp()),
                    Some(_) => Err(self.error_at(
                        id,
                        format!("\"{}\" is an IPv4 address; it goes with ip or arp", id.text),
                    )),
                }
            }
            Literal::Ipv6 { .. } => match proto {
                None | Some(Proto::Ip6) => Ok(by_direction(
                    dir,
                    Field::Ipv6Src,
                    Field::Ipv6Dst,
                    Field::Ipv6Addr,
                    literal,
                )),
                Some(_) => Err(self.error_at(
                    id,
                    format!("\"{}\" is an IPv6 address; it goes with ip6", id.text),
                )),
            },
            _ => Err(self.error_at(id, "expected an IP address")),
        }
    }

    fn host_literal(&self, id: Token<'_>) -> Result<Literal, ParseError> {
        if starts_with_digit(id.text) && !id.text.contains(['.', ':']) {
            return Err(self.error_at(
                id,
                format!(
                    "\"{}\" is not an address; did you mean port {}?",
                    id.text, id.text
                ),
            ));
        }
        if id.text.contains('/') {
            return Err(self.error_at(
                id,
                format!("\"{}\" is a network; use net {}", id.text, id.text),
            ));
        }
        match parse_ip(id.text).map_err(|message| self.error_at(id, message))? {
            IpLiteral::V4(addr, 32) => Ok(Literal::Ipv4 {
                addr,
                prefix_len: 32,
            }),
            IpLiteral::V6(addr, 128) => Ok(Literal::Ipv6 {
                addr,
                prefix_len: 128,
            }),
            _ => Err(self.error_at(
                id,
                format!("\"{}\" is a network; use net {}", id.text, id.text),
            )),
        }
    }

    /// Reads `net` operands: `a.b.c.d/len`, `a.b.c.d mask m.m.m.m`, the libpcap
    /// shorthand `a`, `a.b`, `a.b.c` (a /8, /16, /24 network), or an IPv6 network.
    fn network_literal(&mut self, id: Token<'_>) -> Result<Literal, ParseError> {
        let (literal, host_bits_set) = if self
            .peek()
            .is_some_and(|token| token.kind == TokenKind::Word && token.text == "mask")
        {
            self.advance();
            let Some(mask_value) = self.peek().filter(|token| token.kind == TokenKind::Word) else {
                return Err(self.unexpected(self.peek(), "a netmask such as 255.255.255.0"));
            };
            self.advance();
            let addr: Ipv4Addr = id.text.parse().map_err(|_| {
                self.error_at(id, format!("\"{}\" is not an IPv4 address", id.text))
            })?;
            let mask: Ipv4Addr = mask_value.text.parse().map_err(|_| {
                self.error_at(
                    mask_value,
                    format!("\"{}\" is not a netmask", mask_value.text),
                )
            })?;
            let mask_bits = u32::from(mask);
            if mask_bits.leading_ones() + mask_bits.trailing_zeros() != 32 {
                return Err(self.error_at(mask_value, "only contiguous netmasks are supported"));
            }
            let prefix_len = u8::try_from(mask_bits.leading_ones()).unwrap_or(32);
            (
                Literal::Ipv4 {
                    addr: ipv4_network(addr, prefix_len),
                    prefix_len,
                },
                ipv4_network(addr, prefix_len) != addr,
            )
        } else if let Some(shorthand) = partial_ipv4(id.text) {
            shorthand
        } else {
            match parse_ip(id.text).map_err(|message| self.error_at(id, message))? {
                IpLiteral::V4(addr, prefix_len) => (
                    Literal::Ipv4 {
                        addr: ipv4_network(addr, prefix_len),
                        prefix_len,
                    },
                    ipv4_network(addr, prefix_len) != addr,
                ),
                IpLiteral::V6(addr, prefix_len) => (
                    Literal::Ipv6 {
                        addr: ipv6_network(addr, prefix_len),
                        prefix_len,
                    },
                    ipv6_network(addr, prefix_len) != addr,
                ),
            }
        };
        if host_bits_set {
            return Err(self.error_at(id, format!("non-network bits set in \"{}\"", id.text)));
        }
        Ok(literal)
    }

    fn port_expr(&self, qualifiers: Qualifiers, id: Token<'_>) -> Result<Expr, ParseError> {
        let Qualifiers { proto, dir, kind } = qualifiers;
        let (low, high) = if kind == Kind::PortRange {
            let Some((low_text, high_text)) = id.text.split_once('-') else {
                return Err(self.error_at(id, "a port range is written LOW-HIGH, e.g. 1024-2048"));
            };
            let low = self.port_number(id, low_text)?;
            let high = self.port_number(id, high_text)?;
            // libpcap accepts a range written backwards.
            (low.min(high), Some(low.max(high)))
        } else {
            (self.port_number(id, id.text)?, None)
        };
        let transports: &[Proto] = match proto {
            None | Some(Proto::Ip) | Some(Proto::Ip6) => &[Proto::Tcp, Proto::Udp, Proto::Sctp],
            Some(Proto::Tcp) => &[Proto::Tcp],
            Some(Proto::Udp) => &[Proto::Udp],
            Some(Proto::Sctp) => &[Proto::Sctp],
            Some(_) => {
                return Err(self.error_at(id, "ports go with tcp, udp, sctp, ip or ip6"));
            }
        };
        let leaf = |field: Field| match high {
            Some(high) => Expr::In(Membership::new(
                FieldRef { field, mask: None },
                Quantifier::Any,
                vec![SetElement {
                    low: Literal::UInt(low),
                    high: Some(Literal::UInt(high)),
                }],
            )),
            None => Expr::eq(field, Literal::UInt(low)),
        };
        let per_transport: Vec<Expr> = transports
            .iter()
            .map(|transport| {
                let (src, dst, either) = match transport {
                    Proto::Udp => (Field::UdpSrcPort, Field::UdpDstPort, Field::UdpPort),
                    Proto::Sctp => (Field::SctpSrcPort, Field::SctpDstPort, Field::SctpPort),
                    _ => (Field::TcpSrcPort, Field::TcpDstPort, Field::TcpPort),
                };
                match dir {
                    Dir::SrcOrDst => leaf(either),
                    Dir::Src => leaf(src),
                    Dir::Dst => leaf(dst),
                    Dir::SrcAndDst => Expr::And(vec![leaf(src), leaf(dst)]),
                }
            })
            .collect();
        let ports = Expr::or(per_transport);
        Ok(match proto {
            Some(Proto::Ip) => Expr::And(vec![Expr::Exists(Field::Ip), ports]),
            Some(Proto::Ip6) => Expr::And(vec![Expr::Exists(Field::Ipv6), ports]),
            _ => ports,
        })
    }

    fn port_number(&self, id: Token<'_>, text: &str) -> Result<u64, ParseError> {
        if !text.is_empty() && !starts_with_digit(text) {
            return Err(self.error_at(
                id,
                format!("port names such as \"{text}\" are not resolved; use the port number"),
            ));
        }
        let value = parse_uint(text).map_err(|message| self.error_at(id, message))?;
        if value > u64::from(u16::MAX) {
            return Err(self.error_at(id, format!("port {value} is larger than 65535")));
        }
        Ok(value)
    }
}

fn build(op: Option<Logical>, operands: Vec<Expr>) -> Expr {
    match op {
        Some(Logical::And) => Expr::and(operands),
        _ => Expr::or(operands),
    }
}

fn starts_with_digit(text: &str) -> bool {
    text.starts_with(|c: char| c.is_ascii_digit())
}

fn compare(field: Field, op: CmpOp, value: Literal) -> Expr {
    Expr::Compare(Comparison::new(
        FieldRef { field, mask: None },
        Quantifier::Any,
        op,
        value,
    ))
}

/// Returns the test for IP protocol `number` in IPv4 (`Some(Ip)`), IPv6
/// (`Some(Ip6)`) or either (`None`).
fn ip_protocol(family: Option<Proto>, number: u64) -> Expr {
    let v4 = Expr::eq(Field::IpProto, Literal::UInt(number));
    let v6 = Expr::eq(Field::Ipv6Nxt, Literal::UInt(number));
    match family {
        Some(Proto::Ip) => v4,
        Some(Proto::Ip6) => v6,
        _ => Expr::Or(vec![v4, v6]),
    }
}

fn by_direction(dir: Dir, src: Field, dst: Field, either: Field, value: Literal) -> Expr {
    match dir {
        Dir::SrcOrDst => Expr::eq(either, value),
        Dir::Src => Expr::eq(src, value),
        Dir::Dst => Expr::eq(dst, value),
        Dir::SrcAndDst => Expr::And(vec![Expr::eq(src, value), Expr::eq(dst, value)]),
    }
}

/// Reads libpcap's network shorthand: `10` is 10.0.0.0/8, `10.64` is 10.64.0.0/16,
/// `10.64.88` is 10.64.88.0/24. Returns the network and whether host bits are set
/// (never, for the shorthand).
fn partial_ipv4(text: &str) -> Option<(Literal, bool)> {
    let parts: Vec<&str> = text.split('.').collect();
    if parts.is_empty() || parts.len() > 3 {
        return None;
    }
    let mut octets = [0u8; 4];
    for (octet, part) in octets.iter_mut().zip(&parts) {
        if part.is_empty() || part.len() > 3 || !part.chars().all(|c| c.is_ascii_digit()) {
            return None;
        }
        *octet = part.parse().ok()?;
    }
    let prefix_len = u8::try_from(parts.len() * 8).ok()?;
    Some((
        Literal::Ipv4 {
            addr: Ipv4Addr::from(octets),
            prefix_len,
        },
        false,
    ))
}
