//! A packet filter (`hindsight_filter`) as a DataFusion expression over the
//! `packets` table's columns, so that an aggregation over a filter (the API's
//! histogram) runs on the columnar path SQL takes: only the columns the filter
//! names are decoded, and it is evaluated a batch at a time.
//!
//! The expression means what the filter's own evaluator means (`eval.rs` of
//! the filter crate): a field is present only where its layer is (a port only
//! in a packet whose transport it is, an IPv4 field only in IPv4, no transport
//! in a non-first fragment), a test of an absent field is false under either
//! quantifier, and every leaf is a non-null boolean, so negation is plain.
//! Filters reading what the columns do not hold (packet bytes, payload,
//! application names, Community IDs, tcpdump's `len`) have no expression; they
//! take the row path.

use datafusion::arrow::datatypes::DataType;
use datafusion::common::ScalarValue;
use datafusion::logical_expr::{Expr as DfExpr, Operator, binary_expr, cast, col, lit};
use hindsight_filter::Filter;
use hindsight_filter::ast::{CmpOp, Expr, Field, FieldRef, Quantifier};
use hindsight_filter::fields::{ColumnKind, Layer, Read};
use hindsight_model::{DecodeStatus, col as column, ethertype};

/// The most ranges of a set (`port in {...}`) written out as comparisons;
/// a larger set takes the row path.
const MAX_SET_RANGES: usize = 256;

/// A filter translated for the columnar path.
#[derive(Clone, Debug)]
pub struct ColumnarFilter {
    expr: DfExpr,
    match_all: bool,
}

impl ColumnarFilter {
    /// The expression of `filter`, or `None` if it reads what the header
    /// columns do not hold. The addresses every match lies in
    /// ([`Filter::address_ranges`]) are added as a condition the table's
    /// pruning by address postings and statistics understands.
    pub fn of(filter: &Filter) -> Option<Self> {
        let Some(root) = filter.root() else {
            return Some(Self {
                expr: lit(true),
                match_all: true,
            });
        };
        let mut expr = translate(root)?;
        if let Some(ranges) = filter.address_ranges() {
            let either = ranges
                .iter()
                .flat_map(|(low, high)| {
                    [column::SRC_ADDR, column::DST_ADDR].map(|name| {
                        col(name).between(lit(addr_scalar(low.0)), lit(addr_scalar(high.0)))
                    })
                })
                .reduce(DfExpr::or);
            if let Some(either) = either {
                expr = either.and(expr);
            }
        }
        Some(Self {
            expr,
            match_all: false,
        })
    }

    /// Whether the filter matches every packet.
    pub fn is_match_all(&self) -> bool {
        self.match_all
    }

    /// The expression.
    pub fn expr(&self) -> &DfExpr {
        &self.expr
    }
}

fn addr_scalar(bytes: [u8; 16]) -> ScalarValue {
    ScalarValue::FixedSizeBinary(16, Some(bytes.to_vec()))
}

fn translate(expr: &Expr) -> Option<DfExpr> {
    Some(match expr {
        Expr::Exists(field) => exists(*field)?,
        Expr::BitTest(left) => occurrences(left)?
            .into_iter()
            .map(|occ| {
                let zero = occ.scalar(0)?;
                Some(occ.present.and(occ.value.not_eq(lit(zero))))
            })
            .collect::<Option<Vec<_>>>()?
            .into_iter()
            .reduce(DfExpr::or)
            .unwrap_or(lit(false)),
        Expr::Compare(comparison) => {
            let (low, high) = comparison.value.value_range();
            let op = comparison.op;
            quantify(&comparison.left, comparison.quantifier, &|occ| {
                occ.compare(op, low, high)
            })?
        }
        Expr::In(membership) => {
            let ranges = membership.ranges();
            if ranges.len() > MAX_SET_RANGES {
                return None;
            }
            quantify(&membership.left, membership.quantifier, &|occ| {
                occ.within(ranges)
            })?
        }
        Expr::Offsets(_) | Expr::Bytes(_) | Expr::Text(_) => return None,
        Expr::Not(inner) => !translate(inner)?,
        Expr::And(operands) => combine(operands, DfExpr::and)?,
        Expr::Or(operands) => combine(operands, DfExpr::or)?,
        Expr::Xor(operands) => combine(operands, |a, b| binary_expr(a, Operator::NotEq, b))?,
    })
}

