//! Lookups of the connection index: by address, CIDR range and time, both
//! directions, paging, and entries past the expiration cutoff.

use std::time::Duration;

use hindsight_index::connections::{scale, scale_range};
use hindsight_index::{ConnScan, ConnSummary, ConnectionIndex, Expiry};
use hindsight_model::app::{AppFields, NameKind, NameLookup, TlsFields};
use hindsight_model::{Addr16, FlowRecord, FlowSource, FlowState, SegmentId, ip_proto};

const SEC: i64 = 1_000_000_000;

fn v4(a: u8, b: u8, c: u8, d: u8) -> Addr16 {
    Addr16::from_v4_bytes([a, b, c, d])
}

fn conn(ts: i64, src: Addr16, sport: u16, dst: Addr16, dport: u16) -> FlowRecord {
    FlowRecord {
        first_ns: ts * SEC,
        last_ns: ts * SEC + 2 * SEC + 500_000_000,
        src,
        dst,
        src_port: sport,
        dst_port: dport,
        proto: ip_proto::TCP,
        packets_out: 10,
        bytes_out: 1_500,
        packets_in: 8,
        bytes_in: 70_000,
        tcp_flags: 0x1b,
        state: FlowState::SF,
        source: FlowSource::Packets,
        ..FlowRecord::default()
    }
}

fn scan(low: Addr16, high: Addr16, start: i64, end: i64) -> ConnScan {
    ConnScan {
        low,
        high,
        start_ns: start * SEC,
        end_ns: end * SEC,
    }
}

/// The table files of commits (`staged-*.sst`) in an index directory.
fn staged_files(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir)
        .expect("list")
        .filter(|f| {
            f.as_ref()
                .is_ok_and(|f| f.file_name().to_string_lossy().starts_with("staged-"))
        })
        .count()
}

fn sample() -> Vec<FlowRecord> {
    let a = v4(10, 1, 2, 3);
    vec![
        conn(100, a, 40_000, v4(8, 8, 8, 8), 53),
        conn(200, v4(10, 1, 2, 9), 40_001, a, 22),
        conn(300, a, 40_002, v4(192, 0, 2, 1), 443),
        conn(400, v4(10, 1, 3, 1), 40_003, v4(10, 1, 2, 9), 80),
        conn(
            500,
            Addr16::from_v6_bytes([0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]),
            5353,
            a,
            5353,
        ),
    ]
}

#[test]
fn an_address_finds_its_connections_in_both_directions_in_time_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let index = ConnectionIndex::open(dir.path(), Expiry::OFF).expect("open");
    index.insert(&sample()).expect("insert");
    let a = v4(10, 1, 2, 3);
    let page = index.scan(&scan(a, a, 0, 1_000), None, 100).expect("scan");
    let times: Vec<i64> = page.entries.iter().map(|e| e.ts_ns / SEC).collect();
    assert_eq!(times, [100, 200, 300, 500]);
    assert!(page.next.is_none());
    let second = page.entries[1].clone();
    assert!(
        second.reverse,
        "10.1.2.3 was the responder of the ssh connection"
    );
    assert_eq!(second.peer, v4(10, 1, 2, 9));
    assert_eq!((second.port, second.peer_port), (22, 40_001));
    assert_eq!(second.oriented(), (v4(10, 1, 2, 9), 40_001, a, 22));
    assert_eq!(
        second.summary,
        ConnSummary {
            source: FlowSource::Packets,
            state: FlowState::SF,
            tcp_flags: 0x1b,
            bytes_out_scale: scale(1_500),
            bytes_in_scale: scale(70_000),
            packets_out_scale: scale(10),
            packets_in_scale: scale(8),
            duration_ms: 2_500,
        }
    );
    let (low, high) = scale_range(second.summary.bytes_in_scale);
    assert!(low <= 70_000 && 70_000 <= high && high < 2 * low);

    // A time window.
    let page = index.scan(&scan(a, a, 150, 300), None, 100).expect("scan");
    let times: Vec<i64> = page.entries.iter().map(|e| e.ts_ns / SEC).collect();
    assert_eq!(times, [200, 300]);
    // An address with no connections.
    let none = v4(10, 1, 2, 4);
    assert!(
        index
            .scan(&scan(none, none, 0, 1_000), None, 100)
            .expect("scan")
            .entries
            .is_empty()
    );
}

