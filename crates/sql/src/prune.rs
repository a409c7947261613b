//! What a statement's conditions on the `packets` table promise about the rows it can
//! match: a time range (from conditions on `ts`) and address ranges (from conditions on
//! `src_addr`/`dst_addr`), each a conservative superset used to skip whole segments.

use datafusion::common::ScalarValue;
use datafusion::logical_expr::{Between, BinaryExpr, Expr, Operator, expr::InList};
use hindsight_model::Addr16;
use hindsight_store::TimeRange;
use hindsight_store::schema::col;

/// The time range every row matching all `filters` lies in.
pub fn time_range(filters: &[Expr]) -> TimeRange {
    let mut range = TimeRange::ALL;
    for filter in filters {
        for conjunct in conjuncts(filter) {
            narrow_time(conjunct, &mut range);
        }
    }
    range
}

/// Address ranges such that every row matching all `filters` has its source or
/// destination in each returned set; one set per constraining conjunct. Empty when
/// no condition constrains addresses.
pub fn address_sets(filters: &[Expr]) -> Vec<Vec<(Addr16, Addr16)>> {
    filters
        .iter()
        .flat_map(conjuncts)
        .filter_map(address_set)
        .collect()
}

fn conjuncts(expr: &Expr) -> Vec<&Expr> {
    match expr {
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::And,
            right,
        }) => {
            let mut all = conjuncts(left);
            all.extend(conjuncts(right));
            all
        }
        other => vec![other],
    }
}

fn is_column(expr: &Expr, name: &str) -> bool {
    matches!(expr, Expr::Column(column) if column.name == name)
}

fn literal(expr: &Expr) -> Option<&ScalarValue> {
    match expr {
        Expr::Literal(value, _) => Some(value),
        _ => None,
    }
}

fn timestamp_nanos(value: &ScalarValue) -> Option<i64> {
    match value {
        ScalarValue::TimestampNanosecond(Some(v), _) => Some(*v),
        ScalarValue::TimestampMicrosecond(Some(v), _) => v.checked_mul(1_000),
        ScalarValue::TimestampMillisecond(Some(v), _) => v.checked_mul(1_000_000),
        ScalarValue::TimestampSecond(Some(v), _) => v.checked_mul(1_000_000_000),
        _ => None,
    }
}

/// Mirrors `lit op column` into `column op' lit`.
fn flip(op: Operator) -> Operator {
    match op {
        Operator::Lt => Operator::Gt,
        Operator::LtEq => Operator::GtEq,
        Operator::Gt => Operator::Lt,
        Operator::GtEq => Operator::LtEq,
        other => other,
    }
}

/// `(column op literal)` with the column named `name`, normalized to that order.
fn comparison<'a>(expr: &'a Expr, name: &str) -> Option<(Operator, &'a ScalarValue)> {
    let Expr::BinaryExpr(BinaryExpr { left, op, right }) = expr else {
        return None;
    };
    if is_column(left, name) {
        literal(right).map(|value| (*op, value))
    } else if is_column(right, name) {
        literal(left).map(|value| (flip(*op), value))
    } else {
        None
    }
}

fn narrow_time(expr: &Expr, range: &mut TimeRange) {
    if let Expr::Between(Between {
        expr,
        negated: false,
        low,
        high,
    }) = expr
        && is_column(expr, col::TS)
    {
        if let Some(low) = literal(low).and_then(timestamp_nanos) {
            range.start_nanos = range.start_nanos.max(low);
        }
        if let Some(high) = literal(high).and_then(timestamp_nanos) {
            range.end_nanos = range.end_nanos.min(high);
        }
        return;
    }
    let Some((op, value)) = comparison(expr, col::TS) else {
        return;
    };
    let Some(nanos) = timestamp_nanos(value) else {
        return;
    };
    match op {
        Operator::Eq => {
            range.start_nanos = range.start_nanos.max(nanos);
            range.end_nanos = range.end_nanos.min(nanos);
        }
        Operator::Gt => range.start_nanos = range.start_nanos.max(nanos.saturating_add(1)),
        Operator::GtEq => range.start_nanos = range.start_nanos.max(nanos),
        Operator::Lt => range.end_nanos = range.end_nanos.min(nanos.saturating_sub(1)),
        Operator::LtEq => range.end_nanos = range.end_nanos.min(nanos),
        _ => {}
    }
}

