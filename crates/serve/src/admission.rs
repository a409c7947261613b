//! Admission by cost: the API's archive work in two classes, each with its own
//! slots and a bounded queue, so that questions answered from the indexes
//! (a rare address, a connection lookup, a one-minute window) are never
//! refused because whole-archive scans (histograms, SQL, broad filters) hold
//! every slot.
//!
//! A request waits in its class's queue for a slot, up to the request timeout;
//! a request that finds the queue full is refused at once with 503 and a
//! `Retry-After` of the class's expected wait: its mean run time times the
//! requests ahead of it per slot.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::api::ApiError;

/// Rows a request may decode and still count as cheap, by default (`[api]
/// cheap_rows`): about 50 ms of reading on one core (docs/ARCHITECTURE.md,
/// "Admission by cost").
pub const CHEAP_ROWS: u64 = 1 << 20;

/// What a request costs, as its plan says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cost {
    /// Answered from the indexes or a few row groups.
    Cheap,
    /// Reads segments whole: histograms and SQL over the archive, broad filters.
    Scan,
}

/// The slots and queue of one class.
#[derive(Debug)]
struct Class {
    /// Its name in messages and metrics.
    name: &'static str,
    /// The configuration key of its slots.
    key: &'static str,
    slots: Arc<Semaphore>,
    size: AtomicUsize,
    /// Requests holding a slot.
    running: AtomicUsize,
    /// Requests waiting for a slot.
    queued: AtomicUsize,
    max_queued: AtomicUsize,
    /// Mean run time of the class's recent requests, µs (a moving average).
    mean_micros: AtomicU64,
    /// Requests admitted and refused, for the metrics.
    admitted: AtomicU64,
    refused: AtomicU64,
}

/// The counts of one class, for the metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClassCounts {
    /// `cheap` or `scan`.
    pub name: &'static str,
    /// Slots in use.
    pub running: usize,
    /// Requests waiting for a slot.
    pub queued: usize,
    /// Requests admitted since the server started.
    pub admitted: u64,
    /// Requests refused since the server started.
    pub refused: u64,
}

impl Class {
    fn new(name: &'static str, key: &'static str, size: usize, max_queued: usize) -> Self {
        Self {
            name,
            key,
            slots: Arc::new(Semaphore::new(size)),
            size: AtomicUsize::new(size),
            running: AtomicUsize::new(0),
            queued: AtomicUsize::new(0),
            max_queued: AtomicUsize::new(max_queued),
            // Until something has run: a tenth of a second.
            mean_micros: AtomicU64::new(100_000),
            admitted: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        }
    }

    /// Seconds until a slot is likely free for a request behind the queue.
    fn retry_after(&self) -> u64 {
        let size = self.size.load(Ordering::Relaxed);
        let ahead = self.queued.load(Ordering::Relaxed) + size;
        let micros = self.mean_micros.load(Ordering::Relaxed) as f64;
        let seconds = micros * ahead as f64 / size.max(1) as f64 / 1e6;
        (seconds.ceil() as u64).clamp(1, 3600)
    }

    fn refusal(&self, why: &str) -> ApiError {
        self.refused.fetch_add(1, Ordering::Relaxed);
        let retry = self.retry_after();
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "{why}: {} {} requests are running (the server's {}) and {} wait: retry in {retry} s",
                self.size.load(Ordering::Relaxed),
                self.name,
                self.key,
                self.queued.load(Ordering::Relaxed)
            ),
        )
        .retry_after(retry)
    }

    /// `size` slots and a queue of `max_queued` from now on: more slots are
    /// free at once; fewer are taken as running requests give theirs back.
    fn resize(self: &Arc<Self>, size: usize, max_queued: usize) {
        self.max_queued.store(max_queued, Ordering::Relaxed);
        let old = self.size.swap(size, Ordering::Relaxed);
        if size > old {
            self.slots.add_permits(size - old);
        } else if size < old {
            let owed = old - size - self.slots.forget_permits(old - size);
            if owed > 0 {
                let class = Arc::clone(self);
                tokio::spawn(async move {
                    if let Ok(permits) = class.slots.acquire_many(owed as u32).await {
                        permits.forget();
                    }
                });
            }
        }
    }

    fn record(&self, took: Duration) {
        let micros = took.as_micros().min(u128::from(u64::MAX)) as u64;
        // An exponential moving average over about the last eight requests.
        let _ = self
            .mean_micros
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |mean| {
                Some(mean - mean / 8 + micros / 8)
            });
    }
}