#[test]
fn a_cidr_range_skips_each_address_outside_the_window_and_pages() {
    let dir = tempfile::tempdir().expect("tempdir");
    let index = ConnectionIndex::open(dir.path(), Expiry::OFF).expect("open");
    index.insert(&sample()).expect("insert");
    // 10.1.2.0/24 between 150 s and 450 s: 10.1.2.3 at 200 (reverse) and 300,
    // 10.1.2.9 at 200 and 400 (reverse).
    let range = scan(v4(10, 1, 2, 0), v4(10, 1, 2, 255), 150, 450);
    let all = index.scan(&range, None, 100).expect("scan");
    let seen: Vec<(String, i64)> = all
        .entries
        .iter()
        .map(|e| (e.addr.to_string(), e.ts_ns / SEC))
        .collect();
    assert_eq!(
        seen,
        [
            ("10.1.2.3".to_owned(), 200),
            ("10.1.2.3".to_owned(), 300),
            ("10.1.2.9".to_owned(), 200),
            ("10.1.2.9".to_owned(), 400),
        ]
    );
    // The same in pages of 3 and 1.
    for size in [3, 1] {
        let mut paged = Vec::new();
        let mut after: Option<Vec<u8>> = None;
        loop {
            let page = index.scan(&range, after.as_deref(), size).expect("page");
            assert!(page.entries.len() <= size);
            paged.extend(page.entries);
            match page.next {
                Some(next) => after = Some(next),
                None => break,
            }
        }
        assert_eq!(paged, all.entries, "pages of {size}");
    }
}

#[test]
fn entries_before_the_cutoff_are_not_returned_and_are_dropped_by_compaction() {
    let dir = tempfile::tempdir().expect("tempdir");
    let expiry = Expiry {
        keep_events: 2,
        histogram_granularity: Duration::from_secs(10),
        cutoff_interval: Duration::from_secs(1),
        compaction_interval: Duration::from_secs(1),
    };
    let index = ConnectionIndex::open(dir.path(), expiry).expect("open");
    index.insert(&sample()).expect("insert");
    assert_eq!(index.count().expect("count"), (5, 10));
    // The two newest start at 400 s and 500 s.
    assert_eq!(index.update_cutoff().expect("cutoff"), Some(400 * SEC));
    let a = v4(10, 1, 2, 3);
    let page = index.scan(&scan(a, a, 0, 1_000), None, 100).expect("scan");
    let times: Vec<i64> = page.entries.iter().map(|e| e.ts_ns / SEC).collect();
    assert_eq!(times, [500], "expired entries are hidden before compaction");
    index.compact().expect("compact");
    assert_eq!(index.count().expect("count"), (2, 4));
}

#[test]
fn read_only_open_sees_what_the_writer_flushed() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let index = ConnectionIndex::open(dir.path(), Expiry::OFF).expect("open");
        index.insert(&sample()).expect("insert");
        index.flush().expect("flush");
    }
    let reader = ConnectionIndex::open_read_only(dir.path())
        .expect("open read-only")
        .expect("index exists");
    assert_eq!(reader.count().expect("count"), (5, 10));
    let missing = tempfile::tempdir().expect("tempdir");
    assert!(
        ConnectionIndex::open_read_only(missing.path())
            .expect("open")
            .is_none()
    );
}

