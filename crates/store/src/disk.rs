//! The filesystem an archive lives on: its free bytes and its mount point,
//! what the free-space floor (`[packets] min_free_bytes`) is checked against
//! and what a full disk's message names.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Bytes available to unprivileged users on the filesystem of `path` (what
/// `df` shows as available), or `None` if it cannot be asked.
pub fn free_bytes(path: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs is plain data, zero is a valid value of it.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a pointer to a statvfs we own.
    let status = unsafe { libc::statvfs(c_path.as_ptr(), &raw mut stat) };
    (status == 0).then(|| stat.f_bavail.saturating_mul(stat.f_frsize))
}

/// The mount point of the filesystem holding `path`: its highest ancestor on
/// the same device (`path` itself if it cannot be asked).
pub fn mount_point(path: &Path) -> PathBuf {
    let Ok(path) = path.canonicalize() else {
        return path.to_owned();
    };
    let Ok(device) = path.metadata().map(|m| m.dev()) else {
        return path;
    };
    let mut mount = path.as_path();
    while let Some(parent) = mount.parent() {
        match parent.metadata() {
            Ok(meta) if meta.dev() == device => mount = parent,
            _ => break,
        }
    }
    mount.to_owned()
}

/// Whether `error` or one of its sources is ENOSPC (or EDQUOT: a quota is
/// a full disk to the writer too).
pub fn is_disk_full(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(error) = next {
        if let Some(io) = error.downcast_ref::<std::io::Error>()
            && (io.kind() == std::io::ErrorKind::StorageFull
                || io.kind() == std::io::ErrorKind::QuotaExceeded
                || matches!(io.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT)))
        {
            return true;
        }
        // Wrapped where the source chain is lost (Parquet, RocksDB): by its text.
        let text = error.to_string();
        if text.contains("No space left on device") || text.contains("NoSpace") {
            return true;
        }
        next = error.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_root_filesystem_has_a_mount_point_and_free_bytes() {
        let dir = tempfile::tempdir().unwrap();
        assert!(free_bytes(dir.path()).is_some());
        let mount = mount_point(dir.path());
        assert!(dir.path().canonicalize().unwrap().starts_with(&mount));
        assert_eq!(free_bytes(Path::new("/nonexistent/x")), None);
    }

    #[test]
    fn enospc_is_a_full_disk_however_it_is_wrapped() {
        #[derive(Debug)]
        struct Writing(std::io::Error);
        impl std::fmt::Display for Writing {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("cannot write a segment")
            }
        }
        impl std::error::Error for Writing {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let io = std::io::Error::from_raw_os_error(libc::ENOSPC);
        assert!(is_disk_full(&io));
        assert!(is_disk_full(&Writing(io)));
        // Its text only, as RocksDB reports it.
        assert!(is_disk_full(&std::io::Error::other(
            "IO error: No space left on device: While appending to file"
        )));
        let other = std::io::Error::from_raw_os_error(libc::EACCES);
        assert!(!is_disk_full(&Writing(other)));
    }
}
