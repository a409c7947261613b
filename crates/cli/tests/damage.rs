//! Damage to a real archive (lan-hour): bytes overwritten in each column of a
//! packets segment and of a flows segment, a segment cut short, a segment
//! deleted, a catalog line damaged. Each is reported with its segment (and
//! column), no wrong row is ever returned, the rest of the archive answers, and
//! `check --repair` leaves an archive that answers without warnings.

mod common;

use common::{hindsight, lan_hour, ok};

use std::collections::BTreeSet;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Output;

use hindsight_store::parquet::file::reader::{FileReader, SerializedFileReader};

/// A catalogued segment, as `catalog.jsonl` lists it.
#[derive(Clone, Debug)]
struct Segment {
    id: u64,
    table: String,
    file: String,
    rows: u64,
}

/// The segments the catalog lists (adds not removed), in id order.
fn segments(archive: &Path) -> Vec<Segment> {
    let text = std::fs::read_to_string(archive.join("catalog.jsonl")).unwrap();
    let mut listed = std::collections::BTreeMap::new();
    for line in text.lines() {
        let op: serde_json::Value = serde_json::from_str(line).unwrap();
        let id = op["id"].as_u64().unwrap();
        match op["op"].as_str().unwrap() {
            "add" => {
                listed.insert(
                    id,
                    Segment {
                        id,
                        table: op["table"].as_str().unwrap().to_owned(),
                        file: op["file"].as_str().unwrap().to_owned(),
                        rows: op["rows"].as_u64().unwrap(),
                    },
                );
            }
            _ => {
                listed.remove(&id);
            }
        }
    }
    listed.into_values().collect()
}

/// Each column of row group 0 of a segment file, with the offset of the middle
/// of its column chunk (inside a page's compressed bytes, or its header).
fn column_spots(path: &Path) -> Vec<(String, u64)> {
    let reader = SerializedFileReader::new(File::open(path).unwrap()).unwrap();
    let group = reader.metadata().row_group(0);
    group
        .columns()
        .iter()
        .map(|chunk| {
            let start = chunk
                .dictionary_page_offset()
                .unwrap_or(chunk.data_page_offset()) as u64;
            let middle = start + chunk.compressed_size() as u64 / 2;
            (chunk.column_descr().name().to_owned(), middle)
        })
        .collect()
}