#[test]
fn staged_entries_appear_at_commit_the_last_of_a_key_wins_and_the_mark_persists() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = v4(10, 1, 2, 3);
    {
        let index = ConnectionIndex::open(dir.path(), Expiry::OFF).expect("open");
        assert_eq!(index.flows_mark().expect("mark"), None);
        index.stage(&sample());
        assert!(index.staged_bytes() > 0);
        // Staged entries are not visible.
        let page = index.scan(&scan(a, a, 0, 1_000), None, 100).expect("scan");
        assert!(page.entries.is_empty());
        // The same connection again, longer: the later record's summary stays.
        let mut again = sample()[0].clone();
        again.last_ns += 10 * SEC;
        index.stage(&[again]);
        index.commit(Some(SegmentId(7))).expect("commit");
        assert_eq!(index.staged_bytes(), 0);
        let page = index.scan(&scan(a, a, 0, 1_000), None, 100).expect("scan");
        let times: Vec<i64> = page.entries.iter().map(|e| e.ts_ns / SEC).collect();
        assert_eq!(times, [100, 200, 300, 500]);
        assert_eq!(page.entries[0].summary.duration_ms, 12_500);
        assert_eq!(index.count().expect("count"), (5, 10));
        // Committing nothing changes nothing but the mark.
        index.commit(Some(SegmentId(9))).expect("commit");
        index.flush().expect("flush");
    }
    let reopened = ConnectionIndex::open(dir.path(), Expiry::OFF).expect("reopen");
    assert_eq!(reopened.flows_mark().expect("mark"), Some(SegmentId(9)));
    assert_eq!(reopened.count().expect("count"), (5, 10));
    // No table file of a commit is left beside the database.
    assert_eq!(staged_files(dir.path()), 0);
}

#[test]
fn a_large_commit_goes_in_as_a_table_file_and_reads_like_a_small_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    // 80,000 connections of 250 clients to 200 servers, one second apart, and
    // the first 1,000 of them again, ten seconds longer (equal keys: the later
    // summaries stay).
    let records: Vec<FlowRecord> = (0..80_000u32)
        .map(|i| {
            let client = v4(10, 1, (i % 250) as u8, 1);
            let server = v4(192, 0, 2, (i % 200) as u8);
            conn(
                i64::from(i),
                client,
                40_000 + (i % 1000) as u16,
                server,
                443,
            )
        })
        .collect();
    let again: Vec<FlowRecord> = records[..1_000]
        .iter()
        .cloned()
        .map(|mut record| {
            record.last_ns += 10 * SEC;
            record
        })
        .collect();
    let large = ConnectionIndex::open(&dir.path().join("large"), Expiry::OFF).expect("open");
    large.stage(&records);
    large.stage(&again);
    assert!(large.staged_bytes() >= hindsight_index::connections::TABLE_COMMIT_BYTES);
    large.commit(Some(SegmentId(3))).expect("commit");
    let small = ConnectionIndex::open(&dir.path().join("small"), Expiry::OFF).expect("open");
    for chunk in records.chunks(1_000) {
        small.stage(chunk);
        assert!(small.staged_bytes() < hindsight_index::connections::TABLE_COMMIT_BYTES);
        small.commit(Some(SegmentId(3))).expect("commit");
    }
    small.stage(&again);
    small.commit(Some(SegmentId(3))).expect("commit");
    assert_eq!(large.count().expect("count"), (80_000, 160_000));
    assert_eq!(small.count().expect("count"), (80_000, 160_000));
    assert_eq!(large.flows_mark().expect("mark"), Some(SegmentId(3)));
    let first = large
        .scan(&scan(v4(10, 1, 0, 1), v4(10, 1, 0, 1), 0, 0), None, 10)
        .expect("scan");
    assert_eq!(first.entries.len(), 1);
    assert_eq!(first.entries[0].summary.duration_ms, 12_500);
    let client = v4(10, 1, 7, 1);
    let all = scan(v4(0, 0, 0, 0), v4(255, 255, 255, 255), 0, 100_000);
    for window in [scan(client, client, 0, 100_000), all] {
        let mut after = None;
        loop {
            let a = large.scan(&window, after.as_deref(), 777).expect("scan");
            let b = small.scan(&window, after.as_deref(), 777).expect("scan");
            assert_eq!(a, b);
            match a.next {
                Some(next) => after = Some(next),
                None => break,
            }
        }
    }
    assert_eq!(staged_files(&dir.path().join("large")), 0);
}

