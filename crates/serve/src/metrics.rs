//! `GET /metrics`: Prometheus text exposition of the capture (kernel and ring
//! drops), the archive (rates, segments, disk) and the API. Counters end in
//! `_total`; rates are PromQL's `rate()` of them, and one gauge samples the
//! archive rate for people reading the page by eye.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::Result;
use hindsight_store::Table;

use super::api::AppState;

/// Writes the HELP and TYPE lines of a metric family.
fn head(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// Writes one sample; `labels` is `key="value",...` or empty.
fn sample(out: &mut String, name: &str, labels: &str, value: impl std::fmt::Display) {
    if labels.is_empty() {
        let _ = writeln!(out, "{name} {value}");
    } else {
        let _ = writeln!(out, "{name}{{{labels}}} {value}");
    }
}

/// Escapes a label value.
fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The metric families, one a line: `kind name "help" = value;`, with
/// `[labels]` after the name for a labelled sample. With `for x in items =>
/// labels;` first, each family has a sample per item (`items` is read once
/// per family), labelled by `labels`, its value read from `x`.
macro_rules! metrics {
    ($out:expr, for $x:pat in $items:expr => $labels:expr;
     $($kind:ident $name:ident $help:literal = $value:expr;)*) => {$(
        head($out, stringify!($name), stringify!($kind), $help);
        for $x in $items {
            sample($out, stringify!($name), &$labels, $value);
        }
    )*};
    ($out:expr; $($kind:ident $name:ident $([$labels:expr])? $help:literal = $value:expr;)*) => {$(
        head($out, stringify!($name), stringify!($kind), $help);
        sample($out, stringify!($name), metrics!(@labels $($labels)?), $value);
    )*};
    (@labels) => { "" };
    (@labels $labels:expr) => { &$labels };
}

/// Renders every metric.
pub fn render(state: &AppState) -> Result<String> {
    let mut out = String::with_capacity(4096);
    let out = &mut out;
    let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
    let version = format!("version=\"{}\"", env!("CARGO_PKG_VERSION"));
    metrics!(out;
        gauge hindsight_build_info [version] "Version of this server." = 1;
        gauge hindsight_uptime_seconds "Seconds since the server started." = state.started.elapsed().as_secs_f64();
    );
    if let Some(live) = &state.live {
        let c = &live.counters;
        let iface = format!("interface=\"{}\"", label(&live.interface));
        metrics!(out;
            gauge hindsight_capture_threads [iface] "Capture threads reading the interface (0: the capture stopped)." = load(&c.capture_threads);
            counter hindsight_capture_packets_total [iface] "Packets captured into the ring." = load(&c.captured);
            counter hindsight_capture_bytes_total [iface] "Wire bytes of the packets captured." = load(&c.captured_bytes);
            counter hindsight_capture_kernel_received_total [iface] "Packets the kernel passed to the capture (libpcap ps_recv)." = load(&c.kernel_received);
            counter hindsight_capture_kernel_drops_total [iface] "Packets the kernel dropped for lack of capture buffer (libpcap ps_drop)." = load(&c.kernel_dropped);
            counter hindsight_capture_interface_drops_total [iface] "Packets the interface or driver dropped (libpcap ps_ifdrop)." = load(&c.interface_dropped);
        );
        let (ring, config) = (live.ring.stats(), live.ring.config());
        metrics!(out;
            gauge hindsight_ring_memory_bytes "Memory bound of the capture ring." = config.chunks as u64 * config.chunk_bytes as u64;
            counter hindsight_ring_chunks_published_total "Chunks published to the ring." = ring.chunks;
            counter hindsight_ring_chunks_overwritten_total "Published chunks overwritten by newer ones." = ring.overwritten;
            counter hindsight_ring_packets_truncated_total "Packets cut short to fit a chunk." = ring.truncated;
            counter hindsight_ring_pin_waits_total "Times capture waited for a dump's pin before overwriting." = ring.pin_waits;
            counter hindsight_ring_drops_archive_chunks_total "Ring chunks the archiver lost: overwritten before it read them." = load(&c.archive_missed_chunks);
            counter hindsight_ring_drops_trigger_chunks_total "Ring chunks the trigger analyzer lost: overwritten before it read them." = load(&c.trigger_missed_chunks);
            counter hindsight_archived_packets_total "Packets written to the archive from the ring." = load(&c.archived);
            counter hindsight_archive_seals_total "Times the archive sealed its open segments." = load(&c.seals);
            counter hindsight_dumps_written_total "Dumps written (triggers and requests)." = load(&c.dumps);
            counter hindsight_triggers_suppressed_total "Trigger matches inside a previous trigger's hold-off." = load(&c.triggers_suppressed);
            counter hindsight_triggers_without_dump_total "Triggers whose packet lacks a field the dump template names." = load(&c.triggers_without_dump);
            gauge hindsight_archive_packets_per_second "Packets archived per second over the last sampling interval." = f64::from_bits(load(&state.archive_rate));
        );
    }
    // What the reader holds: a scrape opens no file of the archive (the reader
    // reloads when a request or the refresher finds a segment sealed or expired).
    let snapshot = state.reader.held();
    let summary = snapshot.summary();
    metrics!(out, for table in Table::ALL => format!("table=\"{}\"", table.name());
        gauge hindsight_segments "Sealed segments in the catalog." = summary.table(table).segments;
        gauge hindsight_segment_rows "Rows (packets, flow records) in sealed segments." = summary.table(table).rows;
        gauge hindsight_segment_bytes "Bytes on disk of sealed segments." = summary.table(table).bytes;
    );
    let classes = snapshot.retention_classes();
    if !classes.is_empty() {
        metrics!(out, for class in &classes => format!("class=\"{}\"", label(&class.name));
            gauge hindsight_retention_class_bytes "Bytes of a retention class's packets segments." = class.bytes;
            gauge hindsight_retention_class_min_bytes "Bytes a retention class is guaranteed." = class.min_bytes;
            gauge hindsight_retention_class_packets "Packets of a retention class." = class.packets;
            gauge hindsight_retention_class_span_seconds "Time between a retention class's oldest and newest packets." = match (class.first_ns, class.last_ns) {
                (Some(first), Some(last)) => (last - first) as f64 / 1e9,
                _ => 0.0,
            };
        );
    }
    metrics!(out;
        gauge hindsight_archive_disk_bytes "Bytes of every file under the archive directory (segments, indexes, catalog, dumps)." = snapshot.disk_bytes();
    );
    if let Some(free) = hindsight_store::disk::free_bytes(state.reader.root()) {
        metrics!(out;
            gauge hindsight_filesystem_free_bytes "Bytes available to the server on the archive's file system." = free;
        );
    }
    let dumps = state
        .dumps_seen
        .lock()
        .map(|dumps| dumps.clone())
        .unwrap_or_default();
    let requests = state
        .requests
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    let c = &state.connections;
    metrics!(out;
        gauge hindsight_dumps "Finished dumps in the dump directory." = dumps.len();
        gauge hindsight_dump_bytes "Bytes of the finished dumps." = dumps.iter().map(|d| d.1).sum::<u64>();
        counter hindsight_http_connections_accepted_total "Connections accepted." = load(&c.accepted);
        counter hindsight_http_connections_refused_full_total "Connections refused with 503 because max_connections were open." = load(&c.refused_full);
        counter hindsight_http_connections_refused_client_total "Connections refused with 503 because their client had max_connections_per_client open." = load(&c.refused_client);
        gauge hindsight_sql_abandoned "Statements given up on (deadline, client gone) that still compute until they yield." = hindsight_sql::abandoned::abandoned();
        counter hindsight_sql_refused_busy_total "Statements refused because as many given up on as the server lets still computed." = hindsight_sql::abandoned::refused();
    );
    metrics!(out, for (i, count) in state.responses.iter().enumerate() => format!("code=\"{}xx\"", i + 1);
        counter hindsight_http_responses_total "HTTP responses by status class." = load(count);
    );
    let admission = state.admission.counts();
    metrics!(out, for class in &admission => format!("class=\"{}\"", class.name);
        gauge hindsight_api_running "Archive requests running, by cost class (cheap, scan)." = class.running;
        gauge hindsight_api_queued "Archive requests waiting for a slot, by cost class." = class.queued;
        counter hindsight_api_admitted_total "Archive requests admitted, by cost class." = class.admitted;
        counter hindsight_api_refused_total "Archive requests refused with 503 and Retry-After, by cost class." = class.refused;
    );
    metrics!(out, for (route, count) in &requests => format!("route=\"{}\"", label(route));
        counter hindsight_api_requests_total "Requests by route." = count;
    );
    if let Some(budget) = hindsight_sql::budget::process_memory() {
        metrics!(out;
            gauge hindsight_sql_memory_reserved_bytes "Bytes the operators of every running statement reserve now (sorts, joins, aggregations)." = budget.used();
            gauge hindsight_sql_memory_limit_bytes "What they may reserve together ([api] max_total_memory_mib)." = budget.limit();
        );
    }
    if let Some(resident) = hindsight_sql::budget::process_resident() {
        metrics!(out;
            gauge hindsight_resident_bytes "The server's anonymous resident memory at the watchdog's last look." = resident.now();
            gauge hindsight_resident_peak_bytes "The most the watchdog has seen." = resident.peak();
            gauge hindsight_resident_limit_bytes "Past it the statements running are cancelled ([api] max_resident_mib)." = resident.limit();
            counter hindsight_sql_cancelled_for_memory_total "Statements cancelled because the server passed its resident bound." = resident.cancelled();
        );
    }
    if let Some(workers) = &state.workers {
        metrics!(out;
            counter hindsight_statement_workers_started_total "Statement worker processes started ([api] statement_workers)." = load(&workers.started);
            counter hindsight_statement_workers_died_total "Statement workers that died running a statement (past worker_memory_mib, most often)." = load(&workers.died);
            gauge hindsight_statement_worker_limit_bytes "Each statement worker's memory limit ([api] worker_memory_mib)." = (workers.memory_mib() as u64) << 20;
        );
    }
    if let Some(cluster) = &state.cluster {
        let c = &cluster.counters;
        metrics!(out;
            counter hindsight_cluster_sync_bytes_sent_total "Bytes this node sent its index nodes (syncs and summaries)." = load(&c.bytes_sent);
            counter hindsight_cluster_summaries_sent_total "Segment summaries this node sent its index nodes." = load(&c.summaries_sent);
            counter hindsight_cluster_sync_failures_total "Syncs with an index node that failed." = load(&c.failures);
        );
    }
    if let Some(hub) = &state.hub {
        let stats = hub.stats();
        metrics!(out, for (watch, s) in &stats => format!("watch=\"{}\"", label(watch));
            counter hindsight_watch_windows_total "Windows a watch answered." = s.windows;
            counter hindsight_watch_rows_total "Rows a watch answered." = s.rows;
            counter hindsight_watch_errors_total "Windows on which a watch's statement failed." = s.errors;
            counter hindsight_watch_cut_rows_total "Rows left out of a watch's windows at its bounds." = s.cut_rows;
            counter hindsight_watch_eval_seconds_total "Seconds a watch spent evaluating its windows." = s.eval_seconds;
            gauge hindsight_watch_last_eval_seconds "Seconds the last window of a watch took to evaluate." = s.last_eval_seconds;
            gauge hindsight_watch_lag_seconds "Seconds from the end of a watch's last window to its answer." = s.last_lag_seconds;
            counter hindsight_watch_dumps_total "Dumps a watch's rows wrote." = s.dumps;
            counter hindsight_watch_dump_errors_total "Dumps of a watch that failed." = s.dump_errors;
            counter hindsight_watch_notifications_total "Webhook POSTs and alert-log lines of a watch." = s.notifications;
            counter hindsight_watch_actions_dropped_total "Actions of a watch dropped: queue full, or no filter from the row." = s.actions_dropped;
        );
    }
    Ok(std::mem::take(out))
}
