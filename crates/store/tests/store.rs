//! Integration tests of the store: segments written and read back through the public
//! API, row-group pruning, and the archive's crash recovery.

use std::fs;
use std::path::Path;

use hindsight_model::{Addr16, DecodeStatus, LinkType, PacketHeaders, PacketRecord, SegmentId};
use hindsight_store::schema::{PacketBatchBuilder, PacketBatchView};
use hindsight_store::segment::{segment_file_name, temp_file_name};
use hindsight_store::{
    Archive, FooterCache, SegmentOptions, SegmentReader, SegmentWriter, StoreError, Table,
    TimeRange,
};

const SECOND: i64 = 1_000_000_000;

fn v4(last: u8) -> Addr16 {
    Addr16::from_v4_bytes([10, 0, 0, last])
}

/// One TCP packet per second from 10.0.0.<i % 50> to 10.0.0.200, except that the
/// rare address 10.0.0.77 appears once, at second `rare_at`.
fn records(count: usize, rare_at: usize) -> Vec<PacketRecord> {
    (0..count)
        .map(|i| {
            let src = if i == rare_at {
                v4(77)
            } else {
                v4((i % 50) as u8)
            };
            PacketRecord {
                ts_nanos: 1_000 * SECOND + i as i64 * SECOND,
                wire_len: 60 + (i % 1400) as u32,
                cap_len: 60,
                link_type: LinkType::ETHERNET,
                iface: 0,
                headers: PacketHeaders {
                    status: DecodeStatus::Complete,
                    ip_version: Some(4),
                    src_addr: Some(src),
                    dst_addr: Some(v4(200)),
                    ip_proto: Some(6),
                    src_port: Some(40_000 + (i % 1000) as u16),
                    dst_port: Some(443),
                    tcp_flags: Some(0x10),
                    ..PacketHeaders::default()
                },
            }
        })
        .collect()
}

fn small_groups() -> SegmentOptions {
    SegmentOptions {
        row_group_rows: 1000,
        page_rows: 250,
        ..SegmentOptions::default()
    }
}

fn write_segment(dir: &Path, id: u64, rows: &[PacketRecord]) -> hindsight_store::SealedSegment {
    write_segment_with(dir, id, rows, &small_groups())
}

fn write_segment_with(
    dir: &Path,
    id: u64,
    rows: &[PacketRecord],
    options: &SegmentOptions,
) -> hindsight_store::SealedSegment {
    let mut writer = SegmentWriter::create(dir, Table::Packets, SegmentId(id), options).unwrap();
    for chunk in rows.chunks(1000) {
        let mut builder = PacketBatchBuilder::with_capacity(chunk.len(), chunk.len() * 4);
        for (i, record) in chunk.iter().enumerate() {
            builder.append(record, &(i as u32).to_be_bytes());
        }
        writer.write(&builder.finish()).unwrap();
    }
    writer.seal().unwrap()
}

/// The rows of `groups` in time order.
fn read_all(reader: &SegmentReader, groups: Vec<usize>) -> Vec<PacketRecord> {
    let (batches, _) = reader
        .read_in_time_order(groups, None, None, None, &[])
        .unwrap();
    let mut out = Vec::new();
    for batch in batches {
        let batch = batch.unwrap();
        let view = PacketBatchView::new(&batch);
        out.extend((0..view.len()).map(|row| view.record(row)));
    }
    out
}