fn combine(operands: &[Expr], join: impl Fn(DfExpr, DfExpr) -> DfExpr) -> Option<DfExpr> {
    operands
        .iter()
        .map(translate)
        .collect::<Option<Vec<_>>>()?
        .into_iter()
        .reduce(join)
}

/// A test over a field's occurrences: some passes (`Any`), or there is one and
/// all present pass (`All`).
fn quantify(
    left: &FieldRef,
    quantifier: Quantifier,
    test: &dyn Fn(&Occurrence) -> Option<DfExpr>,
) -> Option<DfExpr> {
    let occurrences = occurrences(left)?;
    let tests = occurrences
        .iter()
        .map(|occ| Some((occ.present.clone(), test(occ)?)))
        .collect::<Option<Vec<_>>>()?;
    Some(match quantifier {
        Quantifier::Any => tests
            .into_iter()
            .map(|(present, test)| present.and(test))
            .reduce(DfExpr::or)
            .unwrap_or(lit(false)),
        Quantifier::All => {
            let some = tests
                .iter()
                .map(|(present, _)| present.clone())
                .reduce(DfExpr::or)
                .unwrap_or(lit(false));
            tests
                .into_iter()
                .map(|(present, test)| (!present).or(test))
                .fold(some, DfExpr::and)
        }
    })
}

/// How a field's values are held, and so how a literal of the filter's `u128`
/// value space is written against them.
#[derive(Clone, Copy, Debug)]
enum Kind {
    UInt8,
    UInt16,
    UInt32,
    UInt64,
    /// An IPv4 address in its IPv4-mapped 16-byte form, compared by its low 32 bits.
    Ipv4,
    /// A 16-byte address, compared as a 128-bit integer.
    Addr,
    /// A 6-byte MAC, compared as a 48-bit integer.
    Mac,
}

impl Kind {
    fn max(self) -> u128 {
        match self {
            Kind::UInt8 => u128::from(u8::MAX),
            Kind::UInt16 => u128::from(u16::MAX),
            Kind::UInt32 | Kind::Ipv4 => u128::from(u32::MAX),
            Kind::UInt64 => u128::from(u64::MAX),
            Kind::Addr => u128::MAX,
            Kind::Mac => (1 << 48) - 1,
        }
    }

    /// `value` as the column's type; `value` is at most [`Self::max`].
    fn scalar(self, value: u128) -> ScalarValue {
        match self {
            Kind::UInt8 => ScalarValue::UInt8(Some(value as u8)),
            Kind::UInt16 => ScalarValue::UInt16(Some(value as u16)),
            Kind::UInt32 => ScalarValue::UInt32(Some(value as u32)),
            Kind::UInt64 => ScalarValue::UInt64(Some(value as u64)),
            Kind::Ipv4 => {
                let mut bytes = [0u8; 16];
                bytes[10] = 0xff;
                bytes[11] = 0xff;
                bytes[12..].copy_from_slice(&(value as u32).to_be_bytes());
                addr_scalar(bytes)
            }
            Kind::Addr => addr_scalar(value.to_be_bytes()),
            Kind::Mac => ScalarValue::FixedSizeBinary(6, Some(value.to_be_bytes()[10..].to_vec())),
        }
    }
}

/// One occurrence of a field in a packet: its value, and whether the packet
/// has it (a non-null boolean that implies the value is not null).
struct Occurrence {
    value: DfExpr,
    present: DfExpr,
    kind: Kind,
}

impl Occurrence {
    fn scalar(&self, value: u128) -> Option<ScalarValue> {
        (value <= self.kind.max()).then(|| self.kind.scalar(value))
    }