/// A connection is found by its Community ID (the spec's baseline value for
/// 128.232.110.120:34855 -> 66.35.250.204:80), from either direction's record,
/// in a small commit and a table-file commit alike, within its window only, and
/// not once the cutoff expires it.
#[test]
fn a_community_id_finds_its_connections() {
    let dir = tempfile::tempdir().expect("tempdir");
    let hash = hindsight_model::community::parse_community_id("1:LQU9qZlK+B5F3KDmev6m5PMibrg=")
        .expect("a Community ID");
    let client = v4(128, 232, 110, 120);
    let server = v4(66, 35, 250, 204);
    let mut records: Vec<FlowRecord> = (0..60_000u32)
        .map(|i| {
            conn(
                i64::from(i),
                v4(10, 1, (i % 250) as u8, 1),
                40_000 + (i % 1000) as u16,
                v4(192, 0, 2, 1),
                443,
            )
        })
        .collect();
    records.push(conn(100, client, 34855, server, 80));
    records.push(conn(200, server, 80, client, 34855));
    records.push(conn(300, client, 34856, server, 80));
    for (name, table) in [("small", false), ("large", true)] {
        let index = ConnectionIndex::open(&dir.path().join(name), Expiry::OFF).expect("open");
        if table {
            index.stage(&records);
            assert!(index.staged_bytes() >= hindsight_index::connections::TABLE_COMMIT_BYTES);
            index.commit(None).expect("commit");
        } else {
            for chunk in records.chunks(1_000) {
                index.insert(chunk).expect("insert");
            }
        }
        assert!(index.has_community_keys());
        let found = index.community(&hash, 0, i64::MAX, 10).expect("lookup");
        let starts: Vec<i64> = found.iter().map(|entry| entry.ts_ns / SEC).collect();
        assert_eq!(starts, [100, 200], "{name}");
        assert_eq!(found[0].oriented(), (client, 34855, server, 80));
        assert_eq!(found[1].oriented(), (server, 80, client, 34855));
        let window = index
            .community(&hash, 150 * SEC, 250 * SEC, 10)
            .expect("lookup");
        assert_eq!(window.len(), 1, "{name}");
        assert_eq!(
            index
                .community(&hash, 0, i64::MAX, 1)
                .expect("lookup")
                .len(),
            1
        );
        index.flush().expect("flush");
        drop(index);
        let reader = ConnectionIndex::open_read_only(&dir.path().join(name))
            .expect("open")
            .expect("an index");
        assert_eq!(
            reader
                .community(&hash, 0, i64::MAX, 10)
                .expect("lookup")
                .len(),
            2
        );
    }
    // With a seed: the keys are that seed's hashes, the seed is kept, and
    // opening with another one is refused.
    let seeded_dir = dir.path().join("seeded");
    let seed = 7;
    let seeded = ConnectionIndex::open_seeded(&seeded_dir, Expiry::OFF, seed).expect("open");
    seeded
        .insert(&records[records.len() - 3..])
        .expect("insert");
    let record = &records[records.len() - 3];
    let with_seed = record.community_id_hash(seed);
    assert_eq!(
        seeded
            .community(&with_seed, 0, i64::MAX, 10)
            .expect("lookup")
            .len(),
        2
    );
    assert!(
        seeded
            .community(&hash, 0, i64::MAX, 10)
            .expect("lookup")
            .is_empty()
    );
    seeded.flush().expect("flush");
    drop(seeded);
    match ConnectionIndex::open(&seeded_dir, Expiry::OFF) {
        Err(hindsight_index::IndexError::Seed {
            stored: 7,
            configured: 0,
            ..
        }) => {}
        other => panic!("opened with another seed: {other:?}"),
    }
    let reader = ConnectionIndex::open_read_only(&seeded_dir)
        .expect("open")
        .expect("an index");
    assert_eq!(reader.community_seed(), seed);
    assert_eq!(
        reader
            .community(&with_seed, 0, i64::MAX, 10)
            .expect("lookup")
            .len(),
        2
    );
    drop(reader);
    ConnectionIndex::open_seeded(&seeded_dir, Expiry::OFF, seed).expect("the same seed opens");
    // Expired by the cutoff: gone from lookups, then from the keys.
    let expiring = ConnectionIndex::open(
        &dir.path().join("expiring"),
        Expiry {
            keep_events: 2,
            ..Expiry::OFF
        },
    )
    .expect("open");
    expiring
        .insert(&records[records.len() - 3..])
        .expect("insert");
    expiring.update_cutoff().expect("cutoff");
    expiring.compact().expect("compact");
    let left = expiring.community(&hash, 0, i64::MAX, 10).expect("lookup");
    assert!(
        left.iter().all(|entry| entry.ts_ns >= 200 * SEC),
        "{left:?}"
    );
}

