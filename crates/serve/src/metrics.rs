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

/// A family of one unlabelled sample.
fn single(out: &mut String, name: &str, kind: &str, help: &str, value: impl std::fmt::Display) {
    head(out, name, kind, help);
    sample(out, name, "", value);
}

/// Escapes a label value.
fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Renders every metric.
pub fn render(state: &AppState) -> Result<String> {
    let mut out = String::with_capacity(4096);
    head(
        &mut out,
        "hindsight_build_info",
        "gauge",
        "Version of this server.",
    );
    sample(
        &mut out,
        "hindsight_build_info",
        &format!("version=\"{}\"", env!("CARGO_PKG_VERSION")),
        1,
    );
    single(
        &mut out,
        "hindsight_uptime_seconds",
        "gauge",
        "Seconds since the server started.",
        state.started.elapsed().as_secs_f64(),
    );
    if let Some(live) = &state.live {
        let c = &live.counters;
        let iface = format!("interface=\"{}\"", label(&live.interface));
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        for (name, kind, help, value) in [
            (
                "hindsight_capture_threads",
                "gauge",
                "Capture threads reading the interface (0: the capture stopped).",
                c.capture_threads.load(Ordering::Relaxed),
            ),
            (
                "hindsight_capture_packets_total",
                "counter",
                "Packets captured into the ring.",
                load(&c.captured),
            ),
            (
                "hindsight_capture_bytes_total",
                "counter",
                "Wire bytes of the packets captured.",
                load(&c.captured_bytes),
            ),
            (
                "hindsight_capture_kernel_received_total",
                "counter",
                "Packets the kernel passed to the capture (libpcap ps_recv).",
                load(&c.kernel_received),
            ),
            (
                "hindsight_capture_kernel_drops_total",
                "counter",
                "Packets the kernel dropped for lack of capture buffer (libpcap ps_drop).",
                load(&c.kernel_dropped),
            ),
            (
                "hindsight_capture_interface_drops_total",
                "counter",
                "Packets the interface or driver dropped (libpcap ps_ifdrop).",
                load(&c.interface_dropped),
            ),
        ] {
            head(&mut out, name, kind, help);
            sample(&mut out, name, &iface, value);
        }
        let ring = live.ring.stats();
        let config = live.ring.config();
        for (name, kind, help, value) in [
            (
                "hindsight_ring_memory_bytes",
                "gauge",
                "Memory bound of the capture ring.",
                config.chunks as u64 * config.chunk_bytes as u64,
            ),
            (
                "hindsight_ring_chunks_published_total",
                "counter",
                "Chunks published to the ring.",
                ring.chunks,
            ),
            (
                "hindsight_ring_chunks_overwritten_total",
                "counter",
                "Published chunks overwritten by newer ones.",
                ring.overwritten,
            ),
            (
                "hindsight_ring_packets_truncated_total",
                "counter",
                "Packets cut short to fit a chunk.",
                ring.truncated,
            ),
            (
                "hindsight_ring_pin_waits_total",
                "counter",
                "Times capture waited for a dump's pin before overwriting.",
                ring.pin_waits,
            ),
            (
                "hindsight_ring_drops_archive_chunks_total",
                "counter",
                "Ring chunks the archiver lost: overwritten before it read them.",
                load(&c.archive_missed_chunks),
            ),
            (
                "hindsight_ring_drops_trigger_chunks_total",
                "counter",
                "Ring chunks the trigger analyzer lost: overwritten before it read them.",
                load(&c.trigger_missed_chunks),
            ),
            (
                "hindsight_archived_packets_total",
                "counter",
                "Packets written to the archive from the ring.",
                load(&c.archived),
            ),
            (
                "hindsight_archive_seals_total",
                "counter",
                "Times the archive sealed its open segments.",
                load(&c.seals),
            ),
            (
                "hindsight_dumps_written_total",
                "counter",
                "Dumps written (triggers and requests).",
                load(&c.dumps),
            ),
            (
                "hindsight_triggers_suppressed_total",
                "counter",
                "Trigger matches inside a previous trigger's hold-off.",
                load(&c.triggers_suppressed),
            ),
            (
                "hindsight_triggers_without_dump_total",
                "counter",
                "Triggers whose packet lacks a field the dump template names.",
                load(&c.triggers_without_dump),
            ),
        ] {
            single(&mut out, name, kind, help, value);
        }
        single(
            &mut out,
            "hindsight_archive_packets_per_second",
            "gauge",
            "Packets archived per second over the last sampling interval.",
            f64::from_bits(state.archive_rate.load(Ordering::Relaxed)),
        );
    }
    // What the reader holds: a scrape opens no file of the archive (the reader
    // reloads when a request or the refresher finds a segment sealed or expired).
    let snapshot = state.reader.held();
    let summary = snapshot.summary();
    for (name, help) in [
        ("hindsight_segments", "Sealed segments in the catalog."),
        (
            "hindsight_segment_rows",
            "Rows (packets, flow records) in sealed segments.",
        ),
        (
            "hindsight_segment_bytes",
            "Bytes on disk of sealed segments.",
        ),
    ] {
        head(&mut out, name, "gauge", help);
        for table in Table::ALL {
            let totals = summary.table(table);
            let value = match name {
                "hindsight_segments" => totals.segments as u64,
                "hindsight_segment_rows" => totals.rows,
                _ => totals.bytes,
            };
            sample(
                &mut out,
                name,
                &format!("table=\"{}\"", table.name()),
                value,
            );
        }
    }
    let classes = snapshot.retention_classes();
    if !classes.is_empty() {
        for (name, help, value) in [
            (
                "hindsight_retention_class_bytes",
                "Bytes of a retention class's packets segments.",
                (|c: &hindsight_reader::ClassUsage| c.bytes as f64) as fn(&_) -> f64,
            ),
            (
                "hindsight_retention_class_min_bytes",
                "Bytes a retention class is guaranteed.",
                |c| c.min_bytes as f64,
            ),
            (
                "hindsight_retention_class_packets",
                "Packets of a retention class.",
                |c| c.packets as f64,
            ),
            (
                "hindsight_retention_class_span_seconds",
                "Time between a retention class's oldest and newest packets.",
                |c| match (c.first_ns, c.last_ns) {
                    (Some(first), Some(last)) => (last - first) as f64 / 1e9,
                    _ => 0.0,
                },
            ),
        ] {
            head(&mut out, name, "gauge", help);
            for class in &classes {
                sample(
                    &mut out,
                    name,
                    &format!("class=\"{}\"", label(&class.name)),
                    value(class),
                );
            }
        }
    }
    single(
        &mut out,
        "hindsight_archive_disk_bytes",
        "gauge",
        "Bytes of every file under the archive directory (segments, indexes, catalog, dumps).",
        snapshot.disk_bytes(),
    );
    if let Some(free) = hindsight_store::disk::free_bytes(state.reader.root()) {
        single(
            &mut out,
            "hindsight_filesystem_free_bytes",
            "gauge",
            "Bytes available to the server on the archive's file system.",
            free,
        );
    }
    let dumps = state
        .dumps_seen
        .lock()
        .map(|dumps| dumps.clone())
        .unwrap_or_default();
    single(
        &mut out,
        "hindsight_dumps",
        "gauge",
        "Finished dumps in the dump directory.",
        dumps.len(),
    );
    single(
        &mut out,
        "hindsight_dump_bytes",
        "gauge",
        "Bytes of the finished dumps.",
        dumps.iter().map(|d| d.1).sum::<u64>(),
    );
    head(
        &mut out,
        "hindsight_http_responses_total",
        "counter",
        "HTTP responses by status class.",
    );
    for (i, count) in state.responses.iter().enumerate() {
        sample(
            &mut out,
            "hindsight_http_responses_total",
            &format!("code=\"{}xx\"", i + 1),
            count.load(Ordering::Relaxed),
        );
    }
    let classes = state.admission.counts();
    for (name, kind, help, value) in [
        (
            "hindsight_api_running",
            "gauge",
            "Archive requests running, by cost class (cheap, scan).",
            (|c: &crate::admission::ClassCounts| c.running as u64) as fn(&_) -> u64,
        ),
        (
            "hindsight_api_queued",
            "gauge",
            "Archive requests waiting for a slot, by cost class.",
            |c| c.queued as u64,
        ),
        (
            "hindsight_api_admitted_total",
            "counter",
            "Archive requests admitted, by cost class.",
            |c| c.admitted,
        ),
        (
            "hindsight_api_refused_total",
            "counter",
            "Archive requests refused with 503 and Retry-After, by cost class.",
            |c| c.refused,
        ),
    ] {
        head(&mut out, name, kind, help);
        for class in &classes {
            sample(
                &mut out,
                name,
                &format!("class=\"{}\"", class.name),
                value(class),
            );
        }
    }
    head(
        &mut out,
        "hindsight_api_requests_total",
        "counter",
        "Requests by route.",
    );
    let requests = state
        .requests
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    for (route, count) in &requests {
        sample(
            &mut out,
            "hindsight_api_requests_total",
            &format!("route=\"{}\"", label(route)),
            count,
        );
    }
    let c = &state.connections;
    counters(
        &mut out,
        [
            (
                "hindsight_http_connections_accepted_total",
                "Connections accepted.",
                &c.accepted,
            ),
            (
                "hindsight_http_connections_refused_full_total",
                "Connections refused with 503 because max_connections were open.",
                &c.refused_full,
            ),
            (
                "hindsight_http_connections_refused_client_total",
                "Connections refused with 503 because their client had max_connections_per_client open.",
                &c.refused_client,
            ),
        ],
    );
    if let Some(budget) = hindsight_sql::budget::process_memory() {
        single(
            &mut out,
            "hindsight_sql_memory_reserved_bytes",
            "gauge",
            "Bytes the operators of every running statement reserve now (sorts, joins, aggregations).",
            budget.used() as u64,
        );
        single(
            &mut out,
            "hindsight_sql_memory_limit_bytes",
            "gauge",
            "What they may reserve together ([api] max_total_memory_mib).",
            budget.limit() as u64,
        );
    }
    if let Some(resident) = hindsight_sql::budget::process_resident() {
        single(
            &mut out,
            "hindsight_resident_bytes",
            "gauge",
            "The server's anonymous resident memory at the watchdog's last look.",
            resident.now() as u64,
        );
        single(
            &mut out,
            "hindsight_resident_peak_bytes",
            "gauge",
            "The most the watchdog has seen.",
            resident.peak() as u64,
        );
        single(
            &mut out,
            "hindsight_resident_limit_bytes",
            "gauge",
            "Past it the statements running are cancelled ([api] max_resident_mib).",
            resident.limit() as u64,
        );
        single(
            &mut out,
            "hindsight_sql_cancelled_for_memory_total",
            "counter",
            "Statements cancelled because the server passed its resident bound.",
            resident.cancelled(),
        );
    }
    single(
        &mut out,
        "hindsight_sql_abandoned",
        "gauge",
        "Statements given up on (deadline, client gone) that still compute until they yield.",
        hindsight_sql::abandoned::abandoned() as u64,
    );
    single(
        &mut out,
        "hindsight_sql_refused_busy_total",
        "counter",
        "Statements refused because as many given up on as the server lets still computed.",
        hindsight_sql::abandoned::refused(),
    );
    if let Some(workers) = &state.workers {
        counters(
            &mut out,
            [
                (
                    "hindsight_statement_workers_started_total",
                    "Statement worker processes started ([api] statement_workers).",
                    &workers.started,
                ),
                (
                    "hindsight_statement_workers_died_total",
                    "Statement workers that died running a statement (past worker_memory_mib, most often).",
                    &workers.died,
                ),
            ],
        );
        single(
            &mut out,
            "hindsight_statement_worker_limit_bytes",
            "gauge",
            "Each statement worker's memory limit ([api] worker_memory_mib).",
            (workers.memory_mib() as u64) << 20,
        );
    }
    if let Some(cluster) = &state.cluster {
        let c = &cluster.counters;
        counters(
            &mut out,
            [
                (
                    "hindsight_cluster_sync_bytes_sent_total",
                    "Bytes this node sent its index nodes (syncs and summaries).",
                    &c.bytes_sent,
                ),
                (
                    "hindsight_cluster_summaries_sent_total",
                    "Segment summaries this node sent its index nodes.",
                    &c.summaries_sent,
                ),
                (
                    "hindsight_cluster_sync_failures_total",
                    "Syncs with an index node that failed.",
                    &c.failures,
                ),
            ],
        );
    }
    if let Some(hub) = &state.hub {
        watches(&mut out, &hub.stats());
    }
    Ok(out)
}