#[test]
fn segment_round_trips_and_summarizes() {
    let dir = tempfile::tempdir().unwrap();
    let rows = records(5000, 4321);
    let sealed = write_segment(dir.path(), 1, &rows);
    assert_eq!(sealed.rows, 5000);
    assert_eq!(sealed.min_ts_nanos, rows[0].ts_nanos);
    assert_eq!(sealed.max_ts_nanos, rows[4999].ts_nanos);
    assert_eq!(
        sealed.path,
        dir.path().join(segment_file_name(SegmentId(1)))
    );
    assert_eq!(
        sealed.addresses.len(),
        52,
        "50 sources, the rare one, one destination"
    );
    assert!(!dir.path().join(temp_file_name(SegmentId(1))).exists());
    let (size, crc) = hindsight_store::archive::checksum_file(&sealed.path).unwrap();
    assert_eq!((size, crc), (sealed.size_bytes, sealed.crc32));
    // Encoding time is kept for every column of the schema.
    assert_eq!(
        sealed.column_cpu.len(),
        Table::Packets.schema().fields().len()
    );

    let reader = SegmentReader::open(&sealed.path).unwrap();
    assert_eq!(reader.rows(), 5000);
    assert_eq!(reader.row_groups(), 5);
    assert_eq!(
        reader.time_bounds(),
        Some((sealed.min_ts_nanos, sealed.max_ts_nanos))
    );
    assert_eq!(read_all(&reader, (0..5).collect()), rows);
    assert_eq!(reader.address_postings().unwrap(), sealed.addresses);

    // In the file, each row group's rows are grouped by host: every source's
    // rows of a row group lie together, in time order.
    let mut in_file = Vec::new();
    for batch in reader.read((0..5).collect(), None).unwrap() {
        let batch = batch.unwrap();
        let view = PacketBatchView::new(&batch);
        in_file.extend((0..view.len()).map(|row| view.record(row)));
    }
    assert_ne!(in_file, rows);
    for group in in_file.chunks(1000) {
        let mut sources: Vec<Addr16> = group.iter().filter_map(|r| r.headers.src_addr).collect();
        sources.dedup();
        let distinct: std::collections::BTreeSet<_> = sources.iter().collect();
        assert_eq!(sources.len(), distinct.len(), "one run per source");
        for pair in group.windows(2) {
            if pair[0].headers.src_addr == pair[1].headers.src_addr {
                assert!(pair[0].ts_nanos <= pair[1].ts_nanos);
            }
        }
    }
}

#[test]
fn a_cached_footer_reads_the_same_rows_and_a_replaced_file_is_read_again() {
    let dir = tempfile::tempdir().unwrap();
    let first = write_segment(dir.path(), 1, &records(3000, 100));
    let second = write_segment(dir.path(), 2, &records(2000, 7));
    let footers = FooterCache::new(FooterCache::DEFAULT_BYTES);
    let opened = SegmentReader::open_cached(&first.path, &footers).unwrap();
    assert_eq!(footers.len(), 1);
    let held = footers.bytes();
    assert!(held > 1000, "{held} bytes for a footer");
    let again = SegmentReader::open_cached(&first.path, &footers).unwrap();
    assert_eq!(footers.len(), 1);
    let groups = (0..opened.row_groups()).collect::<Vec<_>>();
    assert_eq!(read_all(&again, groups.clone()), read_all(&opened, groups));
    assert_eq!(read_all(&again, vec![0]).len(), 1000);

    // The second file's bytes put where the first was: another length, so
    // its own footer is read, not the one held.
    fs::copy(&second.path, &first.path).unwrap();
    let replaced = SegmentReader::open_cached(&first.path, &footers).unwrap();
    assert_eq!(replaced.rows(), 2000);
    let all = (0..replaced.row_groups()).collect::<Vec<_>>();
    assert_eq!(read_all(&replaced, all), records(2000, 7));
    assert_eq!(footers.len(), 1);

    // Bounded: room for one footer keeps one, the latest (the two files
    // now hold the same bytes).
    let one = FooterCache::new(FooterCache::DEFAULT_BYTES);
    SegmentReader::open_cached(&second.path, &one).unwrap();
    let size = one.bytes();
    let small = FooterCache::new(size + size / 2);
    SegmentReader::open_cached(&first.path, &small).unwrap();
    SegmentReader::open_cached(&second.path, &small).unwrap();
    assert_eq!(small.len(), 1);
    assert!(small.bytes() <= size + size / 2);
    small.set_limit(0);
    assert!(small.is_empty());
    let none = FooterCache::new(0);
    SegmentReader::open_cached(&second.path, &none).unwrap();
    assert!(none.is_empty());
}

