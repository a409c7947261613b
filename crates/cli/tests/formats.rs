//! Archives frozen by earlier builds (`scripts/freeze-archive`, one directory
//! per released set of formats under `tests/data/archives/`) open with this
//! build and give the answers they gave when frozen; this build's writer adds
//! to them; and a part whose format version is raised past this build's is
//! refused with both versions named, never read.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{hindsight, lan_hour, ok, require_tool};

/// The frozen archives, each a directory with `archive/` and `answers.txt`.
fn frozen() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/archives");
    let mut dirs: Vec<PathBuf> = fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("{}: {e}", root.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.join("answers.txt").is_file())
        .collect();
    dirs.sort();
    assert!(!dirs.is_empty(), "no frozen archive in {}", root.display());
    dirs
}

/// A question of `answers.txt` and the answer it was given.
struct Question {
    args: Vec<String>,
    /// The whole standard output: text with `{ARCHIVE}` for the archive's
    /// path, or the bytes of the file named after `>`.
    answer: Vec<u8>,
}

fn questions(fixture: &Path) -> Vec<Question> {
    let text = fs::read_to_string(fixture.join("answers.txt")).unwrap();
    let mut questions: Vec<Question> = Vec::new();
    for line in text.split_inclusive('\n') {
        let Some(asked) = line.strip_prefix("$ [") else {
            let last = questions
                .last_mut()
                .expect("answers.txt starts with a question");
            last.answer.extend_from_slice(line.as_bytes());
            continue;
        };
        let (array, file) = match asked.trim_end().rsplit_once("] > ") {
            Some((array, file)) => (array, Some(file)),
            None => (asked.trim_end().trim_end_matches(']'), None),
        };
        let args: Vec<String> = serde_json::from_str(&format!("[{array}]")).unwrap();
        let answer = file.map_or_else(Vec::new, |file| fs::read(fixture.join(file)).unwrap());
        questions.push(Question { args, answer });
    }
    questions
}

/// A copy of the frozen archive of `fixture` in `dir` (the test's writer and
/// RocksDB's own files must not touch the committed one).
fn copy_archive(fixture: &Path, dir: &Path) -> PathBuf {
    fn copy(from: &Path, to: &Path) {
        fs::create_dir_all(to).unwrap();
        for entry in fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            let target = to.join(entry.file_name());
            if entry.file_type().unwrap().is_dir() {
                copy(&entry.path(), &target);
            } else {
                fs::copy(entry.path(), &target).unwrap();
            }
        }
    }
    let archive = dir.join("archive");
    copy(&fixture.join("archive"), &archive);
    archive
}

fn ask(archive: &Path, args: &[String]) -> std::process::Output {
    let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
    args.extend(["--archive", archive.to_str().unwrap()]);
    hindsight(&args)
}

#[test]
fn every_frozen_archive_gives_the_answers_it_gave() {
    require_tool("editcap");
    for fixture in frozen() {
        let dir = tempfile::tempdir().unwrap();
        let archive = copy_archive(&fixture, dir.path());
        let path = archive.to_str().unwrap();
        let questions = questions(&fixture);
        for question in &questions {
            let output = ask(&archive, &question.args);
            ok(&output);
            let expected = String::from_utf8_lossy(&question.answer).replace("{ARCHIVE}", path);
            assert!(
                output.stdout == question.answer || output.stdout == expected.as_bytes(),
                "{}: {:?} now answers\n{}\nwhere it answered, when frozen,\n{}",
                fixture.display(),
                question.args,
                String::from_utf8_lossy(&output.stdout),
                expected
            );
        }
        ok(&hindsight(&["check", "--archive", path]));

        // This build's writer adds lan-hour's next packets: the archive's
        // marker is raised to this build's, and the first minutes answer as
        // they did.
        let next = dir.path().join("next.pcap");
        let status = Command::new("editcap")
            .args(["-F", "pcap", "-r"])
            .arg(lan_hour())
            .arg(&next)
            .arg("4001-6000")
            .status()
            .unwrap();
        assert!(status.success());
        common::ingest(&next, &archive);
        let fresh = dir.path().join("fresh");
        common::ingest(&next, &fresh);
        assert_eq!(
            fs::read_to_string(archive.join("HINDSIGHT")).unwrap(),
            fs::read_to_string(fresh.join("HINDSIGHT")).unwrap()
        );
        let count = |archive: &Path, extra: &[&str]| -> u64 {
            let mut args = vec!["query", "tcp", "--count", "--archive"];
            args.push(archive.to_str().unwrap());
            args.extend(extra);
            ok(&hindsight(&args)).trim().parse().unwrap()
        };
        let frozen_tcp = questions
            .iter()
            .find(|q| q.args == ["query", "tcp", "--count"])
            .map(|q| {
                String::from_utf8_lossy(&q.answer)
                    .trim()
                    .parse::<u64>()
                    .unwrap()
            })
            .expect("answers.txt asks `query tcp --count`");
        let first_end = "2012-11-23T17:04:32.567853Z";
        assert_eq!(count(&archive, &["--until", first_end]), frozen_tcp);
        assert_eq!(count(&archive, &[]), frozen_tcp + count(&fresh, &[]));
        ok(&hindsight(&["check", "--archive", path]));
    }
}

