//! The typed filter tree: fields resolved to [`Field`], literals checked against
//! the field's type, so that evaluating a tree cannot fail.
//!
//! Both syntaxes (Wireshark display filters and tcpdump primitives) parse into
//! this one tree. Its `Display` is the canonical, fully parenthesised Wireshark
//! form, which parses back to the same tree.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

pub use crate::fields::{FIELDS, Field, FieldDef};

/// The type of a field's values, which decides the literals and operators it accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldType {
    /// A protocol: can only be tested for presence.
    Protocol,
    /// A flag: `1`/`0`, `true`/`false` (any non-zero integer is true, as in Wireshark).
    Bool,
    /// An unsigned integer no greater than `max`.
    UInt {
        /// The largest value the field can hold.
        max: u64,
    },
    /// An IPv4 address (a CIDR network on the right of `==`/`!=`/`in`).
    Ipv4,
    /// An IPv6 address (a CIDR network on the right of `==`/`!=`/`in`).
    Ipv6,
    /// A 48-bit MAC address.
    Mac,
    /// An IPv4 or IPv6 address (an IPv4 literal stands for its IPv4-mapped
    /// IPv6 form, `::ffff:a.b.c.d`).
    Addr,
    /// A Community ID, `"1:"` and 28 base64 characters (compared with `==`, `!=`).
    CommunityId,
}

/// Other names accepted for a field: older Wireshark names.
pub const FIELD_ALIASES: &[(&str, Field)] = &[("tcp.flags.ns", Field::TcpFlagsAe)];

impl Field {
    /// Returns the field named `name` (canonical name or alias), if any.
    pub fn from_name(name: &str) -> Option<Self> {
        FIELDS
            .iter()
            .map(|def| (def.name, def.field))
            .chain(FIELD_ALIASES.iter().copied())
            .find(|(known, _)| *known == name)
            .map(|(_, field)| field)
    }

    /// Returns the canonical (Wireshark) name of the field.
    pub fn name(self) -> &'static str {
        self.def().name
    }

    /// Returns the type of the field's values.
    pub fn field_type(self) -> FieldType {
        self.def().ty
    }

    /// Returns the field of the other IP family with the same role (`ip.addr` for
    /// `ipv6.addr` and back), used to suggest a fix when the literal's family is wrong.
    pub fn other_family(self) -> Option<Self> {
        match self {
            Field::IpSrc => Some(Field::Ipv6Src),
            Field::IpDst => Some(Field::Ipv6Dst),
            Field::IpAddr => Some(Field::Ipv6Addr),
            Field::Ipv6Src => Some(Field::IpSrc),
            Field::Ipv6Dst => Some(Field::IpDst),
            Field::Ipv6Addr => Some(Field::IpAddr),
            _ => None,
        }
    }
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A literal value checked against the type of the field it is compared with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Literal {
    /// An unsigned integer.
    UInt(u64),
    /// A flag value.
    Bool(bool),
    /// An IPv4 address or, with `prefix_len` below 32, the network it starts
    /// (host bits cleared when parsed).
    Ipv4 {
        /// The address or network address.
        addr: Ipv4Addr,
        /// The CIDR prefix length, 32 for a single address.
        prefix_len: u8,
    },
    /// An IPv6 address or, with `prefix_len` below 128, a network.
    Ipv6 {
        /// The address or network address.
        addr: Ipv6Addr,
        /// The CIDR prefix length, 128 for a single address.
        prefix_len: u8,
    },
    /// A MAC address.
    Mac([u8; 6]),
    /// A Community ID's hash.
    CommunityId([u8; 20]),
}

