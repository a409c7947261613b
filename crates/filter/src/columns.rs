//! The columns of the `packets` table a filter reads, so a search decodes only
//! those (and what its output needs) instead of every header column.

use std::collections::BTreeSet;

use hindsight_model::col;

use super::Filter;
use super::ast::Expr;

/// Columns every evaluation may read: the layer tests (`Layers::of`: version,
/// protocol, decode status), ARP detection (`eth_type`), the addresses, the time.
const BASE: &[&str] = &[
    col::TS,
    col::STATUS,
    col::IP_VERSION,
    col::IP_PROTO,
    col::ETH_TYPE,
    col::SRC_ADDR,
    col::DST_ADDR,
];

fn collect(expr: &Expr, into: &mut BTreeSet<&'static str>) {
    match expr {
        Expr::Exists(field) => into.extend(field.def().columns()),
        Expr::BitTest(left) => into.extend(left.field.def().columns()),
        Expr::Compare(comparison) => into.extend(comparison.left.field.def().columns()),
        Expr::In(membership) => into.extend(membership.left.field.def().columns()),
        Expr::Offsets(_) | Expr::Bytes(_) => {
            into.extend(col::FRAME);
            into.extend([col::LINK_TYPE, col::CAP_LEN, col::WIRE_LEN]);
        }
        // A connection's field: a packet query reads the packets of the
        // connections found, by their addresses and ports (in BASE).
        Expr::Text(_) => {}
        Expr::Not(inner) => collect(inner, into),
        Expr::And(operands) | Expr::Or(operands) | Expr::Xor(operands) => {
            for operand in operands {
                collect(operand, into);
            }
        }
    }
}

impl Filter {
    /// Returns the `packets` columns evaluating this filter may read.
    pub fn columns(&self) -> BTreeSet<&'static str> {
        let mut columns: BTreeSet<&'static str> = BASE.iter().copied().collect();
        if let Some(root) = self.root() {
            collect(root, &mut columns);
        }
        columns
    }
}