/// A counter family of one sample each: (name, help, counter).
fn counters<const N: usize>(out: &mut String, families: [(&str, &str, &AtomicU64); N]) {
    for (name, help, value) in families {
        single(out, name, "counter", help, value.load(Ordering::Relaxed));
    }
}

/// One family per counter of the watches, a sample per watch.
fn watches(out: &mut String, stats: &[(String, hindsight_watch::hub::WatchStats)]) {
    type Get = fn(&hindsight_watch::hub::WatchStats) -> f64;
    let families: [(&str, &str, &str, Get); 11] = [
        (
            "hindsight_watch_windows_total",
            "counter",
            "Windows a watch answered.",
            |s| s.windows as f64,
        ),
        (
            "hindsight_watch_rows_total",
            "counter",
            "Rows a watch answered.",
            |s| s.rows as f64,
        ),
        (
            "hindsight_watch_errors_total",
            "counter",
            "Windows on which a watch's statement failed.",
            |s| s.errors as f64,
        ),
        (
            "hindsight_watch_cut_rows_total",
            "counter",
            "Rows left out of a watch's windows at its bounds.",
            |s| s.cut_rows as f64,
        ),
        (
            "hindsight_watch_eval_seconds_total",
            "counter",
            "Seconds a watch spent evaluating its windows.",
            |s| s.eval_seconds,
        ),
        (
            "hindsight_watch_last_eval_seconds",
            "gauge",
            "Seconds the last window of a watch took to evaluate.",
            |s| s.last_eval_seconds,
        ),
        (
            "hindsight_watch_lag_seconds",
            "gauge",
            "Seconds from the end of a watch's last window to its answer.",
            |s| s.last_lag_seconds,
        ),
        (
            "hindsight_watch_dumps_total",
            "counter",
            "Dumps a watch's rows wrote.",
            |s| s.dumps as f64,
        ),
        (
            "hindsight_watch_dump_errors_total",
            "counter",
            "Dumps of a watch that failed.",
            |s| s.dump_errors as f64,
        ),
        (
            "hindsight_watch_notifications_total",
            "counter",
            "Webhook POSTs and alert-log lines of a watch.",
            |s| s.notifications as f64,
        ),
        (
            "hindsight_watch_actions_dropped_total",
            "counter",
            "Actions of a watch dropped: queue full, or no filter from the row.",
            |s| s.actions_dropped as f64,
        ),
    ];
    for (name, kind, help, get) in families {
        head(out, name, kind, help);
        for (watch, stats) in stats {
            sample(
                out,
                name,
                &format!("watch=\"{}\"", label(watch)),
                get(stats),
            );
        }
    }
}