#[test]
fn granule_selection_reads_only_those_rows() {
    let dir = tempfile::tempdir().unwrap();
    // 20,000 rows: granules 0 (rows 0..8192), 1 (..16384) and 2 (..20000).
    let rows = records(20_000, 17_000);
    // Rows in time order in the file, so that a granule holds known rows.
    let options = SegmentOptions {
        group_by_host: false,
        ..small_groups()
    };
    let sealed = write_segment_with(dir.path(), 1, &rows, &options);
    let rare = sealed
        .addresses
        .iter()
        .find(|(a, _)| *a == v4(77))
        .unwrap()
        .1
        .clone();
    assert_eq!(rare.granules(), &[2]);
    let reader = SegmentReader::open(&sealed.path).unwrap();
    let groups: Vec<usize> = (0..reader.row_groups()).collect();
    let (batches, selected) = reader
        .read_granules(groups.clone(), Some(&rare), None, None, &[])
        .unwrap();
    assert_eq!(selected, 20_000 - 16_384);
    let mut back = Vec::new();
    for batch in batches {
        let batch = batch.unwrap();
        let view = PacketBatchView::new(&batch);
        back.extend((0..view.len()).map(|row| view.record(row)));
    }
    assert_eq!(back, rows[16_384..]);
    // Only some row groups, and a granule spanning two of them.
    let granule_one: hindsight_model::GranuleSet = [1].into_iter().collect();
    let (batches, selected) = reader
        .read_granules(vec![8, 9], Some(&granule_one), None, None, &[])
        .unwrap();
    let read: usize = batches.map(|b| b.unwrap().num_rows()).sum();
    assert_eq!(
        (selected, read),
        (1808, 1808),
        "rows 8192..10000 of groups 8 and 9"
    );
}

#[test]
fn unsorted_batches_are_sorted_by_time() {
    let dir = tempfile::tempdir().unwrap();
    let mut rows = records(1000, 5);
    rows.reverse();
    let sealed = write_segment(dir.path(), 1, &rows);
    let reader = SegmentReader::open(&sealed.path).unwrap();
    let back = read_all(&reader, vec![0]);
    rows.reverse();
    assert_eq!(back, rows);
}

#[test]
fn row_groups_are_pruned_by_time_and_address() {
    let dir = tempfile::tempdir().unwrap();
    let rows = records(5000, 4321);
    let sealed = write_segment(dir.path(), 1, &rows);
    let reader = SegmentReader::open(&sealed.path).unwrap();

    // Seconds 2500..=2600 after the start lie in row group 2 only.
    let window = TimeRange {
        start_nanos: rows[2500].ts_nanos,
        end_nanos: rows[2600].ts_nanos,
    };
    assert_eq!(reader.matching_row_groups(window, None).unwrap(), vec![2]);

    // The rare address is only in group 4; Bloom filters must find it and (with
    // fpp 1%) very likely skip the other four.
    let rare = [(v4(77), v4(77))];
    let groups = reader
        .matching_row_groups(TimeRange::ALL, Some(&rare))
        .unwrap();
    assert!(groups.contains(&4), "{groups:?}");
    assert!(groups.len() <= 2, "{groups:?}");

    // Min/max statistics rule out an absent range everywhere.
    let absent = [(
        Addr16::from_v4_bytes([192, 168, 0, 0]),
        Addr16::from_v4_bytes([192, 168, 255, 255]),
    )];
    assert!(
        reader
            .matching_row_groups(TimeRange::ALL, Some(&absent))
            .unwrap()
            .is_empty()
    );

    // A common address (the destination) is everywhere.
    let common = [(v4(200), v4(200))];
    assert_eq!(
        reader
            .matching_row_groups(TimeRange::ALL, Some(&common))
            .unwrap(),
        vec![0, 1, 2, 3, 4]
    );
}

