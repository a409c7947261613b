//! Links the `hindsight` binary as a position-dependent executable, and names
//! the commit it was built from.
//!
//! A position-independent executable carries some 230,000 relative relocations
//! (mostly the vtables and static tables of DataFusion, Arrow and RocksDB) that the
//! dynamic loader applies at every start, touching megabytes of pages: about 5 ms
//! of each `hindsight query`, more than the query itself when the address index
//! answers it. Linked with `-no-pie`, the linker resolves them once. The code is
//! position-independent either way, so only the final link changes.
//!
//! `hindsight --version` says `VERSION (COMMIT)`: `HINDSIGHT_COMMIT` if set (a
//! build from a source tarball), else what `git` says of the checkout, else
//! `unknown`.

use std::process::Command;

fn main() {
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-link-arg-bins=-no-pie");
    }
    println!("cargo:rerun-if-env-changed=HINDSIGHT_COMMIT");
    let git = |args: &[&str]| {
        let out = Command::new("git").args(args).output().ok()?;
        let text = String::from_utf8(out.stdout).ok()?;
        (out.status.success() && !text.trim().is_empty()).then(|| text.trim().to_owned())
    };
    // A new commit or checkout moves HEAD or the branch it names (a path that
    // does not exist would make every build run this again).
    for path in ["HEAD", "packed-refs", "refs/heads"] {
        if let Some(path) = git(&["rev-parse", "--path-format=absolute", "--git-path", path])
            .filter(|path| std::path::Path::new(path).exists())
        {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    let commit = std::env::var("HINDSIGHT_COMMIT")
        .ok()
        .filter(|commit| !commit.is_empty())
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=HINDSIGHT_COMMIT={commit}");
}
