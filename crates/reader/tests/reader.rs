//! The long-lived reader on a real archive: lan-hour-2012.pcap ingested in two
//! halves by writers of their own (as `serve` sees a recorder seal), with
//! answers checked against tcpdump on the same halves.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use hindsight_filter::Filter;
use hindsight_ingest::{IngestOptions, Ingestor};
use hindsight_model::network_range;
use hindsight_query::search::SearchRequest;
use hindsight_reader::{ConnQuery, LimitExceeded, Limits, Reader, ReaderError, Snapshot};
use hindsight_store::{Archive, Table, TimeRange};

const BUSY: &str = "10.174.200.10";

fn lan_hour() -> PathBuf {
    let path = Path::new(
        &std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo test sets CARGO_MANIFEST_DIR"),
    )
    .join("../../../shared/data/lan-hour-2012.pcap");
    assert!(path.exists(), "missing capture {}", path.display());
    path
}

/// Frames `range` (editcap's `first-last`) of lan-hour, as a capture file.
fn part(dir: &Path, name: &str, range: &str) -> PathBuf {
    let path = dir.join(name);
    let status = Command::new("editcap")
        .args(["-r"])
        .arg(lan_hour())
        .arg(&path)
        .arg(range)
        .status()
        .expect("run editcap (scripts/setup installs it with tshark)");
    assert!(status.success());
    path
}

fn tcpdump_count(capture: &Path, filter: &str) -> u64 {
    let output = Command::new("tcpdump")
        .args(["-nn", "-q", "-r"])
        .arg(capture)
        .arg(filter)
        .output()
        .expect("run tcpdump");
    assert!(output.status.success());
    String::from_utf8_lossy(&output.stdout).lines().count() as u64
}

fn ingest(root: &Path, capture: &Path) -> u64 {
    let options = IngestOptions {
        partition_nanos: 600 * 1_000_000_000,
        ..IngestOptions::default()
    };
    let (mut ingestor, _) = Ingestor::open(root, options).unwrap();
    let outcome = ingestor.ingest_file(capture, &mut |_| {}).unwrap();
    assert!(outcome.error.is_none());
    ingestor.finish().unwrap().counts.packets
}

fn count(snapshot: &Snapshot, filter: &str, limits: &Limits) -> Result<u64, ReaderError> {
    let request = SearchRequest {
        filter: Filter::parse(filter).unwrap(),
        time: TimeRange::ALL,
        limit: None,
        with_data: false,
        capture_only: true,
    };
    let mut matched = 0;
    let mut last = i64::MIN;
    snapshot.search(&request, limits, &mut |_| {}, &mut |record, _| {
        assert!(record.ts_nanos >= last, "packets out of time order");
        last = record.ts_nanos;
        matched += 1;
        Ok(true)
    })?;
    Ok(matched)
}

#[test]
fn the_reader_holds_one_snapshot_and_reloads_when_a_segment_is_sealed_or_expired() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("archive");
    let first = part(dir.path(), "first.pcap", "1-40000");
    let second = part(dir.path(), "second.pcap", "40001-1000000000");
    let first_frames = ingest(&root, &first);
    assert_eq!(first_frames, 40_000);
    let filter = format!("host {BUSY}");
    let (in_first, in_all) = (
        tcpdump_count(&first, &filter),
        tcpdump_count(&lan_hour(), &filter),
    );
    assert!(in_first > 0 && in_all > in_first);

    let reader = Reader::open(&root).unwrap();
    let before = reader.snapshot().unwrap();
    assert_eq!(before.generation(), 0);
    assert_eq!(before.summary().packets.rows, 40_000);
    assert_eq!(
        count(&before, &filter, &Limits::default()).unwrap(),
        in_first
    );
    // Nothing changed: the same snapshot, not a reload.
    assert!(Arc::ptr_eq(&before, &reader.snapshot().unwrap()));

    // Another writer seals segments: the next snapshot sees them.
    let second_frames = ingest(&root, &second);
    let after = reader.snapshot().unwrap();
    assert_eq!(after.generation(), 1);
    assert_eq!(after.summary().packets.rows, first_frames + second_frames);
    assert_eq!(count(&after, &filter, &Limits::default()).unwrap(), in_all);
    // The snapshot taken before still answers as of its catalog.
    assert_eq!(
        count(&before, &filter, &Limits::default()).unwrap(),
        in_first
    );
    // The metrics' view is the one held, without a look at the disk.
    assert!(Arc::ptr_eq(&after, &reader.held()));

    // Limits travel with the request: past max_rows is an error, never a short answer.
    let limits = Limits {
        max_rows: Some(10),
        ..Limits::default()
    };
    assert!(matches!(
        count(&after, &filter, &limits),
        Err(ReaderError::Limit(LimitExceeded::Rows(10)))
    ));

    // SQL over the same snapshot.
    let session = reader.sql(&Limits::default()).unwrap();
    let batches = session
        .collect("SELECT count(*) AS n FROM packets", None)
        .unwrap();
    let n = hindsight_output_count(&batches);
    assert_eq!(n, first_frames + second_frames);

    // Connections of an address, paged: five at a time gives what one page gives.
    let query = |limit: usize, after: Option<Vec<u8>>| ConnQuery {
        ranges: vec![network_range(BUSY).unwrap()],
        filter: None,
        time: TimeRange::ALL,
        limit,
        after,
        timeout: None,
    };
    let whole = after.connections(&query(100_000, None)).unwrap();
    assert!(whole.next.is_none());
    assert!(whole.entries.len() > 5);
    let mut paged = Vec::new();
    let mut cursor = None;
    loop {
        let page = after.connections(&query(5, cursor)).unwrap();
        paged.extend(page.entries);
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    assert_eq!(paged, whole.entries);
    let busy = network_range(BUSY).unwrap().0;
    assert!(whole.entries.iter().all(|e| e.addr == busy));

    // A segment expires (retention removes it): the next snapshot goes without it.
    let (mut archive, _) = Archive::open_writer(&root).unwrap();
    let oldest = archive
        .catalog()
        .entries_of(Table::Packets)
        .min_by_key(|e| e.min_ts_nanos)
        .unwrap()
        .clone();
    archive.remove_segment(oldest.segment_id()).unwrap();
    drop(archive);
    let expired = reader.snapshot().unwrap();
    assert_eq!(expired.generation(), 2);
    assert_eq!(
        expired.summary().packets.rows,
        first_frames + second_frames - oldest.rows
    );
    assert!(count(&expired, &filter, &Limits::default()).unwrap() < in_all);
}

