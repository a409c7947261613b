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

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
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
        if let Some(resident) = process_resident()
            && resident.is_over()
        {
            return Err(DataFusionError::External(Box::new(OverResident(
                resident.refusal(),
            ))));
        }
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

/// The process's resident memory bound. What the operators reserve is one
/// part of what a server holds: the batches between operators, a peer's
/// answer being read, scan buffers and the allocator's free pages are not
/// reserved. So a watchdog thread reads the process's anonymous resident
/// memory every [`RESIDENT_POLL`] while statements run. Past seven eighths
/// of the bound it first gives the allocator's free pages back to the
/// kernel; if the process is still past them, it cancels every statement
/// running (their tasks are aborted, which frees what they hold) and
/// refuses reservations until the process is back under. The last eighth
/// is for what the statements allocate between two looks. What is not a
/// statement (the capture ring, the writers, the caches) is bounded by its
/// own configuration and never cancelled.
#[derive(Debug)]
pub struct Resident {
    limit: usize,
    /// Anonymous resident bytes at the last look.
    now: AtomicUsize,
    /// The most seen at a look.
    peak: AtomicUsize,
    /// Statements cancelled because the process was past the bound.
    cancelled: AtomicU64,
    over: AtomicBool,
}

impl Resident {
    /// The bound, bytes.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Anonymous resident bytes at the last look.
    pub fn now(&self) -> usize {
        self.now.load(Ordering::Relaxed)
    }

    /// The most anonymous resident bytes seen at a look.
    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::Relaxed)
    }

    /// Statements cancelled because the process was past the bound.
    pub fn cancelled(&self) -> u64 {
        self.cancelled.load(Ordering::Relaxed)
    }

    /// Whether the process was past the bound at the last look.
    pub fn is_over(&self) -> bool {
        self.over.load(Ordering::Relaxed)
    }

    /// Where the watchdog cancels: seven eighths of the bound.
    pub fn cancel_at(&self) -> usize {
        self.limit - self.limit / 8
    }

    /// Why a statement was cancelled or a reservation refused.
    fn refusal(&self) -> String {
        format!(
            "the server holds {} MiB, past 7/8 of its bound of {} MiB ([api] max_resident_mib): \
             the statements running were cancelled; ask again when fewer run",
            self.now() >> 20,
            self.limit >> 20
        )
    }
}

/// A reservation refused while the process is past its resident bound: the
/// statement's error, found again under DataFusion's wrapping to answer as
/// the server's state rather than the statement's fault.
#[derive(Debug)]
pub struct OverResident(pub String);

impl std::fmt::Display for OverResident {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for OverResident {}

/// The refusal of the resident bound `error` carries, if it does.
pub(crate) fn over_resident(error: &DataFusionError) -> Option<String> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(error) = source {
        if let Some(over) = error.downcast_ref::<OverResident>() {
            return Some(over.0.clone());
        }
        source = error.source();
    }
    None
}

/// How often the watchdog reads the process's resident memory while
/// statements run.
pub const RESIDENT_POLL: std::time::Duration = std::time::Duration::from_millis(10);

/// How often it reads it while none runs (for the metrics).
const RESIDENT_IDLE_POLL: std::time::Duration = std::time::Duration::from_millis(250);

/// At most how often the watchdog gives the allocator's free pages back
/// when the process is past the bound.
const TRIM_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

/// At most how often it gives them back when no statement runs.
const IDLE_TRIM_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// How much the process must have grown since the last trim for one when no
/// statement runs.
const IDLE_TRIM_GROWTH: usize = 64 << 20;

static RESIDENT: RwLock<Option<Arc<Resident>>> = RwLock::new(None);

/// A statement running under the resident bound: the watchdog aborts its
/// task and marks it when the process passes the bound.
struct Entry {
    abort: tokio::task::AbortHandle,
    hit: Arc<AtomicBool>,
}

static RUNNING: std::sync::Mutex<Vec<(u64, Entry)>> = std::sync::Mutex::new(Vec::new());
static WATCHDOG_THREAD: std::sync::OnceLock<std::thread::Thread> = std::sync::OnceLock::new();
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// Sets the process's resident bound to `bytes` (`None`: none) and starts
/// its watchdog, once.
pub fn set_process_resident(bytes: Option<usize>) {
    let resident = bytes.map(|limit| {
        Arc::new(Resident {
            limit,
            now: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            cancelled: AtomicU64::new(0),
            over: AtomicBool::new(false),
        })
    });
    *RESIDENT
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = resident;
    static WATCHDOG: std::sync::Once = std::sync::Once::new();
    if bytes.is_some() {
        WATCHDOG.call_once(|| {
            // A server without its watchdog would have no resident bound:
            // better to say so than to run unbounded.
            let thread = std::thread::Builder::new()
                .name("memory".to_owned())
                .spawn(watchdog)
                .expect("cannot start the memory watchdog thread");
            let _ = WATCHDOG_THREAD.set(thread.thread().clone());
        });
    }
}