#[test]
fn recovery_removes_unsealed_and_recatalogues_orphans() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("archive");
    let (mut archive, report) = Archive::open_writer(&root).unwrap();
    assert!(report.is_clean());
    let first = write_segment(&archive.packets_dir(), 1, &records(1000, 3));
    archive.register(&first).unwrap();
    // A crash after rename but before the catalog append leaves an orphan...
    let orphan = write_segment(&archive.packets_dir(), 2, &records(1500, 9));
    // ...and a crash mid-write leaves a temporary file.
    let temp = archive.packets_dir().join(temp_file_name(SegmentId(3)));
    fs::write(&temp, b"PAR1 half a segment").unwrap();
    drop(archive);

    let (archive, report) = Archive::open_writer(&root).unwrap();
    assert_eq!(report.temp_files_removed, vec![temp.clone()]);
    assert_eq!(report.segments_recovered, vec![SegmentId(2)]);
    assert!(report.segments_quarantined.is_empty());
    assert!(!temp.exists());
    let entry = archive.catalog().get(SegmentId(2)).unwrap();
    assert_eq!(entry.rows, 1500);
    assert_eq!(entry.crc32, orphan.crc32);
    assert_eq!(entry.min_ts_nanos, orphan.min_ts_nanos);
    assert_eq!(archive.next_segment_id(), SegmentId(3));
}

#[test]
fn unreadable_orphan_is_quarantined_not_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("archive");
    let (archive, _) = Archive::open_writer(&root).unwrap();
    let bad = archive.packets_dir().join(segment_file_name(SegmentId(1)));
    fs::write(&bad, b"not parquet at all").unwrap();
    drop(archive);
    let (archive, report) = Archive::open_writer(&root).unwrap();
    assert_eq!(report.segments_quarantined.len(), 1);
    assert!(report.segments_quarantined[0].exists());
    assert!(archive.catalog().is_empty());
}

#[test]
fn second_writer_is_refused_while_readers_are_not() {
    let dir = tempfile::tempdir().unwrap();
    let (_writer, _) = Archive::open_writer(dir.path()).unwrap();
    let error = Archive::open_writer(dir.path()).unwrap_err();
    assert!(matches!(error, StoreError::Locked { .. }), "{error}");
    assert!(Archive::open_reader(dir.path()).is_ok());
}

#[test]
fn foreign_directories_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("notes.txt"), b"mine").unwrap();
    let error = Archive::open_writer(dir.path()).unwrap_err();
    assert!(matches!(error, StoreError::NotAnArchive { .. }), "{error}");
    let error = Archive::open_reader(dir.path()).unwrap_err();
    assert!(matches!(error, StoreError::NotAnArchive { .. }), "{error}");
}

#[test]
fn a_removed_segment_stays_removed_even_if_its_file_survives_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let (mut archive, _) = Archive::open_writer(dir.path()).unwrap();
    let sealed = write_segment(&archive.packets_dir(), 1, &records(1000, 3));
    let path = sealed.path.clone();
    archive.register(&sealed).unwrap();
    archive.remove_segment(SegmentId(1)).unwrap();
    assert!(archive.catalog().is_empty());
    assert!(!path.exists());
    // A crash between the catalog line and the unlink leaves the file: recovery
    // deletes it instead of entering it again.
    let leftover = write_segment(&archive.packets_dir(), 1, &records(1000, 3)).path;
    drop(archive);
    let (archive, report) = Archive::open_writer(dir.path()).unwrap();
    assert_eq!(report.removed_leftovers, vec![leftover.clone()]);
    assert!(report.segments_recovered.is_empty());
    assert!(!leftover.exists());
    assert!(archive.catalog().is_empty());
    assert_eq!(archive.next_segment_id(), SegmentId(2));
}