/// Inverts 8 bytes of `path` from `offset`.
fn overwrite(path: &Path, offset: u64) {
    let mut bytes = std::fs::read(path).unwrap();
    for byte in &mut bytes[offset as usize..offset as usize + 8] {
        *byte ^= 0xff;
    }
    std::fs::write(path, bytes).unwrap();
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// lan-hour archived whole in packets segments of 20,000 packets.
fn base_archive(dir: &Path) -> PathBuf {
    let archive = dir.join("base");
    common::ingest_whole(&lan_hour(), &archive, &["--segment-packets", "20000"]);
    archive
}

fn run(archive: &Path, args: &[&str]) -> Output {
    let mut all = args.to_vec();
    all.extend(["--archive", archive.to_str().unwrap()]);
    hindsight(&all)
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn lines(text: &str) -> BTreeSet<String> {
    text.lines().map(str::to_owned).collect()
}

/// What an undamaged archive answers: every packet as JSON lines, every
/// packet's capture record, every flow as CSV.
struct Oracle {
    packets_jsonl: BTreeSet<String>,
    pcap_frames: BTreeSet<common::PacketKey>,
    flows_csv: BTreeSet<String>,
    packets: u64,
}

fn oracle(archive: &Path, dir: &Path) -> Oracle {
    let jsonl = ok(&run(archive, &["query", "", "-F", "jsonl"]));
    let pcap = dir.join("oracle.pcap");
    ok(&run(archive, &["query", "", "-o", pcap.to_str().unwrap()]));
    let flows = ok(&run(archive, &["sql", "SELECT * FROM flows", "-F", "csv"]));
    let packets_jsonl = lines(&jsonl);
    Oracle {
        packets: jsonl.lines().count() as u64,
        packets_jsonl,
        pcap_frames: common::read_frames(&pcap).into_iter().collect(),
        flows_csv: lines(&flows),
    }
}

#[test]
fn damaged_columns_are_reported_skipped_and_set_aside() {
    let dir = tempfile::tempdir().unwrap();
    let base = base_archive(dir.path());
    let oracle = oracle(&base, dir.path());
    assert_eq!(oracle.packets, 62_781);
    let listed = segments(&base);
    let packets: Vec<&Segment> = listed.iter().filter(|s| s.table == "packets").collect();
    assert!(packets.len() >= 3, "{packets:?}");
    let victim = packets[1].clone();
    let flows_victim = listed
        .iter()
        .find(|s| s.table == "flows")
        .cloned()
        .expect("a flows segment");

    for segment in [&victim, &flows_victim] {
        let spots = column_spots(&base.join(&segment.file));
        assert!(spots.len() >= 10, "{spots:?}");
        for (index, (column, offset)) in spots.iter().enumerate() {
            let work = dir.path().join(format!("{}-{column}", segment.table));
            copy_dir(&base, &work);
            overwrite(&work.join(&segment.file), *offset);
            let context = format!("{} column {column}", segment.table);

            // The check names the segment and the column.
            let check = run(&work, &["check"]);
            assert_eq!(
                check.status.code(),
                Some(1),
                "{context}: {}",
                stderr(&check)
            );
            let report = String::from_utf8_lossy(&check.stdout).into_owned();
            assert!(
                report.contains(&format!("segment {} ", segment.id))
                    && report.contains(&format!("column {column}:")),
                "{context}: {report}"
            );

            if segment.table == "packets" {
                // Queries answer from the rest: every row they give is right.
                let jsonl = run(&work, &["query", "", "-F", "jsonl"]);
                let pcap = work.join("answer.pcap");
                let export = run(&work, &["query", "", "-o", pcap.to_str().unwrap()]);
                for answer in [&jsonl, &export] {
                    assert!(answer.status.success(), "{context}: {}", stderr(answer));
                }
                let rows = lines(&String::from_utf8_lossy(&jsonl.stdout));
                assert!(
                    rows.is_subset(&oracle.packets_jsonl),
                    "{context}: a wrong row"
                );
                let frames: BTreeSet<_> = common::read_frames(&pcap).into_iter().collect();
                assert!(
                    frames.is_subset(&oracle.pcap_frames),
                    "{context}: a wrong packet"
                );
                // The query that reads the damaged column says which segment it skipped.
                let reads_it = if column == "data" || column == "data_form" {
                    &export
                } else {
                    &jsonl
                };
                let warning = stderr(reads_it);
                assert!(
                    warning.contains(&format!("segment {} ", segment.id))
                        && warning.contains("incomplete"),
                    "{context}: {warning}"
                );
                if index == 0 {
                    let strict = run(&work, &["query", "", "-F", "jsonl", "--strict"]);
                    assert_eq!(strict.status.code(), Some(3), "{}", stderr(&strict));
                }
            } else {
                // SQL reads every column of every flow, and goes without the segment.
                let sql = run(&work, &["sql", "SELECT * FROM flows", "-F", "csv"]);
                assert!(sql.status.success(), "{context}: {}", stderr(&sql));
                let rows = lines(&String::from_utf8_lossy(&sql.stdout));
                assert!(rows.is_subset(&oracle.flows_csv), "{context}: a wrong flow");
                let warning = stderr(&sql);
                if warning.is_empty() {
                    // DataFusion answers a column whose statistics give one value
                    // (`source` here) from the footer, without reading its pages:
                    // then the answer is whole and right.
                    assert_eq!(rows, oracle.flows_csv, "{context}");
                } else {
                    assert!(
                        warning.contains(&format!("segment {} ", segment.id))
                            && warning.contains(&format!("column {column}:")),
                        "{context}: {warning}"
                    );
                }
            }

            // A repair sets the segment aside; then everything answers without warnings.
            if index == 0 || column == "data" || column == "src_addr" || column == "orig_bytes" {
                let repair = run(&work, &["check", "--repair"]);
                assert!(repair.status.success(), "{context}: {}", stderr(&repair));
                let quarantined = work
                    .join("quarantine")
                    .join(Path::new(&segment.file).file_name().unwrap());
                assert!(quarantined.exists(), "{context}");
                let again = run(&work, &["check"]);
                assert!(
                    again.status.success(),
                    "{context}: {}",
                    String::from_utf8_lossy(&again.stdout)
                );
                let count = run(&work, &["query", "", "-c", "--strict"]);
                assert!(count.status.success(), "{context}: {}", stderr(&count));
                assert_eq!(stderr(&count), "", "{context}");
                let expected = if segment.table == "packets" {
                    oracle.packets - segment.rows
                } else {
                    oracle.packets
                };
                assert_eq!(
                    String::from_utf8_lossy(&count.stdout).trim(),
                    expected.to_string(),
                    "{context}"
                );
                let sql = run(
                    &work,
                    &["sql", "SELECT * FROM flows", "--strict", "-F", "csv"],
                );
                assert!(sql.status.success(), "{context}: {}", stderr(&sql));
                assert_eq!(stderr(&sql), "", "{context}");
            }
            std::fs::remove_dir_all(&work).unwrap();
        }
    }
}

#[test]
fn cut_deleted_segments_and_a_damaged_catalog_line_are_skipped_and_repaired() {
    let dir = tempfile::tempdir().unwrap();
    let base = base_archive(dir.path());
    let listed = segments(&base);
    let packets: Vec<&Segment> = listed.iter().filter(|s| s.table == "packets").collect();
    let total: u64 = packets.iter().map(|s| s.rows).sum();
    assert_eq!(total, 62_781);
    let count = |archive: &Path| -> (u64, String, Option<i32>) {
        let output = run(archive, &["query", "", "-c"]);
        (
            String::from_utf8_lossy(&output.stdout)
                .trim()
                .parse()
                .unwrap(),
            stderr(&output),
            output.status.code(),
        )
    };

    // Cut short and deleted: skipped, named, and the rest answers.
    let cut = dir.path().join("cut");
    copy_dir(&base, &cut);
    let victim = packets[1];
    let file = cut.join(&victim.file);
    let bytes = std::fs::read(&file).unwrap();
    std::fs::write(&file, &bytes[..bytes.len() / 2]).unwrap();
    std::fs::remove_file(cut.join(&packets[2].file)).unwrap();
    let (n, warning, code) = count(&cut);
    assert_eq!(code, Some(0), "{warning}");
    assert_eq!(n, total - victim.rows - packets[2].rows, "{warning}");
    assert!(
        warning.contains(&format!("segment {} ", victim.id)) && warning.contains("cut short"),
        "{warning}"
    );
    assert!(
        warning.contains(&format!("segment {} ", packets[2].id)),
        "{warning}"
    );
    let sql = run(
        &cut,
        &["sql", "SELECT count(*) AS n FROM packets", "-F", "csv"],
    );
    assert!(sql.status.success(), "{}", stderr(&sql));
    assert_eq!(
        String::from_utf8_lossy(&sql.stdout).trim(),
        format!("n\n{n}"),
        "{}",
        stderr(&sql)
    );
    assert!(stderr(&sql).contains("incomplete"), "{}", stderr(&sql));
    // Connections come from the connection index: they still answer.
    ok(&run(&cut, &["flows", "--ip", "0.0.0.0/0", "--limit", "5"]));
    // A scan of the flows segments leaves a damaged one out and says so, as
    // SQL over them does.
    let flows_cut = dir.path().join("flows-cut");
    copy_dir(&base, &flows_cut);
    let flows: Vec<&Segment> = listed.iter().filter(|s| s.table == "flows").collect();
    let flows_file = flows_cut.join(&flows.last().unwrap().file);
    let flows_bytes = std::fs::read(&flows_file).unwrap();
    std::fs::write(&flows_file, &flows_bytes[..flows_bytes.len() / 2]).unwrap();
    let scanned = run(&flows_cut, &["flows", "udp", "-F", "jsonl", "-n", "100000"]);
    assert!(scanned.status.success(), "{}", stderr(&scanned));
    assert!(
        stderr(&scanned).contains(&format!("flows segment {}", flows_file.display()))
            && stderr(&scanned).contains("left out"),
        "{}",
        stderr(&scanned)
    );
    let sql = run(
        &flows_cut,
        &[
            "sql",
            "SELECT count(*) AS n FROM flows WHERE ip_proto = 17",
            "-F",
            "csv",
        ],
    );
    assert_eq!(
        String::from_utf8_lossy(&sql.stdout).trim(),
        format!(
            "n\n{}",
            String::from_utf8_lossy(&scanned.stdout).lines().count()
        ),
        "{}",
        stderr(&sql)
    );
    let check = run(&cut, &["check"]);
    assert_eq!(check.status.code(), Some(1));
    let report = String::from_utf8_lossy(&check.stdout).into_owned();
    assert!(
        report.contains("cut short") && report.contains("the file is missing"),
        "{report}"
    );
    ok(&run(&cut, &["check", "--repair"]));
    ok(&run(&cut, &["check"]));
    let (after, warning, _) = count(&cut);
    assert_eq!((after, warning.as_str()), (n, ""));
    // The archive takes new packets again.
    common::ingest_whole(&lan_hour(), &cut, &[]);
    assert_eq!(count(&cut).0, n + total);

    // A damaged catalog line: readers skip the segment it adds, say so, and the
    // writer refuses the archive until a repair catalogues the file again.
    let torn = dir.path().join("torn");
    copy_dir(&base, &torn);
    let catalog = torn.join("catalog.jsonl");
    let text = std::fs::read_to_string(&catalog).unwrap();
    let line_of = text
        .lines()
        .position(|line| line.contains(&format!("\"id\":{},", victim.id)))
        .unwrap();
    let damaged: Vec<String> = text
        .lines()
        .enumerate()
        .map(|(i, line)| {
            if i == line_of {
                line.replacen('{', "#", 1)
            } else {
                line.to_owned()
            }
        })
        .collect();
    std::fs::write(&catalog, damaged.join("\n") + "\n").unwrap();
    let (n, warning, code) = count(&torn);
    assert_eq!(code, Some(0), "{warning}");
    assert_eq!(n, total - victim.rows);
    assert!(
        warning.contains("catalog.jsonl") && warning.contains("incomplete"),
        "{warning}"
    );
    let strict = run(&torn, &["query", "", "-c", "--strict"]);
    assert_eq!(strict.status.code(), Some(3));
    let ingest = run(&torn, &["ingest", "--quiet", lan_hour().to_str().unwrap()]);
    assert!(!ingest.status.success());
    assert!(
        stderr(&ingest).contains("check --repair"),
        "{}",
        stderr(&ingest)
    );
    let repair = run(&torn, &["check", "--repair"]);
    assert!(repair.status.success(), "{}", stderr(&repair));
    assert!(
        String::from_utf8_lossy(&repair.stdout).contains("catalogued again"),
        "{}",
        String::from_utf8_lossy(&repair.stdout)
    );
    ok(&run(&torn, &["check"]));
    let (n, warning, _) = count(&torn);
    assert_eq!((n, warning.as_str()), (total, ""));
}