impl Literal {
    /// Returns the inclusive range of field values the literal stands for, in the
    /// `u128` value space the evaluator uses (integers as they are, flags 0/1,
    /// IPv4 as a `u32`, IPv6 as a `u128`, MAC as a 48-bit integer).
    pub fn value_range(&self) -> (u128, u128) {
        match *self {
            Literal::UInt(value) => (u128::from(value), u128::from(value)),
            Literal::Bool(value) => (u128::from(value), u128::from(value)),
            Literal::Ipv4 { addr, prefix_len } => {
                let host_mask = low_bits_mask(32u32.saturating_sub(u32::from(prefix_len)));
                let host_mask = host_mask & u128::from(u32::MAX);
                let network = u128::from(u32::from(addr)) & !host_mask;
                (network, network | host_mask)
            }
            Literal::Ipv6 { addr, prefix_len } => {
                let host_mask = low_bits_mask(128u32.saturating_sub(u32::from(prefix_len)));
                let network = u128::from(addr) & !host_mask;
                (network, network | host_mask)
            }
            Literal::Mac(bytes) => {
                let value = bytes
                    .iter()
                    .fold(0u128, |acc, &byte| (acc << 8) | u128::from(byte));
                (value, value)
            }
            Literal::CommunityId(hash) => {
                let value = community_value(&hash);
                (value, value)
            }
        }
    }

    /// Returns true if the literal is a network (CIDR with a short prefix) rather
    /// than one value; networks cannot be ordered against.
    pub fn is_network(&self) -> bool {
        match *self {
            Literal::Ipv4 { prefix_len, .. } => prefix_len < 32,
            Literal::Ipv6 { prefix_len, .. } => prefix_len < 128,
            _ => false,
        }
    }
}

impl fmt::Display for Literal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Literal::UInt(value) => write!(f, "{value}"),
            Literal::Bool(value) => write!(f, "{}", u8::from(*value)),
            Literal::Ipv4 { addr, prefix_len } if *prefix_len >= 32 => write!(f, "{addr}"),
            Literal::Ipv4 { addr, prefix_len } => write!(f, "{addr}/{prefix_len}"),
            Literal::Ipv6 { addr, prefix_len } if *prefix_len >= 128 => write!(f, "{addr}"),
            Literal::Ipv6 { addr, prefix_len } => write!(f, "{addr}/{prefix_len}"),
            Literal::Mac(bytes) => {
                let [a, b, c, d, e, g] = bytes;
                write!(f, "{a:02x}:{b:02x}:{c:02x}:{d:02x}:{e:02x}:{g:02x}")
            }
            Literal::CommunityId(hash) => write!(
                f,
                "\"{}\"",
                hindsight_model::community::community_id_text(hash)
            ),
        }
    }
}

/// The value a Community ID hash compares as: its first 16 bytes (a collision
/// of 128 bits of SHA-1 is not a concern).
pub(crate) fn community_value(hash: &[u8; 20]) -> u128 {
    let mut first = [0u8; 16];
    first.copy_from_slice(hash.get(..16).unwrap_or(&[0; 16]));
    u128::from_be_bytes(first)
}

/// Returns a mask of the low `bits` bits (all ones from 128 up).
fn low_bits_mask(bits: u32) -> u128 {
    if bits >= 128 {
        u128::MAX
    } else {
        (1u128 << bits) - 1
    }
}

/// A comparison operator, without its any/all quantifier.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CmpOp {
    /// Equal (in the network, for a CIDR literal).
    Eq,
    /// Not equal (outside the network, for a CIDR literal).
    Ne,
    /// Less than.
    Lt,
    /// Less than or equal.
    Le,
    /// Greater than.
    Gt,
    /// Greater than or equal.
    Ge,
}

/// How a test over a field that occurs more than once combines its occurrences.
/// A test over an absent field is false under either quantifier.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Quantifier {
    /// True if some occurrence passes (Wireshark `any`, and `==`, `!==`, `<`...).
    Any,
    /// True if every occurrence passes (Wireshark `all`, and `===`, `!=`).
    All,
}

/// The left side of a test: a field, optionally masked with `& MASK`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FieldRef {
    /// The field tested.
    pub field: Field,
    /// A bit mask applied to integer values before the test (`tcp.flags & 0x12`).
    pub mask: Option<u64>,
}

impl fmt::Display for FieldRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.mask {
            Some(mask) => write!(f, "{} & 0x{mask:x}", self.field),
            None => write!(f, "{}", self.field),
        }
    }
}