#[test]
fn a_part_in_a_newer_format_is_refused_with_both_versions() {
    for fixture in frozen() {
        let marker = fs::read_to_string(fixture.join("archive/HINDSIGHT")).unwrap();
        let lines: Vec<&str> = marker.lines().skip(1).collect();
        assert!(
            !lines.is_empty(),
            "{}: a marker of one line",
            fixture.display()
        );
        for line in lines {
            let (name, version) = line.split_once(' ').unwrap();
            let version: u32 = version.parse().unwrap();
            let dir = tempfile::tempdir().unwrap();
            let archive = copy_archive(&fixture, dir.path());
            let raised = marker.replace(
                &format!("\n{line}\n"),
                &format!("\n{name} {}\n", version + 1),
            );
            fs::write(archive.join("HINDSIGHT"), raised).unwrap();
            for args in [
                ["query", "tcp", "--count"],
                ["flows", "--ip", "10.151.119.2"],
            ] {
                let args = args.map(str::to_owned);
                let output = ask(&archive, &args);
                let stderr = String::from_utf8_lossy(&output.stderr);
                assert!(
                    !output.status.success()
                        && output.stdout.is_empty()
                        && stderr.contains(&format!("format version {};", version + 1))
                        && stderr.contains(&format!("to {version} (a newer hindsight")),
                    "{name} {}: {args:?} gave {}\n{stderr}",
                    version + 1,
                    String::from_utf8_lossy(&output.stdout),
                );
            }
        }

        // A segment file carries its own version too (a copy of one leaves
        // its archive's marker behind): it is left out of the answer, which
        // says so, as for a damaged segment (and fails under --strict).
        let dir = tempfile::tempdir().unwrap();
        let archive = copy_archive(&fixture, dir.path());
        let segment = fs::read_dir(archive.join("packets"))
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .find(|path| path.extension().is_some_and(|ext| ext == "parquet"))
            .unwrap();
        let mut bytes = fs::read(&segment).unwrap();
        let key = b"hindsight.format_version";
        let at = bytes.windows(key.len()).rposition(|w| w == key).unwrap() + key.len();
        // The value follows its length in the footer's Thrift: one ASCII digit.
        let digit = at + bytes[at..].iter().position(u8::is_ascii_digit).unwrap();
        let found = bytes[digit] - b'0';
        bytes[digit] = b'0' + found + 1;
        fs::write(&segment, bytes).unwrap();
        let args = ["query", "tcp", "--count", "--strict"].map(str::to_owned);
        let output = ask(&archive, &args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.code() == Some(3)
                && stderr.contains(&format!("format version {}", found + 1))
                && stderr.contains(&format!("up to {found}"))
                && stderr.contains("the answer is incomplete"),
            "{}\n{stderr}",
            String::from_utf8_lossy(&output.stdout)
        );
    }
}