/// Community ID keys of the first layout (`hash | start | the whole connection
/// key`, value the summary), as indexes written before the key was cut to
/// `hash | start | originator` hold them, are still found.
#[test]
fn community_keys_of_the_first_layout_are_still_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let client = v4(128, 232, 110, 120);
    let server = v4(66, 35, 250, 204);
    let record = conn(100, client, 34855, server, 80);
    let hash = record.community_id_hash(0);
    let index = ConnectionIndex::open(dir.path(), Expiry::OFF).expect("open");
    index.insert(std::slice::from_ref(&record)).expect("insert");
    index.flush().expect("flush");
    drop(index);
    // Rewrite the key in the first layout, as that version wrote it.
    {
        let families = ["connections", "histogram", "meta", "community", "names"];
        let mut options = rocksdb::Options::default();
        options.set_merge_operator_associative("hindsight-add-u64", |_, existing, operands| {
            let mut total = existing.map_or(0, |v| u64::from_le_bytes(v.try_into().unwrap()));
            for operand in operands {
                total += u64::from_le_bytes(operand.try_into().unwrap());
            }
            Some(total.to_le_bytes().to_vec())
        });
        let db = rocksdb::DB::open_cf(&options, dir.path(), families).expect("raw open");
        let community = db.cf_handle("community").unwrap();
        let keys: Vec<Box<[u8]>> = db
            .iterator_cf(community, rocksdb::IteratorMode::Start)
            .map(|item| item.unwrap().0)
            .collect();
        assert_eq!(keys.len(), 1);
        assert_eq!(keys[0].len(), 32, "hash, start, originator");
        db.delete_cf(community, &keys[0]).unwrap();
        let connections = db.cf_handle("connections").unwrap();
        let (key, value) = db
            .iterator_cf(connections, rocksdb::IteratorMode::Start)
            .map(Result::unwrap)
            .find(|(key, _)| key[45] & 1 == 0)
            .expect("the originator's entry");
        let mut old = hash[..8].to_vec();
        old.extend_from_slice(&key[16..24]);
        old.extend_from_slice(&key);
        db.put_cf(community, old, value).unwrap();
    }
    let index = ConnectionIndex::open_read_only(dir.path())
        .expect("open")
        .expect("an index");
    let found = index.community(&hash, 0, i64::MAX, 10).expect("lookup");
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].oriented(), (client, 34855, server, 80));
}

/// An error of the connection index names it as such, not as the address
/// index (the two share one error type).
#[test]
fn a_damaged_connection_index_is_named_as_such() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("connections");
    let index = ConnectionIndex::open(&path, Expiry::OFF).expect("open");
    index
        .insert(&[conn(100, v4(10, 0, 0, 1), 1000, v4(10, 0, 0, 2), 80)])
        .expect("insert");
    index.flush().expect("flush");
    drop(index);
    std::fs::write(path.join("CURRENT"), "MANIFEST-999999\n").expect("damage");
    let error = ConnectionIndex::open(&path, Expiry::OFF).expect_err("a damaged index");
    let text = error.to_string();
    assert!(text.starts_with("connection index "), "{text}");
}

/// Application fields of a connection to `host` (its DNS query, TLS server
/// name and JA4 all name it).
fn named(ts: i64, client: Addr16, sport: u16, host: &str) -> FlowRecord {
    let mut record = conn(ts, client, sport, v4(192, 0, 2, 1), 443);
    record.app = Some(Box::new(AppFields {
        tls: Some(TlsFields {
            sni: Some(host.to_owned()),
            ja4: Some(format!("t13d_{}", host.len())),
            ..TlsFields::default()
        }),
        ..AppFields::default()
    }));
    record
}

fn lookup(
    index: &ConnectionIndex,
    lookups: &[NameLookup],
    window: (i64, i64),
    after: Option<&[u8]>,
    limit: usize,
) -> hindsight_index::ConnPage {
    index
        .names(
            lookups,
            window.0 * SEC,
            window.1 * SEC,
            after,
            limit,
            &|_| true,
            &|_, _| true,
        )
        .expect("names")
}

fn snis(page: &hindsight_index::ConnPage) -> Vec<String> {
    page.entries
        .iter()
        .map(|e| {
            let tls = e.app.as_ref().and_then(|a| a.tls.as_ref());
            tls.and_then(|t| t.sni.clone()).unwrap_or_default()
        })
        .collect()
}