/// The process's resident bound, if one is set.
pub fn process_resident() -> Option<Arc<Resident>> {
    RESIDENT
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone()
}

/// A statement under the watchdog while this guard lives.
pub(crate) struct Watched {
    id: u64,
    hit: Arc<AtomicBool>,
}

impl Watched {
    /// Why the statement was cancelled, if the watchdog cancelled it.
    pub(crate) fn refusal(&self) -> Option<String> {
        if !self.hit.load(Ordering::Acquire) {
            return None;
        }
        Some(process_resident().map_or_else(
            || "the server passed its resident memory bound".to_owned(),
            |resident| resident.refusal(),
        ))
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        running().retain(|(id, _)| *id != self.id);
    }
}

fn running() -> std::sync::MutexGuard<'static, Vec<(u64, Entry)>> {
    RUNNING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Puts a statement's task under the watchdog (a no-op without a bound).
pub(crate) fn watch(abort: tokio::task::AbortHandle) -> Watched {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let hit = Arc::new(AtomicBool::new(false));
    if process_resident().is_some() {
        let mut running = running();
        let was_idle = running.is_empty();
        running.push((
            id,
            Entry {
                abort,
                hit: Arc::clone(&hit),
            },
        ));
        drop(running);
        if was_idle && let Some(watchdog) = WATCHDOG_THREAD.get() {
            watchdog.unpark();
        }
    }
    Watched { id, hit }
}

fn watchdog() {
    let mut last_trim: Option<std::time::Instant> = None;
    // What the process held after the last trim: at rest, glibc keeps what a
    // statement freed (hundreds of MiB after a large sort), and a trim gives
    // it back once the process has grown past this by IDLE_TRIM_GROWTH.
    let mut after_trim = 0usize;
    loop {
        // A statement that starts wakes it (see `watch`).
        let idle = running().is_empty();
        if idle {
            std::thread::park_timeout(RESIDENT_IDLE_POLL);
        } else {
            std::thread::sleep(RESIDENT_POLL);
        }
        let Some(resident) = process_resident() else {
            continue;
        };
        let Some(mut now) = anonymous_resident() else {
            continue;
        };
        let since_trim = last_trim.map(|at| at.elapsed());
        let trim_now = if now > resident.cancel_at() {
            since_trim.is_none_or(|since| since >= TRIM_EVERY)
        } else {
            idle && now > after_trim.saturating_add(IDLE_TRIM_GROWTH)
                && since_trim.is_none_or(|since| since >= IDLE_TRIM_EVERY)
        };
        if trim_now {
            trim();
            last_trim = Some(std::time::Instant::now());
            now = anonymous_resident().unwrap_or(now);
            after_trim = now;
        }
        resident.now.store(now, Ordering::Relaxed);
        resident.peak.fetch_max(now, Ordering::Relaxed);
        let over = now > resident.cancel_at();
        resident.over.store(over, Ordering::Relaxed);
        if over {
            for (_, entry) in running().drain(..) {
                entry.hit.store(true, Ordering::Release);
                entry.abort.abort();
                resident.cancelled.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// The process's anonymous resident bytes: its resident pages less those
/// shared with files (its binary, libraries) and shared memory, as
/// `/proc/self/statm` counts them (`RssAnon`, read more cheaply than
/// `/proc/self/status` gives it).
pub fn anonymous_resident() -> Option<usize> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let mut fields = statm.split_ascii_whitespace().skip(1);
    let resident: usize = fields.next()?.parse().ok()?;
    let shared: usize = fields.next()?.parse().ok()?;
    Some(resident.saturating_sub(shared).saturating_mul(page_bytes()))
}

/// The kernel's page size.
fn page_bytes() -> usize {
    static PAGE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *PAGE.get_or_init(|| {
        unsafe extern "C" {
            fn sysconf(name: std::ffi::c_int) -> std::ffi::c_long;
        }
        /// `_SC_PAGESIZE` of Linux's C libraries (glibc and musl).
        const SC_PAGESIZE: std::ffi::c_int = 30;
        // SAFETY: sysconf reads a constant of the system; no memory is passed.
        let page = unsafe { sysconf(SC_PAGESIZE) };
        usize::try_from(page)
            .ok()
            .filter(|page| *page > 0)
            .unwrap_or(4096)
    })
}

/// Gives the allocator's free pages back to the kernel (glibc keeps a
/// freed chunk's pages in its arena, one arena a thread or so).
fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        unsafe extern "C" {
            fn malloc_trim(pad: usize) -> std::ffi::c_int;
        }
        // SAFETY: glibc's malloc_trim takes the padding to keep and only
        // releases free pages of its arenas; it is thread-safe.
        unsafe {
            malloc_trim(0);
        }
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
