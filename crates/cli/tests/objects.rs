//! Segments copied to S3-compatible object storage (issue 22): a real
//! SeaweedFS server on 127.0.0.1, started by the test (`scripts/setup` builds
//! it); an archive with `[archive] object_store` copies every sealed segment
//! there, byte for byte, and once the local files are gone SQL answers from
//! the copies as it did from the files.

mod common;

use std::path::Path;
use std::process::Command;

use common::seaweedfs::{list, start_seaweedfs};
use common::{lan_hour, ok};

fn sql(archive: &Path, statement: &str) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_hindsight"))
        .args(["sql", statement, "--archive"])
        .arg(archive)
        .args(["-F", "csv"])
        .env("AWS_ACCESS_KEY_ID", "hindsight")
        .env("AWS_SECRET_ACCESS_KEY", "hindsight-secret")
        .output()
        .unwrap()
}

#[test]
fn sealed_segments_are_copied_to_s3_and_read_there_once_the_local_files_are_gone() {
    let dir = tempfile::tempdir().unwrap();
    let store_dir = dir.path().join("seaweedfs");
    std::fs::create_dir_all(&store_dir).unwrap();
    let (_server, s3) = start_seaweedfs(&store_dir);
    let archive = dir.path().join("archive");
    std::fs::create_dir_all(&archive).unwrap();
    std::fs::write(
        archive.join("config.toml"),
        format!(
            "[archive]\nobject_store = \"s3://hindsight/recorder-1\"\nendpoint = \"http://127.0.0.1:{s3}\"\n"
        ),
    )
    .unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_hindsight"))
        .args(["ingest"])
        .arg(lan_hour())
        .arg("--archive")
        .arg(&archive)
        .env("AWS_ACCESS_KEY_ID", "hindsight")
        .env("AWS_SECRET_ACCESS_KEY", "hindsight-secret")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains("segment(s)") && stderr.contains("to s3://hindsight/recorder-1"),
        "{stderr}"
    );

    // Every segment is there, byte for byte, under the archive's own paths.
    let objects = list(s3, "recorder-1/");
    let mut files = Vec::new();
    for table in ["packets", "flows"] {
        for entry in std::fs::read_dir(archive.join(table))
            .unwrap()
            .map(Result::unwrap)
        {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(".parquet") {
                files.push((format!("recorder-1/{table}/{name}"), entry.path()));
            }
        }
    }
    assert!(files.len() >= 2, "{files:?}");
    assert_eq!(objects.len(), files.len(), "{objects:?}");
    for (key, path) in &files {
        let copy = ureq::get(format!("http://127.0.0.1:{s3}/hindsight/{key}"))
            .call()
            .unwrap()
            .into_body()
            .with_config()
            .limit(1 << 30)
            .read_to_vec()
            .unwrap();
        assert_eq!(copy, std::fs::read(path).unwrap(), "{key}");
    }
    // Copied once: a second ingest copies only its own new segments.
    let log = std::fs::read_to_string(archive.join("objects.log")).unwrap();
    assert_eq!(log.lines().count(), files.len());

    let statements = [
        "SELECT count(*) AS n, sum(wire_len) AS bytes, min(ts) AS first FROM packets",
        "SELECT ip_proto, count(DISTINCT src_addr) AS sources FROM packets GROUP BY 1 ORDER BY 1 NULLS FIRST",
        "SELECT state, count(*) AS n, sum(bytes_out) AS b FROM flows GROUP BY state ORDER BY state",
    ];
    let before: Vec<String> = statements.iter().map(|s| ok(&sql(&archive, s))).collect();

    // The local copies expire first: SQL reads the copies in the store.
    for (_, path) in &files {
        std::fs::remove_file(path).unwrap();
    }
    for (statement, expected) in statements.iter().zip(&before) {
        let output = sql(&archive, statement);
        assert_eq!(&ok(&output), expected, "{statement}");
        assert!(
            !String::from_utf8_lossy(&output.stderr).contains("incomplete"),
            "{output:?}"
        );
    }
    // Without the store, the same statement says what it went without.
    std::fs::write(archive.join("config.toml"), "").unwrap();
    let output = sql(&archive, statements[0]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("the file is missing") && stderr.contains("incomplete"),
        "{stderr}"
    );
}