    /// The value against a literal's range `low..=high`, as the evaluator
    /// compares (ordering operators against `low`); literals beyond the
    /// column's type decide the test alone.
    fn compare(&self, op: CmpOp, low: u128, high: u128) -> Option<DfExpr> {
        let max = self.kind.max();
        let value = || self.value.clone();
        let at = |v: u128| self.scalar(v).map(lit);
        Some(match op {
            CmpOp::Eq if low > max || low > high => lit(false),
            CmpOp::Eq if low == high => value().eq(at(low)?),
            CmpOp::Eq => value().between(at(low)?, at(high.min(max))?),
            CmpOp::Ne if low > max || low > high => lit(true),
            CmpOp::Ne if high >= max => value().lt(at(low)?),
            CmpOp::Ne => value().lt(at(low)?).or(value().gt(at(high)?)),
            CmpOp::Lt if low > max => lit(true),
            CmpOp::Lt => value().lt(at(low)?),
            CmpOp::Le if low >= max => lit(true),
            CmpOp::Le => value().lt_eq(at(low)?),
            CmpOp::Gt if low >= max => lit(false),
            CmpOp::Gt => value().gt(at(low)?),
            CmpOp::Ge if low > max => lit(false),
            CmpOp::Ge => value().gt_eq(at(low)?),
        })
    }

    /// The value in one of the sorted, disjoint `ranges`.
    fn within(&self, ranges: &[(u128, u128)]) -> Option<DfExpr> {
        let max = self.kind.max();
        let mut singles = Vec::new();
        let mut spans = Vec::new();
        for &(low, high) in ranges.iter().filter(|(low, _)| *low <= max) {
            let high = high.min(max);
            if low == high {
                singles.push(lit(self.scalar(low)?));
            } else {
                spans.push(
                    self.value
                        .clone()
                        .between(lit(self.scalar(low)?), lit(self.scalar(high)?)),
                );
            }
        }
        if !singles.is_empty() {
            spans.push(self.value.clone().in_list(singles, false));
        }
        Some(spans.into_iter().reduce(DfExpr::or).unwrap_or(lit(false)))
    }
}

fn u8_is(name: &str, value: u8) -> DfExpr {
    known(name, col(name).eq(lit(value)))
}

/// `test` of column `name`, false (not null) where the column is null: SQL's
/// `false AND NULL` is false.
fn known(name: &str, test: DfExpr) -> DfExpr {
    col(name).is_not_null().and(test)
}

fn ipv4() -> DfExpr {
    u8_is(column::IP_VERSION, 4)
}

fn ipv6() -> DfExpr {
    u8_is(column::IP_VERSION, 6)
}

/// The packet's transport is `proto`: IPv4 or IPv6, not a non-first fragment.
fn transport(proto: u8) -> DfExpr {
    ipv4()
        .or(ipv6())
        .and(u8_is(column::IP_PROTO, proto))
        .and(col(column::STATUS).not_eq(lit(DecodeStatus::Fragment as u8)))
}

fn has_eth() -> DfExpr {
    col(column::ETH_SRC)
        .is_not_null()
        .or(col(column::ETH_DST).is_not_null())
}

fn is_arp() -> DfExpr {
    known(
        column::ETH_TYPE,
        col(column::ETH_TYPE).eq(lit(ethertype::ARP)),
    )
}

/// The address column holds an IPv4-mapped address.
fn is_v4(name: &str) -> DfExpr {
    known(
        name,
        col(name).between(
            lit(Kind::Ipv4.scalar(0)),
            lit(Kind::Ipv4.scalar(u128::from(u32::MAX))),
        ),
    )
}

fn has_tunnel(bits: u16) -> DfExpr {
    known(
        column::TUNNEL,
        binary_expr(col(column::TUNNEL), Operator::BitwiseAnd, lit(bits)).not_eq(lit(0u16)),
    )
}

/// Whether the packet has the layer.
fn layer(layer: Layer) -> DfExpr {
    match layer {
        Layer::Frame => lit(true),
        Layer::Eth => has_eth(),
        Layer::Vlan => col(column::VLAN_OUTER).is_not_null(),
        Layer::Ipv4 => ipv4(),
        Layer::Ipv6 => ipv6(),
        Layer::Ip => ipv4().or(ipv6()),
        Layer::Arp => is_arp(),
        Layer::Transport(proto) => transport(proto),
        Layer::Ipv4Transport(proto) => ipv4().and(transport(proto)),
        Layer::Ipv6Transport(proto) => ipv6().and(transport(proto)),
        Layer::Tunnel(bits) => has_tunnel(bits),
    }
}