/// One element of a set: a value or an inclusive range `lo..hi`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SetElement {
    /// The value, or the low end of the range.
    pub low: Literal,
    /// The high end of the range, if the element is a range.
    pub high: Option<Literal>,
}

impl SetElement {
    /// Returns the inclusive range of values the element matches; empty (low above
    /// high) when a range is written backwards, which matches nothing as in Wireshark.
    pub fn value_range(&self) -> (u128, u128) {
        let (low, low_high) = self.low.value_range();
        match &self.high {
            Some(high) => (low, high.value_range().1),
            None => (low, low_high),
        }
    }
}

impl fmt::Display for SetElement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.high {
            Some(high) => write!(f, "{}..{}", self.low, high),
            None => write!(f, "{}", self.low),
        }
    }
}

/// A field compared with a literal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Comparison {
    /// The field tested.
    pub left: FieldRef,
    /// How occurrences combine.
    pub quantifier: Quantifier,
    /// The operator.
    pub op: CmpOp,
    /// The literal, as written (normalised).
    pub value: Literal,
    /// The literal's value range, computed once ([`Literal::value_range`]).
    pub(crate) range: (u128, u128),
}

impl Comparison {
    /// Returns a comparison; the literal must already be checked against the field.
    pub fn new(left: FieldRef, quantifier: Quantifier, op: CmpOp, value: Literal) -> Self {
        Self {
            left,
            quantifier,
            op,
            value,
            range: value.value_range(),
        }
    }
}

/// A set membership test, `field in {...}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Membership {
    /// The field tested.
    pub left: FieldRef,
    /// How occurrences combine.
    pub quantifier: Quantifier,
    /// The elements, as written.
    pub elements: Vec<SetElement>,
    /// The elements' value ranges, sorted and merged, for binary search.
    pub(crate) ranges: Vec<(u128, u128)>,
}

impl Membership {
    /// Returns a membership test; the elements must already be checked against the field.
    pub fn new(left: FieldRef, quantifier: Quantifier, elements: Vec<SetElement>) -> Self {
        let mut ranges: Vec<(u128, u128)> = elements
            .iter()
            .map(SetElement::value_range)
            .filter(|(low, high)| low <= high)
            .collect();
        ranges.sort_unstable();
        let mut merged: Vec<(u128, u128)> = Vec::with_capacity(ranges.len());
        for (low, high) in ranges {
            match merged.last_mut() {
                Some(last) if low <= last.1.saturating_add(1) => last.1 = last.1.max(high),
                _ => merged.push((low, high)),
            }
        }
        Self {
            left,
            quantifier,
            elements,
            ranges: merged,
        }
    }

    /// The elements' value ranges, sorted, disjoint and merged.
    pub fn ranges(&self) -> &[(u128, u128)] {
        &self.ranges
    }
}

/// A node of the typed filter tree.
///
/// `And`, `Or` and `Xor` hold two or more operands: a chain `a && b && c` is one
/// node, so that long chains do not make the tree (and the recursion over it) deep.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expr {
    /// The field or protocol is present.
    Exists(Field),
    /// Some occurrence of the masked integer field is non-zero (`tcp.flags & 0x02`).
    BitTest(FieldRef),
    /// A comparison with a literal.
    Compare(Comparison),
    /// A set membership test.
    In(Membership),
    /// A tcpdump relation over the packet's bytes (`tcp[13] & 2 != 0`).
    Offsets(Box<crate::offsets::Relation>),
    /// A test of bytes (`tcp.payload contains "GET"`, `frame[12:2] == 81:00`).
    Bytes(Box<crate::payload::BytesTest>),
    /// A test of a connection's text field (`dns.qry.name == "example.com"`).
    Text(Box<crate::names::TextTest>),
    /// Logical negation.
    Not(Box<Expr>),
    /// All operands are true.
    And(Vec<Expr>),
    /// Some operand is true.
    Or(Vec<Expr>),
    /// An odd number of operands are true (for two operands: exactly one).
    Xor(Vec<Expr>),
}

impl Expr {
    /// Returns the conjunction of `operands`, or the operand itself if there is one.
    pub fn and(mut operands: Vec<Expr>) -> Expr {
        if operands.len() == 1
            && let Some(only) = operands.pop()
        {
            return only;
        }
        Expr::And(operands)
    }

