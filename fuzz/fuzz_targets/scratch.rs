//! The scratch file of the fuzz targets that read from a path.

use std::path::PathBuf;
use std::sync::OnceLock;

/// One scratch file per fuzzing process (`hindsight-fuzz-STEM-PID.EXTENSION`), in
/// memory where the system has it.
pub fn scratch(stem: &str, extension: &str) -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let dir = if std::path::Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        dir.join(format!(
            "hindsight-fuzz-{stem}-{}.{extension}",
            std::process::id()
        ))
    })
}