fn hindsight_output_count(batches: &[hindsight_store::arrow::array::RecordBatch]) -> u64 {
    use hindsight_store::arrow::array::{Array, Int64Array};
    let column = batches[0].column(0);
    let values = column.as_any().downcast_ref::<Int64Array>().unwrap();
    assert_eq!(values.len(), 1);
    values.value(0) as u64
}

/// Packets of lan-hour pushed by a live writer in this process: answered from
/// its tail before they seal, and exactly once across the seal.
#[test]
fn a_reader_with_the_writers_tail_answers_before_the_seal_and_exactly_once_after() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("archive");
    let first = part(dir.path(), "first.pcap", "1-30000");
    let second = part(dir.path(), "second.pcap", "30001-40000");
    // A sealed part on disk first.
    ingest(&root, &first);
    let options = IngestOptions {
        tail_bytes: 256 << 20,
        ..IngestOptions::default()
    };
    let (mut writer, _) = Ingestor::open(&root, options).unwrap();
    let tail = writer.tail().expect("a tail");
    let reader = Reader::open(&root).unwrap().with_tail(tail);
    let mut capture = hindsight_capture::CaptureReader::open(&second).unwrap();
    while let Some(frame) = capture.next_frame() {
        writer.push(&frame.unwrap()).unwrap();
    }
    writer.publish().unwrap();
    // The sink takes the batch on its own thread: wait until the tail has it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while reader.snapshot().unwrap().unsealed_packets() < 10_000 {
        assert!(
            std::time::Instant::now() < deadline,
            "the tail never filled"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let filter = format!("host {BUSY}");
    let two_parts = dir.path().join("both.pcap");
    let status = Command::new("editcap")
        .arg("-r")
        .arg(lan_hour())
        .arg(&two_parts)
        .arg("1-40000")
        .status()
        .unwrap();
    assert!(status.success());
    let expected = tcpdump_count(&two_parts, &filter);
    let before = reader.snapshot().unwrap();
    assert_eq!(before.summary().packets.rows, 30_000);
    assert_eq!(before.unsealed_packets(), 10_000);
    assert_eq!(
        count(&before, &filter, &Limits::default()).unwrap(),
        expected
    );
    assert_eq!(count(&before, "", &Limits::default()).unwrap(), 40_000);
    let sql_count = |reader: &Reader| {
        let batches = reader
            .sql(&Limits::default())
            .unwrap()
            .collect("SELECT count(*) FROM packets", None)
            .unwrap();
        hindsight_output_count(&batches)
    };
    assert_eq!(sql_count(&reader), 40_000);
    let busy = network_range(BUSY).unwrap();
    let connections = |snapshot: &Snapshot| {
        snapshot
            .connections(&ConnQuery {
                ranges: vec![busy],
                filter: None,
                time: TimeRange::ALL,
                limit: 100_000,
                after: None,
                timeout: None,
            })
            .unwrap()
            .entries
    };
    let unsealed_connections = connections(&before);

    // The seal: the same answers from the segment, and the snapshot taken
    // before it still answers as then (its tail view holds the batches).
    writer.seal().unwrap();
    let after = reader.snapshot().unwrap();
    assert_eq!(after.unsealed_packets(), 0);
    assert_eq!(after.summary().packets.rows, 40_000);
    assert_eq!(
        count(&after, &filter, &Limits::default()).unwrap(),
        expected
    );
    assert_eq!(
        count(&before, &filter, &Limits::default()).unwrap(),
        expected
    );
    assert_eq!(sql_count(&reader), 40_000);
    // Connection records: the same entries from the index once committed.
    assert!(!unsealed_connections.is_empty());
    assert_eq!(connections(&after), unsealed_connections);
    writer.finish().unwrap();
}

/// A search for a name opens the snapshot's connection index, once, and the
/// plan and the execution share it; an address search leaves it closed.
#[test]
fn a_name_search_opens_the_snapshots_connection_index_and_an_address_search_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("archive");
    let first = part(dir.path(), "first.pcap", "1-20000");
    ingest(&root, &first);
    let reader = Reader::open(&root).unwrap();
    let snapshot = reader.snapshot().unwrap();
    let limits = Limits::default();
    let filter = format!("host {BUSY}");
    assert_eq!(
        count(&snapshot, &filter, &limits).unwrap(),
        tcpdump_count(&first, &filter)
    );
    assert!(!snapshot.connection_index_opened());

    let name = r#"dns.qry.name == "router.utorrent.com""#;
    let named = count(&snapshot, name, &limits).unwrap();
    assert!(named > 0, "the name's queries and answers");
    assert!(snapshot.connection_index_opened());
    // The same answer from a search that finds the index already open.
    assert_eq!(count(&snapshot, name, &limits).unwrap(), named);
}
