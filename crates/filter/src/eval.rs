//! Evaluates a typed filter against a [`PacketRecord`], without allocating.
//!
//! Every field value is read into the one `u128` value space the literals were
//! converted to ([`Literal::value_range`](super::ast::Literal::value_range)), so a
//! comparison is an integer comparison whatever the field's type.

use hindsight_model::{AppFields, PacketRecord};

use super::Filter;
use super::ast::{CmpOp, Expr, Field, FieldRef, Quantifier};
use super::offsets::Abort;

/// What a filter says of a packet whose bytes it reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The packet passes.
    Match,
    /// The packet does not pass.
    NoMatch,
    /// The filter reads bytes the source captured that were not kept (the
    /// archive's snap length), or a layer behind a link header whose layout
    /// the byte offsets do not follow: whether it passes is not known.
    Unknown,
}

impl Filter {
    /// Returns true if `record` passes the filter. Tests of the packet's bytes
    /// (tcpdump byte offsets, payload) are false without them: use
    /// [`test`](Self::test) where the bytes are at hand.
    pub fn matches(&self, record: &PacketRecord) -> bool {
        self.root()
            .is_none_or(|root| root.matches(record, self.cx(None)))
    }

    /// Returns true if a connection passes the filter: `record` its fields as a
    /// packet of it has them, `app` its application fields.
    pub fn matches_connection(&self, record: &PacketRecord, app: Option<&AppFields>) -> bool {
        self.root()
            .is_none_or(|root| root.matches(record, self.cx(app)))
    }

    fn cx<'a>(&self, app: Option<&'a AppFields>) -> Cx<'a> {
        Cx {
            seed: self.community_seed,
            app,
        }
    }

    /// Returns true if the filter tests the packet's bytes, not only its fields.
    pub fn reads_bytes(&self) -> bool {
        self.reads_bytes
    }

    /// Returns true if a packet passes, its frame's bytes at hand (a live
    /// packet's): [`test`](Self::test) if the filter reads them, else
    /// [`matches`](Self::matches).
    pub fn passes(&self, record: &PacketRecord, frame: &[u8]) -> bool {
        match self.reads_bytes() {
            true => self.test(record, frame) == Verdict::Match,
            false => self.matches(record),
        }
    }

    /// Tests a packet with its frame's bytes (as captured, or as many as the
    /// archive kept of them, `record.cap_len` telling how many were captured).
    pub fn test(&self, record: &PacketRecord, frame: &[u8]) -> Verdict {
        match self
            .root()
            .map(|root| root.eval(record, frame, self.cx(None)))
        {
            None | Some(Ok(true)) => Verdict::Match,
            Some(Ok(false)) | Some(Err(Abort::Reject)) => Verdict::NoMatch,
            Some(Err(Abort::PastKept | Abort::Unsupported)) => Verdict::Unknown,
        }
    }
}

/// What an evaluation needs besides the packet: the Community ID seed, and
/// the connection's application fields where a connection is tested.
#[derive(Clone, Copy)]
pub(crate) struct Cx<'a> {
    seed: u16,
    app: Option<&'a AppFields>,
}

/// Returns true if the tree tests the packet's bytes, not only its fields.
pub(crate) fn reads_bytes(expr: &Expr) -> bool {
    match expr {
        Expr::Offsets(relation) => relation.reads_bytes(),
        Expr::Bytes(_) => true,
        Expr::Not(inner) => reads_bytes(inner),
        Expr::And(operands) | Expr::Or(operands) | Expr::Xor(operands) => {
            operands.iter().any(reads_bytes)
        }
        _ => false,
    }
}

impl Expr {
    /// Evaluates this (sub)filter over a packet and its bytes, left to right
    /// with short circuits, as BPF does: a rejection ends the whole filter.
    fn eval(&self, record: &PacketRecord, frame: &[u8], cx: Cx<'_>) -> Result<bool, Abort> {
        Ok(match self {
            Expr::Offsets(relation) => relation.eval(record, frame)?,
            Expr::Bytes(test) => test.eval(record, frame)?,
            Expr::Not(inner) => !inner.eval(record, frame, cx)?,
            Expr::And(operands) => {
                for operand in operands {
                    if !operand.eval(record, frame, cx)? {
                        return Ok(false);
                    }
                }
                true
            }
            Expr::Or(operands) => {
                for operand in operands {
                    if operand.eval(record, frame, cx)? {
                        return Ok(true);
                    }
                }
                false
            }
            Expr::Xor(operands) => {
                let mut odd = false;
                for operand in operands {
                    odd ^= operand.eval(record, frame, cx)?;
                }
                odd
            }
            leaf => leaf.matches(record, cx),
        })
    }