/// The two classes of a server.
#[derive(Debug)]
pub struct Admission {
    cheap: Arc<Class>,
    scan: Arc<Class>,
    /// Longest a request waits in a queue, ms.
    wait_ms: AtomicU64,
    /// Most rows a cheap request decodes.
    cheap_rows: AtomicU64,
}

/// A slot of one class, held while the request runs; its run time is
/// recorded when it is dropped.
#[derive(Debug)]
pub struct Ticket {
    _permit: OwnedSemaphorePermit,
    class: Arc<Class>,
    started: Instant,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.class.running.fetch_sub(1, Ordering::Relaxed);
        self.class.record(self.started.elapsed());
    }
}

impl Ticket {
    /// The class this ticket is of.
    pub fn cost(&self) -> Cost {
        if self.class.name == "cheap" {
            Cost::Cheap
        } else {
            Cost::Scan
        }
    }
}

/// Forgets one waiter of a queue when dropped (also when the client goes away
/// while it waits).
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Admission {
    /// `cheap` and `scan` slots, each with a queue of `max_queued` waiting at
    /// most `wait`; a request is cheap up to `cheap_rows` decoded.
    pub fn new(
        cheap: usize,
        scan: usize,
        max_queued: usize,
        wait: Duration,
        cheap_rows: u64,
    ) -> Self {
        Self {
            cheap: Arc::new(Class::new("cheap", "max_concurrent", cheap, max_queued)),
            scan: Arc::new(Class::new("scan", "max_scans", scan, max_queued)),
            wait_ms: AtomicU64::new(millis(wait)),
            cheap_rows: AtomicU64::new(cheap_rows),
        }
    }

    /// The bounds of [`Admission::new`] from now on (a reload of `serve`'s
    /// configuration); the requests running keep their slots. Needs the
    /// runtime: fewer slots are taken back by a task as they come free.
    pub fn resize(
        &self,
        cheap: usize,
        scan: usize,
        max_queued: usize,
        wait: Duration,
        cheap_rows: u64,
    ) {
        self.cheap.resize(cheap, max_queued);
        self.scan.resize(scan, max_queued);
        self.wait_ms.store(millis(wait), Ordering::Relaxed);
        self.cheap_rows.store(cheap_rows, Ordering::Relaxed);
    }

    /// The class of a request that decodes about `rows` rows.
    pub fn cost_of_rows(&self, rows: u64) -> Cost {
        if rows <= self.cheap_rows.load(Ordering::Relaxed) {
            Cost::Cheap
        } else {
            Cost::Scan
        }
    }

    fn class(&self, cost: Cost) -> &Arc<Class> {
        match cost {
            Cost::Cheap => &self.cheap,
            Cost::Scan => &self.scan,
        }
    }

    /// A slot of `cost`'s class: at once if one is free, else after waiting in
    /// its queue; refused (503 with `Retry-After`) when the queue is full or
    /// the wait ends first.
    pub async fn admit(&self, cost: Cost) -> Result<Ticket, ApiError> {
        let class = self.class(cost);
        let ticket = |permit| {
            class.admitted.fetch_add(1, Ordering::Relaxed);
            class.running.fetch_add(1, Ordering::Relaxed);
            Ticket {
                _permit: permit,
                class: Arc::clone(class),
                started: Instant::now(),
            }
        };
        if let Ok(permit) = Arc::clone(&class.slots).try_acquire_owned() {
            return Ok(ticket(permit));
        }
        if class.queued.fetch_add(1, Ordering::Relaxed) >= class.max_queued.load(Ordering::Relaxed)
        {
            class.queued.fetch_sub(1, Ordering::Relaxed);
            return Err(class.refusal("the queue is full"));
        }
        let waiting = Waiting(&class.queued);
        let wait = Duration::from_millis(self.wait_ms.load(Ordering::Relaxed));
        let acquired = tokio::time::timeout(wait, Arc::clone(&class.slots).acquire_owned()).await;
        drop(waiting);
        match acquired {
            Ok(Ok(permit)) => Ok(ticket(permit)),
            _ => Err(class.refusal("no slot came free within the server's timeout_secs")),
        }
    }

    /// The counts of both classes, cheap first.
    pub fn counts(&self) -> [ClassCounts; 2] {
        [&self.cheap, &self.scan].map(|class| ClassCounts {
            name: class.name,
            running: class.running.load(Ordering::Relaxed),
            queued: class.queued.load(Ordering::Relaxed),
            admitted: class.admitted.load(Ordering::Relaxed),
            refused: class.refused.load(Ordering::Relaxed),
        })
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn resized_classes_admit_as_many_as_their_new_slots() {
        let admission = Admission::new(1, 1, 0, Duration::from_millis(10), CHEAP_ROWS);
        let first = admission.admit(Cost::Scan).await.unwrap();
        assert!(admission.admit(Cost::Scan).await.is_err());
        admission.resize(1, 3, 0, Duration::from_millis(10), 10);
        let more = [
            admission.admit(Cost::Scan).await.unwrap(),
            admission.admit(Cost::Scan).await.unwrap(),
        ];
        assert!(admission.admit(Cost::Scan).await.is_err());
        assert_eq!(admission.cost_of_rows(11), Cost::Scan);
        // Down to one: the running three keep theirs, and one slot is left
        // once they are done.
        admission.resize(1, 1, 0, Duration::from_millis(10), 10);
        assert_eq!(admission.counts()[1].running, 3);
        drop(first);
        drop(more);
        tokio::task::yield_now().await;
        let again = admission.admit(Cost::Scan).await.unwrap();
        assert!(admission.admit(Cost::Scan).await.is_err());
        drop(again);
    }

    #[tokio::test]
    async fn a_full_scan_class_refuses_scans_with_a_retry_after_and_still_admits_cheap_work() {
        let admission = Admission::new(1, 1, 1, Duration::from_millis(50), CHEAP_ROWS);
        let scan = admission.admit(Cost::Scan).await.unwrap();
        // One waits in the queue (and gives up after the wait)...
        let waited = admission.admit(Cost::Scan).await.unwrap_err();
        assert_eq!(waited.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(waited.retry_after_secs().is_some_and(|s| s >= 1));
        // ...and while it waits, the queue is full for another.
        let (first, second) = tokio::join!(admission.admit(Cost::Scan), async {
            tokio::task::yield_now().await;
            admission.admit(Cost::Scan).await
        });
        let refused = [first, second]
            .into_iter()
            .filter_map(Result::err)
            .collect::<Vec<_>>();
        assert_eq!(refused.len(), 2);
        assert!(
            refused[1].to_string().contains("max_scans"),
            "{}",
            refused[1]
        );
        // Cheap work has slots of its own.
        let cheap = admission.admit(Cost::Cheap).await.unwrap();
        assert_eq!(cheap.cost(), Cost::Cheap);
        let counts = admission.counts();
        assert_eq!((counts[0].running, counts[1].running), (1, 1));
        assert_eq!(counts[1].refused, 3);
        // A freed slot admits the next scan.
        drop(scan);
        assert_eq!(
            admission.admit(Cost::Scan).await.unwrap().cost(),
            Cost::Scan
        );
    }

    #[test]
    fn cost_follows_the_rows_a_plan_reads() {
        let admission = Admission::new(1, 1, 1, Duration::from_secs(1), CHEAP_ROWS);
        assert_eq!(admission.cost_of_rows(0), Cost::Cheap);
        assert_eq!(admission.cost_of_rows(CHEAP_ROWS), Cost::Cheap);
        assert_eq!(admission.cost_of_rows(CHEAP_ROWS + 1), Cost::Scan);
    }
}
