//! Running watches over the archive's past as if it were the stream
//! (`hindsight watch --over-archive`): to try a continuous query on last
//! week before it watches the link, and as the oracle of the live path, since
//! the windows here come from SQL conditions on the stored rows, not from the
//! panes a live stream fills.

use std::collections::BTreeSet;

use hindsight_sql::SqlSession;
use hindsight_store::arrow::array::{Array, Int64Array};

use crate::{Answer, Running, WatchError, WatchSpec, nanos, timestamp};

/// Answers every window of each of `watches` that holds a packet of the
/// archive behind `session` from `[since_ns, until_ns)` (by `ts`) or a
/// connection record that ended then (by `last_ts`), in time order, watch by
/// watch. A window's live tables hold its rows within `[since_ns, until_ns)`.
pub fn rerun(
    session: &SqlSession,
    watches: Vec<WatchSpec>,
    since_ns: i64,
    until_ns: i64,
    answer: &mut dyn FnMut(Answer),
) -> Result<(), WatchError> {
    let live_error = |source| WatchError::Sql {
        name: "(live tables)".to_owned(),
        source,
    };
    crate::empty_live_tables(session)?;
    let running = watches
        .into_iter()
        .map(|spec| Running::prepare(session, spec))
        .collect::<Result<Vec<_>, _>>()?;
    for watch in &running {
        let (range, slide) = (
            nanos(watch.spec.window.range),
            nanos(watch.spec.window.slide),
        );
        let mut ends = BTreeSet::new();
        for slot in occupied(session, slide, since_ns, until_ns).map_err(live_error)? {
            let last = slot.saturating_add(range / slide);
            ends.extend((slot + 1..=last).map(|n| n.saturating_mul(slide)));
        }
        for end in ends {
            let start = end - range;
            let result = session
                .set_live_from_archive(start.max(since_ns), end.min(until_ns))
                .map(|()| watch.evaluate(session, start, end, 0));
            match result {
                Ok(result) => answer(result),
                Err(source) => {
                    return Err(WatchError::Sql {
                        name: watch.spec.name.clone(),
                        source,
                    });
                }
            }
        }
    }
    Ok(())
}

/// The slots of `slide` (`ts / slide`) that hold a packet or the end of a
/// connection record in `[since_ns, until_ns)`.
fn occupied(
    session: &SqlSession,
    slide: i64,
    since_ns: i64,
    until_ns: i64,
) -> Result<BTreeSet<i64>, hindsight_sql::SqlError> {
    let batches = session.collect_with(
        "SELECT DISTINCT CAST(ts AS BIGINT) / :slide AS slot FROM packets \
         WHERE ts >= :since AND ts < :until \
         UNION SELECT DISTINCT CAST(last_ts AS BIGINT) / :slide AS slot FROM flows \
         WHERE last_ts >= :since AND last_ts < :until AND ts < :until",
        &[
            ("slide", hindsight_sql::ScalarValue::Int64(Some(slide))),
            ("since", timestamp(since_ns)),
            ("until", timestamp(until_ns)),
        ],
        None,
    )?;
    let mut slots = BTreeSet::new();
    for batch in &batches {
        if let Some(column) = batch.column(0).as_any().downcast_ref::<Int64Array>() {
            slots.extend(
                (0..column.len())
                    .filter(|&i| column.is_valid(i))
                    .map(|i| column.value(i)),
            );
        }
    }
    Ok(slots)
}
