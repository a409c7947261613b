//! Statements given up on that still compute, and the bound on them.
//!
//! A statement is cancelled at its deadline, when its client goes away or
//! past the resident bound by aborting its task, which stops it at its next
//! yield. Some work never yields until it is done: planning is synchronous
//! (DataFusion's planner and optimizer take time quadratic in a chain's
//! length: a `UNION ALL` of 2,000 arms plans for about 10 s, one of 4,000
//! for 40 s), and so is an operator computing one large batch. Such a
//! statement computes on after its caller has answered, holding a thread and
//! memory that no pool counts. Without a bound, a client that sends them
//! faster than they finish piles them up until the server has no core and no
//! memory left for anyone.
//!
//! So the statements given up on that still compute are counted (a guard the
//! statement's task owns ends the count when the task is dropped, which the
//! runtime does at the next yield or once the work is done), and the
//! question service refuses a client's statement or a peer's fragment while
//! [`MAX_ABANDONED`] do ([`check`]): the server answers `503` with
//! `Retry-After`, and its other questions go on.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, AtomicUsize, Ordering};

use crate::SqlError;

/// At most how many statements given up on may still compute before new
/// statements are refused: one core's worth of each of the two a small box
/// has.
pub const MAX_ABANDONED: usize = 2;

/// The count and the refusals, the process's in [`LEDGER`].
pub(crate) struct Ledger {
    abandoned: AtomicUsize,
    refused: AtomicU64,
    max: usize,
}

/// The process's ledger.
pub(crate) static LEDGER: Ledger = Ledger::new(MAX_ABANDONED);

/// How many statements given up on still compute.
pub fn abandoned() -> usize {
    LEDGER.abandoned.load(Ordering::Relaxed)
}

/// Refuses a new statement while [`MAX_ABANDONED`] given up on still compute.
/// The question service asks it before a client's statement or a peer's
/// fragment; a watch's window does not (the watches are bounded by
/// `max_watches`, and each runs one window at a time).
pub fn check() -> Result<(), SqlError> {
    LEDGER.check()
}

/// How many statements were refused because [`MAX_ABANDONED`] computed.
pub fn refused() -> u64 {
    LEDGER.refused.load(Ordering::Relaxed)
}

const RUNNING: u8 = 0;
const GIVEN_UP: u8 = 1;
const DONE: u8 = 2;

/// Owned by a statement's task: dropping it (the task ended or was dropped)
/// ends the count of a statement given up on.
pub(crate) struct Work(Arc<AtomicU8>, &'static Ledger);

/// Kept by whoever waits on the task.
pub(crate) struct Waiter(Arc<AtomicU8>, &'static Ledger);

impl Ledger {
    const fn new(max: usize) -> Self {
        Self {
            abandoned: AtomicUsize::new(0),
            refused: AtomicU64::new(0),
            max,
        }
    }

    /// The refusal of a new statement while `max` given up on still compute.
    fn check(&self) -> Result<(), SqlError> {
        let computing = self.abandoned.load(Ordering::Relaxed);
        if computing >= self.max {
            self.refused.fetch_add(1, Ordering::Relaxed);
            return Err(SqlError::Busy {
                abandoned: computing,
            });
        }
        Ok(())
    }

    /// A statement's pair: every statement run under a deadline or a cancel
    /// flag is counted once given up on.
    pub(crate) fn start(&'static self) -> (Work, Waiter) {
        let state = Arc::new(AtomicU8::new(RUNNING));
        (Work(Arc::clone(&state), self), Waiter(state, self))
    }
}

impl Waiter {
    /// The caller gives up on the statement (its task was aborted): counted
    /// until the task is dropped.
    pub(crate) fn give_up(&self) {
        // Counted first, so that a task that ends meanwhile finds it counted.
        self.1.abandoned.fetch_add(1, Ordering::Relaxed);
        if self
            .0
            .compare_exchange(RUNNING, GIVEN_UP, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            // It had already ended.
            self.1.abandoned.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl Drop for Work {
    fn drop(&mut self) {
        if self.0.swap(DONE, Ordering::AcqRel) == GIVEN_UP {
            self.1.abandoned.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_statement_given_up_on_counts_until_its_task_ends_and_past_the_bound_refuses() {
        let ledger: &'static Ledger = Box::leak(Box::new(Ledger::new(2)));
        let count = || ledger.abandoned.load(Ordering::Relaxed);
        // Given up on after it ended: not counted.
        ledger.check().unwrap();
        let (work, waiter) = ledger.start();
        drop(work);
        waiter.give_up();
        assert_eq!(count(), 0);
        // Given up on while it computes: counted until its task drops it.
        let (first, first_waiter) = ledger.start();
        first_waiter.give_up();
        assert_eq!(count(), 1);
        let (second, second_waiter) = ledger.start();
        second_waiter.give_up();
        assert_eq!(count(), 2);
        let Err(SqlError::Busy { abandoned: 2 }) = ledger.check() else {
            panic!("a third statement is admitted while two given up on compute");
        };
        assert_eq!(ledger.refused.load(Ordering::Relaxed), 1);
        drop(first);
        assert_eq!(count(), 1);
        assert!(ledger.check().is_ok());
        drop(second);
        assert_eq!(count(), 0);
    }
}
