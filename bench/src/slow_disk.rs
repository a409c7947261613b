//! A disk slower than the machine's, for the loss benchmark: the tools write
//! into an ext4 filesystem on a loop device whose backing file is served by a
//! FUSE filesystem in this process, which lets writes through at a set rate.
//! So a capture that writes more bytes a packet runs out of disk bandwidth at
//! a lower packet rate, as on a recorder whose disk is the bottleneck
//! (Hyperion's figure 16).
//!
//! The machines this runs on cannot slow a disk otherwise: cgroup v1's
//! `blkio.throttle` does not hold back buffered writeback, and there is no
//! device-mapper (`dm-delay`), `nbd` or `ublk`. Only FUSE and loop devices.
//!
//! The page cache would hide a slow disk for the seconds a benchmark runs, so
//! the loop device's dirty pages are bounded (`max_bytes` with
//! `strict_limit` in its `/sys/class/bdi` entry): past the bound, a writer
//! waits in the kernel until the disk has taken its pages, as it would with
//! a full cache.
//!
//! Needs root (mount, losetup).

use std::ffi::OsStr;
use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, UNIX_EPOCH};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, LockOwner,
    OpenFlags, ReplyAttr, ReplyData, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyWrite, Request,
    TimeOrNow, WriteFlags,
};

/// The backing file's name in the FUSE filesystem.
const IMAGE: &str = "disk.img";
/// The backing file's inode (the root directory is 1).
const IMAGE_INO: u64 = 2;

/// An ext4 filesystem whose writes reach the real disk at a set rate; removed
/// (unmounted, its loop device detached, its files deleted) when dropped.
pub struct SlowDisk {
    root: PathBuf,
    loop_device: String,
    session: Option<fuser::BackgroundSession>,
}

impl std::fmt::Debug for SlowDisk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlowDisk")
            .field("root", &self.root)
            .field("loop_device", &self.loop_device)
            .finish_non_exhaustive()
    }
}

impl SlowDisk {
    /// Makes a filesystem of `size_bytes` under `root` (which it creates and
    /// then owns), whose device takes `bytes_per_sec` of writes a second and
    /// holds at most `dirty_bytes` of written pages not yet on it.
    pub fn new(root: &Path, size_bytes: u64, bytes_per_sec: u64, dirty_bytes: u64) -> Self {
        Self::remove(root);
        for sub in ["backing", "fuse", "mnt"] {
            std::fs::create_dir_all(root.join(sub)).expect("create the slow disk's directories");
        }
        let image = root.join("backing").join(IMAGE);
        let file = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&image)
            .expect("create the slow disk's image");
        file.set_len(size_bytes)
            .expect("size the slow disk's image");
        // Unthrottled while the filesystem is made.
        let rate = Arc::new(AtomicU64::new(0));
        let image_fs = Image {
            file,
            rate: Arc::clone(&rate),
            free_at: Mutex::new(Instant::now()),
        };
        let mut config = fuser::Config::default();
        config.mount_options = vec![fuser::MountOption::FSName("hs-slow-disk".to_owned())];
        let session = fuser::spawn_mount(image_fs, root.join("fuse"), &config)
            .expect("mount the slow disk's FUSE filesystem (needs root and /dev/fuse)");
        let output = Command::new("losetup")
            .args(["--find", "--show"])
            .arg(root.join("fuse").join(IMAGE))
            .output()
            .expect("run losetup");
        assert!(
            output.status.success(),
            "losetup: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let loop_device = String::from_utf8_lossy(&output.stdout).trim().to_owned();
        let disk = Self {
            root: root.to_owned(),
            loop_device,
            session: Some(session),
        };
        run(Command::new("mkfs.ext4")
            .args(["-q", "-F", "-E", "lazy_itable_init=1,lazy_journal_init=1"])
            .arg(&disk.loop_device));
        run(Command::new("mount")
            .arg(&disk.loop_device)
            .arg(disk.path()));
        run(Command::new("chmod").arg("755").arg(disk.path()));
        let rdev = std::fs::metadata(&disk.loop_device)
            .expect("the loop device")
            .rdev();
        let bdi = PathBuf::from(format!(
            "/sys/class/bdi/{}:{}",
            libc::major(rdev),
            libc::minor(rdev)
        ));
        std::fs::write(bdi.join("strict_limit"), "1").expect("bound the loop device's dirty pages");
        std::fs::write(bdi.join("max_bytes"), dirty_bytes.to_string())
            .expect("bound the loop device's dirty pages");
        rate.store(bytes_per_sec, Ordering::Relaxed);
        disk
    }