/// Retention that cycles the disk leaves the catalog as long as its live
/// segments, not one line for every segment ever sealed; what recovery needs
/// of the removals is kept.
#[test]
fn retention_keeps_the_catalog_as_long_as_its_live_segments() {
    let dir = tempfile::tempdir().unwrap();
    let (mut archive, _) = Archive::open_writer(dir.path()).unwrap();
    let file_of = |id: u64| archive.packets_dir().join(segment_file_name(SegmentId(id)));
    let files: Vec<_> = (0..=1200).map(file_of).collect();
    // Catalogued without files: removing one whose file is gone is a removal.
    for id in 1..=1200u64 {
        let sealed = hindsight_store::SealedSegment {
            table: Table::Packets,
            id: SegmentId(id),
            path: files[id as usize].clone(),
            rows: 1,
            min_ts_nanos: id as i64,
            max_ts_nanos: id as i64,
            size_bytes: 1,
            crc32: 0,
            addresses: Vec::new(),
            covered: Vec::new(),
            column_cpu: Vec::new(),
        };
        archive.register(&sealed).unwrap();
    }
    let catalog_path = dir.path().join("catalog.jsonl");
    let full = fs::read_to_string(&catalog_path).unwrap().lines().count();
    assert_eq!(full, 1200);
    for id in 1..=1190u64 {
        archive.remove_segment(SegmentId(id)).unwrap();
        if id == 5 {
            // As if its unlink had failed: the file is still there.
            fs::write(&files[5], b"leftover").unwrap();
        }
    }
    let text = fs::read_to_string(&catalog_path).unwrap();
    let lines = text.lines().count();
    // 2,390 lines without compaction; at most the live segments, the
    // removals since the last compaction, and the two it kept.
    assert!(lines < 1200, "{lines} catalog lines for 10 live segments");
    assert!(text.contains(r#"{"op":"remove","id":5}"#), "{text}");
    drop(archive);
    let reader = Archive::open_reader(dir.path()).unwrap();
    let live: Vec<u64> = reader.catalog().entries().map(|e| e.id).collect();
    assert_eq!(live, (1191..=1200).collect::<Vec<_>>());
    let (archive, report) = Archive::open_writer(dir.path()).unwrap();
    assert_eq!(report.removed_leftovers, vec![files[5].clone()]);
    assert!(report.segments_recovered.is_empty());
    assert_eq!(archive.next_segment_id(), SegmentId(1201));
}

/// A segment or an archive written by a newer format version is refused, with a
/// message naming the file and both versions.
#[test]
fn newer_format_versions_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let sealed = write_segment(dir.path(), 1, &records(100, 7));
    // The footer's key-value metadata holds the version as text; one digit more
    // keeps the file valid Parquet.
    let mut bytes = fs::read(&sealed.path).unwrap();
    let key = b"hindsight.format_version";
    let at = bytes
        .windows(key.len())
        .rposition(|w| w == key)
        .expect("the version key in the footer");
    let value = at
        + key.len()
        + bytes[at + key.len()..]
            .iter()
            .position(|&b| {
                b == hindsight_store::segment::FORMAT_VERSION
                    .to_string()
                    .as_bytes()[0]
            })
            .unwrap();
    bytes[value] = b'9';
    fs::write(&sealed.path, &bytes).unwrap();
    let error = SegmentReader::open(&sealed.path).unwrap_err();
    let text = error.to_string();
    assert!(matches!(error, StoreError::NewerFormat { .. }), "{text}");
    assert!(
        text.contains("seg-")
            && text.contains("version 9")
            && text.contains(&hindsight_store::segment::FORMAT_VERSION.to_string()),
        "{text}"
    );

    let archive = tempfile::tempdir().unwrap();
    drop(Archive::open_writer(archive.path()).unwrap());
    fs::write(archive.path().join("HINDSIGHT"), "hindsight archive v7\n").unwrap();
    let error = Archive::open_reader(archive.path())
        .unwrap_err()
        .to_string();
    assert!(error.contains("v7") && error.contains("v1"), "{error}");
}

/// Found by the `segment_reader` fuzz target: a flows segment whose offset index
/// puts a page before its column chunk made the `parquet` crate's page reader
/// overflow a subtraction. The reader refuses such a footer as corruption.
#[test]
fn a_footer_with_pages_outside_their_chunk_is_corruption() {
    let path = Path::new(
        &std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo test sets CARGO_MANIFEST_DIR"),
    )
    .join("tests/data/fuzz-page-before-chunk.parquet");
    let error = SegmentReader::open(&path).unwrap_err();
    assert!(matches!(error, StoreError::Corrupt { .. }), "{error}");
    assert!(error.to_string().contains("outside"), "{error}");
}

/// `records` made varied in every summarised field: UDP and ICMP, VLANs,
/// IPv6, frames with no IP layer, two interfaces, fragments.
fn varied_records(count: usize) -> Vec<PacketRecord> {
    let mut rows = records(count, count / 2);
    for (i, row) in rows.iter_mut().enumerate() {
        let h = &mut row.headers;
        h.eth_type = Some(0x0800);
        row.iface = (i % 3 == 0) as u32;
        if i % 7 == 0 {
            h.ip_proto = Some(17);
        }
        if i % 11 == 0 {
            h.vlan_outer = Some(100 + (i % 2) as u16);
        }
        if i % 13 == 0 {
            h.ip_version = Some(6);
            h.eth_type = Some(0x86dd);
            h.src_addr = Some(Addr16([
                0x20,
                1,
                0x0d,
                0xb8,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                (i % 5) as u8,
            ]));
        }
        if i % 17 == 0 {
            h.ip_version = None;
            h.src_addr = None;
            h.dst_addr = None;
            h.ip_proto = None;
            h.src_port = None;
            h.dst_port = None;
            h.eth_type = Some(0x0806);
        }
        if i % 19 == 0 {
            h.status = DecodeStatus::Fragment;
        }
        if i % 23 == 0 {
            h.src_port = h.src_port.map(|_| 53);
            h.tcp_flags = Some(0x02);
        }
    }
    rows
}

/// The summary's rows as text, one line per row, sorted.
fn summary_lines(batch: &hindsight_store::arrow::array::RecordBatch) -> Vec<String> {
    use hindsight_store::arrow::array::AsArray;
    use hindsight_store::arrow::datatypes::TimestampNanosecondType;
    use hindsight_store::arrow::util::display::array_value_to_string;
    let mut lines: Vec<String> = (0..batch.num_rows())
        .map(|row| {
            let ts = batch.column(0).as_primitive::<TimestampNanosecondType>();
            std::iter::once(ts.value(row).to_string())
                .chain(
                    batch.columns()[1..]
                        .iter()
                        .map(|c| array_value_to_string(c, row).unwrap()),
                )
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    lines.sort();
    lines
}

/// The oracle of a summary of `kind`: every row of the segment read back,
/// grouped by the text of its minute and its dimensions, as
/// [`summary_lines`] prints a summary.
fn summary_oracle(
    reader: &SegmentReader,
    kind: hindsight_store::segment::summary::SummaryKind,
) -> Vec<String> {
    use hindsight_store::arrow::array::AsArray;
    use hindsight_store::arrow::datatypes::{TimestampNanosecondType, UInt32Type};
    use hindsight_store::arrow::util::display::array_value_to_string;
    use hindsight_store::segment::summary::SUMMARY_GRANULE_NS;

    let mut groups = std::collections::BTreeMap::<String, (u64, u64, u64)>::new();
    for batch in reader
        .read((0..reader.row_groups()).collect(), None)
        .unwrap()
    {
        let batch = batch.unwrap();
        let ts = batch
            .column_by_name("ts")
            .unwrap()
            .as_primitive::<TimestampNanosecondType>();
        let wire = batch
            .column_by_name("wire_len")
            .unwrap()
            .as_primitive::<UInt32Type>();
        let cap = batch
            .column_by_name("cap_len")
            .unwrap()
            .as_primitive::<UInt32Type>();
        for row in 0..batch.num_rows() {
            let minute = ts.value(row).div_euclid(SUMMARY_GRANULE_NS) * SUMMARY_GRANULE_NS;
            let mut key = vec![minute.to_string()];
            for &name in kind.dimensions() {
                let mut value =
                    array_value_to_string(batch.column_by_name(name).unwrap(), row).unwrap();
                // The services summary merges the ports from 1024 up.
                let port = name == "src_port" || name == "dst_port";
                if kind.merges_ports() && port && value.parse::<u32>().is_ok_and(|p| p >= 1024) {
                    value = "65535".to_owned();
                }
                key.push(value);
            }
            let sums = groups.entry(key.join(" ")).or_default();
            sums.0 += 1;
            sums.1 += u64::from(wire.value(row));
            sums.2 += u64::from(cap.value(row));
        }
    }
    groups
        .into_iter()
        .map(|(key, (packets, wire, cap))| format!("{key} {packets} {wire} {cap}"))
        .collect()
}

#[test]
fn a_packets_segment_carries_its_summary_by_minute_and_header_fields() {
    use hindsight_store::segment::summary::{FLOWS_MAX_SHARE, SummaryKind};

    let dir = tempfile::tempdir().unwrap();
    let varied = varied_records(5000);
    // The same forty times as dense in time, with three source ports: many
    // packets of each conversation a minute.
    let mut conversations = varied.clone();
    for (i, row) in conversations.iter_mut().enumerate() {
        row.ts_nanos = 1_000 * SECOND + i as i64 * SECOND / 40;
        if let Some(port) = &mut row.headers.src_port {
            *port = 40_000 + (i % 3) as u16;
        }
    }
    for (id, rows, has_flows) in [(1, &varied, false), (2, &conversations, true)] {
        let sealed = write_segment(dir.path(), id, rows);
        let reader = SegmentReader::open(&sealed.path).unwrap();
        for kind in SummaryKind::ALL {
            let expected = summary_oracle(&reader, kind);
            assert!(expected.len() > 100, "{kind:?}: {} groups", expected.len());
            // Flows is written only within its share of the rows.
            let within = kind != SummaryKind::Flows
                || expected.len() as u64 * FLOWS_MAX_SHARE <= rows.len() as u64;
            if kind == SummaryKind::Flows {
                assert_eq!(within, has_flows, "{} groups", expected.len());
            }
            match reader.summary(kind).unwrap() {
                Some(summary) => {
                    assert!(within, "{kind:?} written past its share");
                    assert_eq!(summary_lines(&summary), expected, "{kind:?}");
                    // A projection reads those columns, `packets` last.
                    let projection = [3, 0];
                    let some = reader
                        .summary_columns(kind, Some(&projection))
                        .unwrap()
                        .unwrap();
                    let packets = summary.schema().index_of("packets").unwrap();
                    assert_eq!(some, summary.project(&[3, 0, packets]).unwrap());
                }
                None => assert!(!within, "{kind:?} missing"),
            }
        }
        // Other readers skip them: every row reads back as written.
        assert_eq!(&read_all(&reader, (0..reader.row_groups()).collect()), rows);
    }

    // A segment below `summary_min_rows` has none: its rows answer.
    let small = write_segment(dir.path(), 3, &conversations[..4095]);
    let reader = SegmentReader::open(&small.path).unwrap();
    for kind in SummaryKind::ALL {
        assert_eq!(reader.summary(kind).unwrap(), None);
    }
}

#[test]
fn a_segment_carries_the_summaries_configured_and_each_is_the_same() {
    use hindsight_store::segment::summary::{SummaryKind, SummarySet};

    let dir = tempfile::tempdir().unwrap();
    let mut rows = varied_records(5000);
    for (i, row) in rows.iter_mut().enumerate() {
        row.ts_nanos = 1_000 * SECOND + i as i64 * SECOND / 40;
        if let Some(port) = &mut row.headers.src_port {
            *port = 40_000 + (i % 3) as u16;
        }
    }
    let all = write_segment(dir.path(), 1, &rows);
    let all = SegmentReader::open(&all.path).unwrap();
    let sets = [
        vec![],
        vec![SummaryKind::Services],
        // Hosts without flows is grouped from the rows, not from flows.
        vec![SummaryKind::Hosts],
        vec![SummaryKind::Services, SummaryKind::Flows],
        vec![SummaryKind::Hosts, SummaryKind::Flows],
    ];
    for (id, kinds) in (2..).zip(sets) {
        let options = SegmentOptions {
            summaries: SummarySet::of(kinds.iter().copied()),
            ..small_groups()
        };
        let sealed = write_segment_with(dir.path(), id, &rows, &options);
        let reader = SegmentReader::open(&sealed.path).unwrap();
        for kind in SummaryKind::ALL {
            let summary = reader.summary(kind).unwrap();
            if kinds.contains(&kind) {
                let summary = summary.unwrap_or_else(|| panic!("{kinds:?}: {kind:?} missing"));
                let full = all.summary(kind).unwrap().unwrap();
                assert_eq!(summary, full, "{kinds:?}: {kind:?}");
                assert_eq!(summary_lines(&summary), summary_oracle(&reader, kind));
            } else {
                assert_eq!(summary, None, "{kinds:?}: {kind:?} not configured");
            }
        }
        // The rows are the same whatever the summaries.
        assert_eq!(
            read_all(&reader, (0..reader.row_groups()).collect()),
            rows,
            "{kinds:?}"
        );
    }
}

#[test]
fn a_damaged_summary_is_corruption_named_and_the_rows_still_read() {
    use hindsight_store::segment::summary::{SummaryKind, SummaryLocation};

    let dir = tempfile::tempdir().unwrap();
    let rows = varied_records(5000);
    let sealed = write_segment(dir.path(), 1, &rows);
    let location = {
        let file = fs::File::open(&sealed.path).unwrap();
        let metadata =
            hindsight_store::parquet::file::reader::SerializedFileReader::new(file).unwrap();
        use hindsight_store::parquet::file::reader::FileReader;
        let text = metadata
            .metadata()
            .file_metadata()
            .key_value_metadata()
            .unwrap()
            .iter()
            .find(|kv| kv.key == SummaryKind::Hosts.key())
            .and_then(|kv| kv.value.clone())
            .unwrap();
        SummaryLocation::parse(&text).unwrap()
    };
    let pristine = fs::read(&sealed.path).unwrap();
    for at in [0, location.len / 2, location.len - 1] {
        let mut bytes = pristine.clone();
        bytes[(location.offset + at) as usize] ^= 0x40;
        fs::write(&sealed.path, &bytes).unwrap();
        let reader = SegmentReader::open(&sealed.path).unwrap();
        assert!(reader.summary(SummaryKind::Services).is_ok());
        match reader.summary(SummaryKind::Hosts) {
            Err(StoreError::Corrupt {
                path,
                offset,
                reason,
            }) => {
                assert_eq!(path, sealed.path);
                assert_eq!(offset, location.offset);
                assert!(
                    reason.starts_with("summary hindsight.summary: CRC-32"),
                    "{reason}"
                );
            }
            other => panic!("byte {at} of the summary changed: {other:?}"),
        }
        assert_eq!(read_all(&reader, (0..reader.row_groups()).collect()), rows);
    }
}

/// A summary's pages crafted past its CRC (found by the `segment_reader`
/// fuzz target): the `parquet` crate's definition-level decoder panics on
/// them; the summary's decoder answers an error.
#[test]
fn a_crafted_summary_the_parquet_decoder_panics_on_is_an_error() {
    use hindsight_store::segment::summary::{SummaryKind, decode};
    let bytes = fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/fuzz-summary-def-levels.parquet"),
    )
    .unwrap();
    for kind in SummaryKind::ALL {
        let error = decode(bytes.clone(), Path::new("seg.parquet"), kind, None).unwrap_err();
        assert!(error.contains("Parquet decoder failed"), "{error}");
    }
}