fn addr_value(value: &ScalarValue) -> Option<Addr16> {
    match value {
        ScalarValue::FixedSizeBinary(16, Some(bytes)) => {
            <[u8; 16]>::try_from(bytes.as_slice()).ok().map(Addr16)
        }
        _ => None,
    }
}

fn is_address_column(expr: &Expr) -> bool {
    is_column(expr, col::SRC_ADDR) || is_column(expr, col::DST_ADDR)
}

/// The addresses a single condition pins the source or destination to, if it does:
/// `src_addr = A`, `dst_addr IN (A, B)`, `src_addr BETWEEN A AND B`; a disjunction of
/// such conditions unions their sets, and any other disjunct makes it unconstraining.
fn address_set(expr: &Expr) -> Option<Vec<(Addr16, Addr16)>> {
    match expr {
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::Or,
            right,
        }) => {
            let mut set = address_set(left)?;
            set.extend(address_set(right)?);
            Some(set)
        }
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::Eq,
            right,
        }) => {
            let value = if is_address_column(left) {
                literal(right)
            } else if is_address_column(right) {
                literal(left)
            } else {
                None
            }?;
            let addr = addr_value(value)?;
            Some(vec![(addr, addr)])
        }
        Expr::InList(InList {
            expr,
            list,
            negated: false,
        }) if is_address_column(expr) => list
            .iter()
            .map(|item| literal(item).and_then(addr_value).map(|a| (a, a)))
            .collect(),
        Expr::Between(Between {
            expr,
            negated: false,
            low,
            high,
        }) if is_address_column(expr) => {
            let low = literal(low).and_then(addr_value)?;
            let high = literal(high).and_then(addr_value)?;
            Some(vec![(low, high)])
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use datafusion::prelude::{col as column, lit};

    use super::*;

    fn addr(text: &str) -> Addr16 {
        Addr16::from(text.parse::<std::net::IpAddr>().unwrap())
    }

    fn addr_lit(text: &str) -> Expr {
        lit(ScalarValue::FixedSizeBinary(
            16,
            Some(addr(text).0.to_vec()),
        ))
    }

    fn ts(nanos: i64) -> Expr {
        lit(ScalarValue::TimestampNanosecond(
            Some(nanos),
            Some("UTC".into()),
        ))
    }

    #[test]
    fn time_conditions_narrow_the_range() {
        let filters = [column("ts").gt_eq(ts(100)).and(column("ts").lt(ts(200)))];
        assert_eq!(
            time_range(&filters),
            TimeRange {
                start_nanos: 100,
                end_nanos: 199
            }
        );
        let flipped = [ts(150).lt(column("ts"))];
        assert_eq!(time_range(&flipped).start_nanos, 151);
        // An OR of time conditions promises nothing.
        let or = [column("ts").lt(ts(5)).or(column("ts").gt(ts(10)))];
        assert_eq!(time_range(&or), TimeRange::ALL);
    }

    #[test]
    fn address_conditions_give_sets() {
        let a = addr("10.0.0.1");
        let b = addr("2001:db8::1");
        let either = column("src_addr")
            .eq(addr_lit("10.0.0.1"))
            .or(column("dst_addr").eq(addr_lit("2001:db8::1")));
        assert_eq!(address_sets(&[either]), vec![vec![(a, a), (b, b)]]);
        // A disjunct that does not pin an address makes the whole OR unconstraining.
        let loose = column("src_addr")
            .eq(addr_lit("10.0.0.1"))
            .or(column("src_port").eq(lit(80u16)));
        assert!(address_sets(&[loose]).is_empty());
        let listed = column("dst_addr").in_list(vec![addr_lit("10.0.0.1")], false);
        assert_eq!(address_sets(&[listed]), vec![vec![(a, a)]]);
        let negated = column("dst_addr").in_list(vec![addr_lit("10.0.0.1")], true);
        assert!(address_sets(&[negated]).is_empty());
    }
}