/// Whether the packet has the field or protocol.
fn exists(field: Field) -> Option<DfExpr> {
    let def = field.def();
    if def.reads.is_empty() {
        return Some(layer(def.layer));
    }
    Some(
        occurrences(&FieldRef { field, mask: None })?
            .into_iter()
            .map(|occ| occ.present)
            .reduce(DfExpr::or)
            .unwrap_or(lit(false)),
    )
}

impl Kind {
    /// The kind of a column's values as read (a flag as 0 or 1).
    fn of(kind: ColumnKind) -> Self {
        match kind {
            ColumnKind::U8 | ColumnKind::Bool => Kind::UInt8,
            ColumnKind::U16 => Kind::UInt16,
            ColumnKind::U32 => Kind::UInt32,
            ColumnKind::U64 => Kind::UInt64,
            ColumnKind::Mac => Kind::Mac,
            ColumnKind::Addr => Kind::Addr,
        }
    }
}

/// One occurrence read as `read` declares, where the packet has `present`
/// (its field's layer); `None` for what the columns do not hold as an
/// integer (a Community ID, a bit of a MAC).
fn occurrence(read: Read, present: DfExpr) -> Option<Occurrence> {
    Some(match read {
        Read::Value(column) => Occurrence {
            value: match column.kind {
                ColumnKind::Bool => cast(col(column.name), DataType::UInt8),
                _ => col(column.name),
            },
            present: present.and(col(column.name).is_not_null()),
            kind: Kind::of(column.kind),
        },
        Read::Ipv4(column) => Occurrence {
            value: col(column.name),
            present: present.and(is_v4(column.name)),
            kind: Kind::Ipv4,
        },
        Read::Bit(column, bits) => {
            let kind = Kind::of(column.kind);
            if matches!(kind, Kind::Mac | Kind::Addr | Kind::Ipv4) {
                return None;
            }
            let set = binary_expr(
                col(column.name),
                Operator::BitwiseAnd,
                lit(kind.scalar(u128::from(bits))),
            )
            .not_eq(lit(kind.scalar(0)));
            Occurrence {
                value: cast(set, DataType::UInt8),
                present: present.and(col(column.name).is_not_null()),
                kind: Kind::UInt8,
            }
        }
        Read::TunnelId(bits) => Occurrence {
            value: binary_expr(
                col(column::TUNNEL_ID),
                Operator::BitwiseAnd,
                lit(u64::from(u32::MAX)),
            ),
            present: present.and(known(
                column::TUNNEL_ID,
                binary_expr(
                    binary_expr(
                        col(column::TUNNEL_ID),
                        Operator::BitwiseShiftRight,
                        lit(32u64),
                    ),
                    Operator::BitwiseAnd,
                    lit(u64::from(bits)),
                )
                .not_eq(lit(0u64)),
            )),
            kind: Kind::UInt64,
        },
        Read::CommunityId => return None,
    })
}

/// The occurrences of a field, masked if the test masks them; `None` for a
/// field the columns do not hold or a mask on an address.
fn occurrences(left: &FieldRef) -> Option<Vec<Occurrence>> {
    let def = left.field.def();
    let mut values = def
        .reads
        .iter()
        .map(|&read| occurrence(read, layer(def.layer)))
        .collect::<Option<Vec<_>>>()?;
    if let Some(mask) = left.mask {
        for occ in &mut values {
            let mask = match occ.kind {
                Kind::UInt8 => ScalarValue::UInt8(Some(mask as u8)),
                Kind::UInt16 => ScalarValue::UInt16(Some(mask as u16)),
                Kind::UInt32 => ScalarValue::UInt32(Some(mask as u32)),
                Kind::UInt64 => ScalarValue::UInt64(Some(mask)),
                Kind::Ipv4 | Kind::Addr | Kind::Mac => return None,
            };
            occ.value = binary_expr(occ.value.clone(), Operator::BitwiseAnd, lit(mask));
        }
    }
    Some(values)
}