/// Names lead to their connections, with their fields: exactly (whatever the
/// case), a domain's subdomains as one range, every name of a kind; in a
/// window, one page at a time, the same from small commits and from a table
/// file; and the name keys expire with the connections.
#[test]
fn names_find_their_connections() {
    let dir = tempfile::tempdir().expect("tempdir");
    let hosts = [
        "example.com",
        "www.Example.com",
        "a.b.example.com",
        "badexample.com",
        "example.org",
        "com",
    ];
    let records: Vec<FlowRecord> = (0..60_000u32)
        .map(|i| {
            let host = hosts[i as usize % hosts.len()];
            named(i64::from(i), v4(10, 1, (i % 250) as u8, 1), 40_000, host)
        })
        .collect();
    let large = ConnectionIndex::open(&dir.path().join("large"), Expiry::OFF).expect("open");
    large.stage(&records);
    assert!(large.staged_bytes() >= hindsight_index::connections::TABLE_COMMIT_BYTES);
    large.commit(None).expect("commit");
    let small = ConnectionIndex::open(&dir.path().join("small"), Expiry::OFF).expect("open");
    for chunk in records.chunks(500) {
        small.insert(chunk).expect("insert");
    }
    // Two names per connection: its SNI and its JA4.
    assert_eq!(large.count_names().expect("count"), 120_000);
    assert_eq!(small.count_names().expect("count"), 120_000);
    let sni = |name: &str| NameLookup::Exact(NameKind::TlsSni, name.to_owned());
    let window = (0, 59);
    let page = lookup(&large, &[sni("WWW.example.COM")], window, None, 100);
    assert_eq!(snis(&page), vec!["www.Example.com"; 10]);
    let subdomains = NameLookup::Subdomains(NameKind::TlsSni, "example.com".to_owned());
    let page = lookup(&large, std::slice::from_ref(&subdomains), window, None, 100);
    let found: std::collections::BTreeSet<String> = snis(&page).into_iter().collect();
    assert_eq!(
        found,
        ["a.b.example.com", "www.Example.com"]
            .map(str::to_owned)
            .into()
    );
    assert_eq!(page.entries.len(), 20);
    // Domain and subdomains, overlapping lookups: each connection once.
    let page = lookup(
        &large,
        &[sni("example.com"), subdomains.clone(), subdomains],
        window,
        None,
        100,
    );
    assert_eq!(page.entries.len(), 30);
    let ja4 = lookup(&large, &[NameLookup::All(NameKind::Ja4)], window, None, 100);
    assert_eq!(ja4.entries.len(), 60);
    // Pages of 7 from both indexes, the whole kind over the whole time.
    for lookups in [
        vec![NameLookup::All(NameKind::TlsSni)],
        vec![sni("com"), sni("example.org")],
    ] {
        let mut after: Option<Vec<u8>> = None;
        let mut seen = 0;
        loop {
            let a = lookup(&large, &lookups, (0, 100_000), after.as_deref(), 7_777);
            let b = lookup(&small, &lookups, (0, 100_000), after.as_deref(), 7_777);
            assert_eq!(a, b);
            seen += a.entries.len();
            match a.next {
                Some(next) => after = Some(next),
                None => break,
            }
        }
        assert_eq!(seen, if lookups.len() == 1 { 60_000 } else { 20_000 });
    }
    // Expired with the connections.
    let expiry = Expiry {
        keep_events: 10_000,
        ..Expiry::OFF
    };
    drop(large);
    let large = ConnectionIndex::open(&dir.path().join("large"), expiry).expect("reopen");
    large.stage(&[named(100_000, v4(10, 9, 9, 9), 1, "late.example.com")]);
    large.commit(None).expect("commit");
    let cutoff = large.update_cutoff().expect("cutoff").expect("a cutoff");
    assert!(cutoff > 40_000 * SEC);
    let page = lookup(&large, &[sni("com")], (0, 100_000), None, 100_000);
    assert!(page.entries.iter().all(|e| e.ts_ns >= cutoff));
    large.compact().expect("compact");
    let kept = large.count_names().expect("count");
    assert!(kept < 2 * 20_100, "{kept} name keys after the cutoff");
    assert_eq!(kept, 2 * large.count().expect("count").0);
}
