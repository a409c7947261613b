//! Links the `hindsight` binary as a position-dependent executable.
//!
//! A position-independent executable carries some 230,000 relative relocations
//! (mostly the vtables and static tables of DataFusion, Arrow and RocksDB) that the
//! dynamic loader applies at every start, touching megabytes of pages: about 5 ms
//! of each `hindsight query`, more than the query itself when the address index
//! answers it. Linked with `-no-pie`, the linker resolves them once. The code is
//! position-independent either way, so only the final link changes.

fn main() {
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-link-arg-bins=-no-pie");
    }
}