    /// Where the slow filesystem is mounted.
    pub fn path(&self) -> PathBuf {
        self.root.join("mnt")
    }

    /// Unmounts and detaches what a run under `root` left.
    fn remove(root: &Path) {
        let quiet = |command: &mut Command| {
            let _ = command
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status();
        };
        quiet(Command::new("umount").arg(root.join("mnt")));
        let image = root.join("fuse").join(IMAGE);
        if let Ok(output) = Command::new("losetup").arg("-j").arg(&image).output() {
            // "/dev/loop3: []: (/path/disk.img)"
            for line in String::from_utf8_lossy(&output.stdout).lines() {
                if let Some((device, _)) = line.split_once(':') {
                    quiet(Command::new("losetup").args(["-d", device]));
                }
            }
        }
        quiet(Command::new("umount").arg(root.join("fuse")));
        let _ = std::fs::remove_dir_all(root);
    }
}

impl Drop for SlowDisk {
    fn drop(&mut self) {
        run_quietly(Command::new("umount").arg(self.path()));
        run_quietly(Command::new("losetup").args(["-d", &self.loop_device]));
        // Unmounts the FUSE filesystem.
        drop(self.session.take());
        Self::remove(&self.root);
    }
}

fn run(command: &mut Command) {
    let output = command.output().expect("run a slow disk command");
    assert!(
        output.status.success(),
        "{command:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

fn run_quietly(command: &mut Command) {
    let _ = command
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
}

/// The FUSE filesystem: one file, the image, read and written through to
/// its backing file; writes wait for the disk's time.
struct Image {
    file: File,
    /// Bytes a second the disk writes (0: no limit).
    rate: Arc<AtomicU64>,
    /// When the writes accepted so far will have been written.
    free_at: Mutex<Instant>,
}

/// How long the kernel may keep the attributes.
const TTL: Duration = Duration::from_secs(1);

impl Image {
    fn attr(&self, ino: u64) -> Option<FileAttr> {
        let (kind, size, perm, nlink) = match ino {
            1 => (FileType::Directory, 0, 0o755, 2),
            IMAGE_INO => (
                FileType::RegularFile,
                self.file.metadata().ok()?.len(),
                0o600,
                1,
            ),
            _ => return None,
        };
        Some(FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: size.div_ceil(512),
            atime: UNIX_EPOCH,
            mtime: UNIX_EPOCH,
            ctime: UNIX_EPOCH,
            crtime: UNIX_EPOCH,
            kind,
            perm,
            nlink,
            uid: 0,
            gid: 0,
            rdev: 0,
            flags: 0,
            blksize: 4096,
        })
    }

    /// Waits until a write of `len` bytes has had the disk's time.
    fn throttle(&self, len: usize) {
        let rate = self.rate.load(Ordering::Relaxed);
        if rate == 0 {
            return;
        }
        let now = Instant::now();
        let done = {
            let mut free_at = self.free_at.lock().unwrap_or_else(|e| e.into_inner());
            let start = (*free_at).max(now);
            *free_at = start + Duration::from_secs_f64(len as f64 / rate as f64);
            *free_at
        };
        std::thread::sleep(done.saturating_duration_since(now));
    }
}

impl Filesystem for Image {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.attr(IMAGE_INO) {
            Some(attr) if u64::from(parent) == 1 && name == IMAGE => {
                reply.entry(&TTL, &attr, Generation(0));
            }
            _ => reply.error(Errno::ENOENT),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.attr(u64::from(ino)) {
            Some(attr) => reply.attr(&TTL, &attr),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<std::time::SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<std::time::SystemTime>,
        _chgtime: Option<std::time::SystemTime>,
        _bkuptime: Option<std::time::SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        if let Some(size) = size
            && let Err(error) = self.file.set_len(size)
        {
            return reply.error(error.into());
        }
        match self.attr(u64::from(ino)) {
            Some(attr) => reply.attr(&TTL, &attr),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn open(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        reply.opened(FileHandle(0), FopenFlags::empty());
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let mut buffer = vec![0; size as usize];
        match self.file.read_at(&mut buffer, offset) {
            Ok(read) => reply.data(&buffer[..read]),
            Err(error) => reply.error(error.into()),
        }
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        self.throttle(data.len());
        match self.file.write_all_at(data, offset) {
            Ok(()) => reply.written(data.len() as u32),
            Err(error) => reply.error(error.into()),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        match self.file.sync_data() {
            Ok(()) => reply.ok(),
            Err(error) => reply.error(error.into()),
        }
    }
}
