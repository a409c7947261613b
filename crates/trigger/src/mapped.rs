//! The dump writer (FlowScope's): the dump's size is known before its first byte
//! is written, so its blocks are reserved up front (`posix_fallocate`: a full disk
//! fails the dump before anything is copied, and the file is not fragmented by
//! growing) and the bytes are copied into a shared mapping of the file, without a
//! system call per buffer. One `msync` and one `fsync` make it durable.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::ptr::NonNull;

/// A new file of a fixed length, mapped for writing.
pub(crate) struct MappedFile {
    file: File,
    map: Option<(NonNull<u8>, usize)>,
}

impl MappedFile {
    /// Creates (or truncates) `path` with `len` bytes reserved and maps it.
    pub(crate) fn create(path: &Path, len: usize) -> io::Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)?;
        if len == 0 {
            return Ok(Self { file, map: None });
        }
        let size = libc::off_t::try_from(len)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "dump too large"))?;
        // SAFETY: a valid descriptor we own and a non-negative range.
        let reserved = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, size) };
        match reserved {
            0 => {}
            // File systems without fallocate: a sparse file of the same length.
            libc::EOPNOTSUPP | libc::EINVAL => file.set_len(len as u64)?,
            error => return Err(io::Error::from_raw_os_error(error)),
        }
        // SAFETY: maps `len` bytes of a file we own that is at least `len` long;
        // the result is checked before use.
        let address = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if address == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let map = NonNull::new(address.cast::<u8>()).map(|p| (p, len));
        Ok(Self { file, map })
    }

    /// The file's bytes, to fill.
    pub(crate) fn bytes(&mut self) -> &mut [u8] {
        match self.map {
            // SAFETY: the mapping is `len` bytes, writable, and lives until
            // `self` unmaps it; `&mut self` makes this the only reference.
            Some((pointer, len)) => unsafe {
                std::slice::from_raw_parts_mut(pointer.as_ptr(), len)
            },
            None => &mut [],
        }
    }

    /// Writes the mapped bytes back, unmaps, and syncs the file.
    pub(crate) fn finish(mut self) -> io::Result<()> {
        if let Some((pointer, len)) = self.map.take() {
            // SAFETY: the mapping made in `create`, whole.
            let synced = unsafe { libc::msync(pointer.as_ptr().cast(), len, libc::MS_SYNC) };
            let error = (synced != 0).then(io::Error::last_os_error);
            // SAFETY: as above; nothing refers to the mapping after this.
            unsafe { libc::munmap(pointer.as_ptr().cast(), len) };
            if let Some(error) = error {
                return Err(error);
            }
        }
        self.file.sync_all()
    }
}

impl Drop for MappedFile {
    fn drop(&mut self) {
        if let Some((pointer, len)) = self.map.take() {
            // SAFETY: the mapping made in `create`; nothing refers to it after drop.
            unsafe { libc::munmap(pointer.as_ptr().cast(), len) };
        }
    }
}
