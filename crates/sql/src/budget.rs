//! One budget for the operators of every statement the process runs: each
//! statement's pool (`max_memory_mib`) reserves from it as well, so however
//! many statements run at once (the API's, a cluster's fragments, every
//! watch's windows) their sorts, joins and aggregations together reserve at
//! most the budget. A reservation past it is refused as DataFusion refuses
//! one past a statement's own pool: the statement ends with "Resources
//! exhausted", which the API answers with 400 and the bound's name.
//!
//! The budget is the process's, set once by the program that runs the
//! statements (`serve`'s `[api] max_total_memory_mib`); without one, each
//! statement has only its own pool.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use datafusion::common::{DataFusionError, Result};
use datafusion::execution::memory_pool::{
    MemoryConsumer, MemoryLimit, MemoryPool, MemoryReservation,
};

/// What the statements of the process may reserve together, and have.
#[derive(Debug)]
pub struct Budget {
    limit: usize,
    used: AtomicUsize,
}

impl Budget {
    /// Bytes reserved now by every statement.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// The budget, bytes.
    pub fn limit(&self) -> usize {
        self.limit
    }
}

static BUDGET: RwLock<Option<Arc<Budget>>> = RwLock::new(None);

/// Sets the process's budget to `bytes` (`None`: none) for the sessions made
/// from now on.
pub fn set_process_memory(bytes: Option<usize>) {
    let budget = bytes.map(|limit| {
        Arc::new(Budget {
            limit,
            used: AtomicUsize::new(0),
        })
    });
    *BUDGET
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = budget;
}

/// The process's budget, if one is set.
pub fn process_memory() -> Option<Arc<Budget>> {
    BUDGET
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone()
}

/// A statement's pool that reserves from the process's budget as well.
#[derive(Debug)]
pub(crate) struct Budgeted {
    pub(crate) inner: Arc<dyn MemoryPool>,
    pub(crate) budget: Arc<Budget>,
}

impl std::fmt::Display for Budgeted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} within the process's {} MiB",
            self.inner,
            self.budget.limit >> 20
        )
    }
}

impl MemoryPool for Budgeted {
    fn name(&self) -> &str {
        "budgeted"
    }

    fn register(&self, consumer: &MemoryConsumer) {
        self.inner.register(consumer);
    }

    fn unregister(&self, consumer: &MemoryConsumer) {
        self.inner.unregister(consumer);
    }

    fn grow(&self, reservation: &MemoryReservation, additional: usize) {
        self.budget.used.fetch_add(additional, Ordering::Relaxed);
        self.inner.grow(reservation, additional);
    }

    fn shrink(&self, reservation: &MemoryReservation, shrink: usize) {
        self.inner.shrink(reservation, shrink);
        self.budget.used.fetch_sub(shrink, Ordering::Relaxed);
    }

    fn try_grow(&self, reservation: &MemoryReservation, additional: usize) -> Result<()> {
        let budget = &self.budget;
        let taken = budget
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(additional)
                    .filter(|total| *total <= budget.limit)
            });
        if let Err(used) = taken {
            return Err(DataFusionError::ResourcesExhausted(format!(
                "the server's statements together may reserve {} MiB ([api] max_total_memory_mib) and {} MiB are reserved: {} more bytes for {} refused",
                budget.limit >> 20,
                used >> 20,
                additional,
                reservation.consumer().name()
            )));
        }
        if let Err(error) = self.inner.try_grow(reservation, additional) {
            budget.used.fetch_sub(additional, Ordering::Relaxed);
            return Err(error);
        }
        Ok(())
    }

    fn reserved(&self) -> usize {
        self.inner.reserved()
    }

    fn memory_limit(&self) -> MemoryLimit {
        self.inner.memory_limit()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::execution::memory_pool::{GreedyMemoryPool, UnboundedMemoryPool};

    fn pool(inner: Arc<dyn MemoryPool>, budget: &Arc<Budget>) -> Arc<dyn MemoryPool> {
        Arc::new(Budgeted {
            inner,
            budget: Arc::clone(budget),
        })
    }

    #[test]
    fn statements_together_reserve_at_most_the_budget() {
        let budget = Arc::new(Budget {
            limit: 100,
            used: AtomicUsize::new(0),
        });
        let one = pool(Arc::new(GreedyMemoryPool::new(80)), &budget);
        let two = pool(Arc::new(UnboundedMemoryPool::default()), &budget);
        let a = MemoryConsumer::new("sort").register(&one);
        let b = MemoryConsumer::new("join").register(&two);
        a.try_grow(70).unwrap();
        // Its own pool refuses, and the budget gives back what it took.
        assert!(a.try_grow(20).is_err());
        assert_eq!(budget.used(), 70);
        let refused = b.try_grow(40).unwrap_err().to_string();
        assert!(refused.contains("max_total_memory_mib"), "{refused}");
        assert!(refused.contains("join"), "{refused}");
        b.try_grow(30).unwrap();
        assert_eq!(budget.used(), 100);
        a.shrink(50);
        b.try_grow(40).unwrap();
        drop(a);
        drop(b);
        assert_eq!(budget.used(), 0);
    }
}