    /// Returns true if `record` passes this (sub)filter, Community IDs hashed
    /// with `seed`.
    pub(crate) fn matches(&self, record: &PacketRecord, cx: Cx<'_>) -> bool {
        match self {
            Expr::Exists(field) => is_present(*field, record),
            Expr::BitTest(left) => {
                let values = field_values(left, record, cx.seed);
                values.as_slice().iter().any(|&value| value != 0)
            }
            Expr::Compare(comparison) => {
                let values = field_values(&comparison.left, record, cx.seed);
                let (low, high) = comparison.range;
                quantify(
                    comparison.quantifier,
                    values.as_slice(),
                    |value| match comparison.op {
                        CmpOp::Eq => low <= value && value <= high,
                        CmpOp::Ne => value < low || high < value,
                        CmpOp::Lt => value < low,
                        CmpOp::Le => value <= low,
                        CmpOp::Gt => value > low,
                        CmpOp::Ge => value >= low,
                    },
                )
            }
            Expr::In(membership) => {
                let values = field_values(&membership.left, record, cx.seed);
                quantify(membership.quantifier, values.as_slice(), |value| {
                    in_ranges(&membership.ranges, value)
                })
            }
            // Without the bytes, a test of them is false; `len` needs none.
            Expr::Offsets(relation) => {
                !relation.reads_bytes() && relation.eval(record, &[]).unwrap_or(false)
            }
            Expr::Bytes(_) => false,
            Expr::Text(test) => test.matches(cx.app),
            Expr::Not(inner) => !inner.matches(record, cx),
            Expr::And(operands) => operands.iter().all(|operand| operand.matches(record, cx)),
            Expr::Or(operands) => operands.iter().any(|operand| operand.matches(record, cx)),
            Expr::Xor(operands) => operands
                .iter()
                .fold(false, |odd, operand| odd ^ operand.matches(record, cx)),
        }
    }
}

/// Applies a test to the occurrences of a field: an absent field fails either way.
fn quantify(quantifier: Quantifier, values: &[u128], test: impl Fn(u128) -> bool) -> bool {
    match quantifier {
        Quantifier::Any => values.iter().any(|&value| test(value)),
        Quantifier::All => !values.is_empty() && values.iter().all(|&value| test(value)),
    }
}

/// Returns true if `value` lies in one of the sorted, disjoint `ranges`.
fn in_ranges(ranges: &[(u128, u128)], value: u128) -> bool {
    let after = ranges.partition_point(|&(low, _)| low <= value);
    after > 0
        && ranges
            .get(after - 1)
            .is_some_and(|&(_, high)| value <= high)
}

/// Up to two occurrences of a field in one packet (`ip.addr` is source and
/// destination; `vlan.id` the outer and inner tag), held without allocating.
#[derive(Clone, Copy)]
struct Values {
    items: [u128; 2],
    len: usize,
}

impl Values {
    const NONE: Self = Self {
        items: [0; 2],
        len: 0,
    };

    /// The values that are there, the first two of them.
    fn of(values: impl Iterator<Item = Option<u128>>) -> Self {
        let mut kept = Self::NONE;
        for value in values.flatten() {
            if let Some(slot) = kept.items.get_mut(kept.len) {
                *slot = value;
                kept.len += 1;
            }
        }
        kept
    }

    fn as_slice(&self) -> &[u128] {
        self.items.get(..self.len).unwrap_or_default()
    }

    fn mask(mut self, mask: Option<u64>) -> Self {
        if let Some(mask) = mask {
            for item in &mut self.items {
                *item &= u128::from(mask);
            }
        }
        self
    }
}

/// Returns true if the packet has the field or protocol.
fn is_present(field: Field, record: &PacketRecord) -> bool {
    field.def().is_present(record)
}

/// Returns the occurrences of a field in the packet, masked if the test masks
/// them: none where the packet lacks the field's layer.
fn field_values(left: &FieldRef, record: &PacketRecord, seed: u16) -> Values {
    let def = left.field.def();
    if !def.layer.holds(record) {
        return Values::NONE;
    }
    Values::of(def.reads.iter().map(|read| read.value(record, seed))).mask(left.mask)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_ranges_finds_values_in_sorted_disjoint_ranges() {
        let ranges = [(10, 20), (30, 30), (40, 50)];
        for (value, expected) in [
            (9, false),
            (10, true),
            (20, true),
            (21, false),
            (30, true),
            (31, false),
            (45, true),
            (51, false),
        ] {
            assert_eq!(in_ranges(&ranges, value), expected, "value {value}");
        }
        assert!(!in_ranges(&[], 1));
    }

    #[test]
    fn quantifiers_are_false_on_absent_fields() {
        assert!(!quantify(Quantifier::Any, &[], |_| true));
        assert!(!quantify(Quantifier::All, &[], |_| true));
        assert!(quantify(Quantifier::All, &[1, 2], |value| value > 0));
        assert!(!quantify(Quantifier::All, &[1, 0], |value| value > 0));
        assert!(quantify(Quantifier::Any, &[1, 0], |value| value > 0));
    }
}