    /// Returns true if this (sub)filter tests `field` anywhere.
    pub fn names(&self, field: Field) -> bool {
        match self {
            Expr::Exists(named) => *named == field,
            Expr::BitTest(left) => left.field == field,
            Expr::Compare(comparison) => comparison.left.field == field,
            Expr::In(membership) => membership.left.field == field,
            Expr::Offsets(_) | Expr::Bytes(_) | Expr::Text(_) => false,
            Expr::Not(inner) => inner.names(field),
            Expr::And(operands) | Expr::Or(operands) | Expr::Xor(operands) => {
                operands.iter().any(|operand| operand.names(field))
            }
        }
    }

    /// Returns the disjunction of `operands`, or the operand itself if there is one.
    pub fn or(mut operands: Vec<Expr>) -> Expr {
        if operands.len() == 1
            && let Some(only) = operands.pop()
        {
            return only;
        }
        Expr::Or(operands)
    }

    /// Returns `field == value` (any occurrence equal).
    pub fn eq(field: Field, value: Literal) -> Expr {
        Expr::Compare(Comparison::new(
            FieldRef { field, mask: None },
            Quantifier::Any,
            CmpOp::Eq,
            value,
        ))
    }

    /// Returns the depth of the tree (a leaf has depth 1).
    pub fn depth(&self) -> usize {
        match self {
            Expr::Exists(_)
            | Expr::BitTest(_)
            | Expr::Compare(_)
            | Expr::In(_)
            | Expr::Offsets(_)
            | Expr::Bytes(_)
            | Expr::Text(_) => 1,
            Expr::Not(inner) => 1 + inner.depth(),
            Expr::And(operands) | Expr::Or(operands) | Expr::Xor(operands) => {
                1 + operands.iter().map(Expr::depth).max().unwrap_or(0)
            }
        }
    }
}

impl CmpOp {
    /// Whether `a` stands in this relation to `b`.
    pub fn holds<T: Ord>(self, a: T, b: T) -> bool {
        match self {
            CmpOp::Eq => a == b,
            CmpOp::Ne => a != b,
            CmpOp::Lt => a < b,
            CmpOp::Le => a <= b,
            CmpOp::Gt => a > b,
            CmpOp::Ge => a >= b,
        }
    }

    /// The operator as written (`==`, `<=`...).
    pub fn symbol(self) -> &'static str {
        match self {
            CmpOp::Eq => "==",
            CmpOp::Ne => "!=",
            CmpOp::Lt => "<",
            CmpOp::Le => "<=",
            CmpOp::Gt => ">",
            CmpOp::Ge => ">=",
        }
    }
}

fn write_operator(f: &mut fmt::Formatter<'_>, comparison: &Comparison) -> fmt::Result {
    let symbol = match (comparison.op, comparison.quantifier) {
        (CmpOp::Eq, Quantifier::Any) => "==",
        (CmpOp::Eq, Quantifier::All) => "===",
        (CmpOp::Ne, Quantifier::All) => "!=",
        (CmpOp::Ne, Quantifier::Any) => "!==",
        (op, _) => op.symbol(),
    };
    f.write_str(symbol)
}

fn write_joined(f: &mut fmt::Formatter<'_>, operands: &[Expr], separator: &str) -> fmt::Result {
    f.write_str("(")?;
    for (index, operand) in operands.iter().enumerate() {
        if index > 0 {
            f.write_str(separator)?;
        }
        write!(f, "{operand}")?;
    }
    f.write_str(")")
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expr::Exists(field) => write!(f, "{field}"),
            Expr::BitTest(FieldRef {
                field: Field::TunnelType,
                mask: Some(mask),
            }) if let Some((name, _)) = hindsight_model::tunnel::NAMES
                .iter()
                .find(|(_, bit)| u64::from(*bit) == *mask) =>
            {
                write!(f, "tunnel.type == \"{name}\"")
            }
            Expr::BitTest(left) => write!(f, "{left}"),
            Expr::Compare(comparison) => {
                let ordering = !matches!(comparison.op, CmpOp::Eq | CmpOp::Ne);
                if ordering && comparison.quantifier == Quantifier::All {
                    f.write_str("all ")?;
                }
                write!(f, "{} ", comparison.left)?;
                write_operator(f, comparison)?;
                write!(f, " {}", comparison.value)
            }
            Expr::In(membership) => {
                if membership.quantifier == Quantifier::All {
                    f.write_str("all ")?;
                }
                write!(f, "{} in {{", membership.left)?;
                for (index, element) in membership.elements.iter().enumerate() {
                    if index > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{element}")?;
                }
                f.write_str("}")
            }
            Expr::Offsets(relation) => write!(f, "pcap_filter(\"{relation}\")"),
            Expr::Bytes(test) => write!(f, "{test}"),
            Expr::Text(test) => write!(f, "{test}"),
            Expr::Not(inner) => match inner.as_ref() {
                Expr::Exists(_)
                | Expr::Offsets(_)
                | Expr::Not(_)
                | Expr::And(_)
                | Expr::Or(_)
                | Expr::Xor(_) => {
                    write!(f, "!{inner}")
                }
                Expr::BitTest(_)
                | Expr::Compare(_)
                | Expr::In(_)
                | Expr::Bytes(_)
                | Expr::Text(_) => {
                    write!(f, "!({inner})")
                }
            },
            Expr::And(operands) => write_joined(f, operands, " && "),
            Expr::Or(operands) => write_joined(f, operands, " || "),
            Expr::Xor(operands) => write_joined(f, operands, " ^^ "),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_has_a_unique_name_that_resolves_back() {
        for def in FIELDS {
            assert_eq!(Field::from_name(def.name), Some(def.field));
            assert_eq!(def.field.name(), def.name);
        }
        assert_eq!(Field::from_name("tcp.flags.ns"), Some(Field::TcpFlagsAe));
        assert_eq!(Field::from_name("tcp.flags.nonsense"), None);
    }

    #[test]
    fn ipv4_network_literal_covers_its_hosts() {
        let literal = Literal::Ipv4 {
            addr: Ipv4Addr::new(10, 0, 0, 0),
            prefix_len: 8,
        };
        assert_eq!(literal.value_range(), (0x0a00_0000, 0x0aff_ffff));
        let any = Literal::Ipv4 {
            addr: Ipv4Addr::new(0, 0, 0, 0),
            prefix_len: 0,
        };
        assert_eq!(any.value_range(), (0, u128::from(u32::MAX)));
        let host = Literal::Ipv4 {
            addr: Ipv4Addr::new(10, 1, 2, 3),
            prefix_len: 32,
        };
        assert_eq!(host.value_range(), (0x0a01_0203, 0x0a01_0203));
    }

    #[test]
    fn ipv6_network_literal_covers_its_hosts() {
        let literal = Literal::Ipv6 {
            addr: "2001:db8::".parse().unwrap_or(Ipv6Addr::UNSPECIFIED),
            prefix_len: 32,
        };
        let (low, high) = literal.value_range();
        assert_eq!(low, 0x2001_0db8u128 << 96);
        assert_eq!(high, (0x2001_0db8u128 << 96) | (u128::MAX >> 32));
        let all = Literal::Ipv6 {
            addr: Ipv6Addr::UNSPECIFIED,
            prefix_len: 0,
        };
        assert_eq!(all.value_range(), (0, u128::MAX));
    }

    #[test]
    fn membership_merges_overlapping_and_drops_backwards_ranges() {
        let element = |low: u64, high: Option<u64>| SetElement {
            low: Literal::UInt(low),
            high: high.map(Literal::UInt),
        };
        let membership = Membership::new(
            FieldRef {
                field: Field::TcpPort,
                mask: None,
            },
            Quantifier::Any,
            vec![
                element(443, None),
                element(80, None),
                element(8000, Some(8004)),
                element(8003, Some(8010)),
                element(81, None),
                element(90, Some(80)),
            ],
        );
        assert_eq!(membership.ranges, vec![(80, 81), (443, 443), (8000, 8010)]);
    }
}
