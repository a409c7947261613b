//! Sealed segments copied to S3-compatible object storage (`[archive]
//! object_store = "s3://bucket/prefix"`), through the `object_store` crate
//! DataFusion reads with. A segment is copied once its file is verified
//! against the CRC-32 the catalog recorded at seal, under the same relative
//! path (`prefix/packets/seg-….parquet`), and entered in `ARCHIVE/objects.log`
//! (id, file, bytes, CRC-32, a line each) only once the store has it whole.
//! A scan reads the local file while it exists and the copy once it is gone
//! (the local copy may expire first), so SQL and every engine that reads
//! Parquet in S3 see the same segments.

use std::path::Path;
use std::sync::Arc;

use datafusion::error::{DataFusionError, Result};
use hindsight_store::archive::checksum;
use hindsight_store::objects::{ObjectStoreSettings, append_log, read_log};
use hindsight_store::{Archive, CatalogEntry};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};

/// An archive's object store.
#[derive(Debug)]
pub struct Objects {
    store: Arc<dyn ObjectStore>,
    /// `s3://bucket`, as DataFusion registers the store.
    bucket_url: url::Url,
    /// The prefix inside the bucket, without slashes at its ends.
    prefix: String,
}

/// What one round of copying did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Copied {
    /// Segments copied in this round.
    pub segments: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Segments not copied, and why (a file that fails its CRC-32 is never
    /// copied).
    pub problems: Vec<String>,
    /// Segments whose local file was then removed, their copies answering
    /// for them (`[archive] local_max_bytes`).
    pub local_removed: u64,
}

/// The S3 client of `bucket`.
#[cfg(feature = "object-storage")]
fn s3(
    bucket: &str,
    settings: &ObjectStoreSettings,
) -> std::result::Result<impl ObjectStore, String> {
    let mut builder = object_store::aws::AmazonS3Builder::from_env()
        .with_bucket_name(bucket)
        .with_region(settings.region.as_deref().unwrap_or("us-east-1"));
    if let Some(endpoint) = &settings.endpoint {
        builder = builder
            .with_endpoint(endpoint)
            .with_allow_http(endpoint.starts_with("http://"))
            .with_virtual_hosted_style_request(false);
    }
    builder.build().map_err(|e| e.to_string())
}

/// No S3 client in this build.
#[cfg(not(feature = "object-storage"))]
fn s3(
    _: &str,
    _: &ObjectStoreSettings,
) -> std::result::Result<object_store::memory::InMemory, String> {
    Err("this hindsight was built without object storage (the `object-storage` feature)".to_owned())
}

impl Objects {
    /// The store `settings` names; credentials from the environment
    /// (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, as every S3 client).
    pub fn open(settings: &ObjectStoreSettings) -> Result<Self> {
        let bad = |why: String| DataFusionError::Configuration(format!("object_store: {why}"));
        let url = url::Url::parse(&settings.url)
            .map_err(|e| bad(format!("{:?} is not a URL: {e}", settings.url)))?;
        if url.scheme() != "s3" {
            return Err(bad(format!(
                "{:?}: only s3://bucket/prefix is supported",
                settings.url
            )));
        }
        let bucket = url
            .host_str()
            .filter(|b| !b.is_empty())
            .ok_or_else(|| bad(format!("{:?} names no bucket", settings.url)))?
            .to_owned();
        let prefix = url.path().trim_matches('/').to_owned();
        let store = s3(&bucket, settings).map_err(bad)?;
        let bucket_url = url::Url::parse(&format!("s3://{bucket}"))
            .map_err(|e| bad(format!("bucket {bucket:?}: {e}")))?;
        Ok(Self {
            store: Arc::new(store),
            bucket_url,
            prefix,
        })
    }

    /// The store, and the URL DataFusion registers it under.
    pub fn store(&self) -> (&url::Url, Arc<dyn ObjectStore>) {
        (&self.bucket_url, Arc::clone(&self.store))
    }

    /// Where a segment's copy is, inside the bucket.
    pub fn object_path(&self, entry: &CatalogEntry) -> ObjectPath {
        if self.prefix.is_empty() {
            ObjectPath::from(entry.file.as_str())
        } else {
            ObjectPath::from(format!("{}/{}", self.prefix, entry.file))
        }
    }

    /// The URL of a segment's copy, as DataFusion's scans take it.
    pub fn object_url(&self, entry: &CatalogEntry) -> String {
        format!("{}/{}", self.bucket_url, self.object_path(entry))
    }

    /// Copies every catalogued segment not yet copied: its file verified
    /// against the catalog's CRC-32, put whole, then entered in the log.
    pub async fn copy_new(&self, archive: &Archive) -> Result<Copied> {
        let root = archive.root();
        let mut copied = read_log(root);
        let mut report = Copied::default();
        for entry in archive.catalog().entries() {
            if copied.contains_key(&entry.id) {
                continue;
            }
            // Read once: the bytes checked are the bytes put.
            let Ok(bytes) = std::fs::read(archive.segment_path(entry)) else {
                // Gone (expired, set aside) before it was copied.
                continue;
            };
            if bytes.len() as u64 != entry.size_bytes || checksum(&bytes) != entry.crc32 {
                report.problems.push(format!(
                    "segment {} ({}): its bytes changed since it was sealed; not copied",
                    entry.id, entry.file
                ));
                continue;
            }
            self.store
                .put(&self.object_path(entry), bytes.into())
                .await
                .map_err(|e| DataFusionError::External(Box::new(e)))?;
            append_log(root, entry).map_err(DataFusionError::IoError)?;
            copied.insert(entry.id, (entry.size_bytes, entry.crc32));
            report.segments += 1;
            report.bytes += entry.size_bytes;
        }
        Ok(report)
    }
}

/// Most bytes of a segment's copy fetched for a packet search: the largest a
/// segment may be sealed at is far below.
const MAX_FETCH_BYTES: u64 = 4 << 30;

impl Objects {
    /// `entry`'s copy, written to a new file in `dir` and opened, its bytes
    /// checked against the catalog's size and CRC-32 first; the file is
    /// unlinked once open, so it takes disk only while it is read. The fetch
    /// runs on a thread of its own with its own runtime, so it may be called
    /// from any thread, a runtime's included.
    pub fn fetch_to(
        &self,
        entry: &CatalogEntry,
        dir: &Path,
    ) -> std::result::Result<std::fs::File, String> {
        if entry.size_bytes > MAX_FETCH_BYTES {
            return Err(format!(
                "its catalog size, {} bytes, is above the {MAX_FETCH_BYTES} a fetch takes",
                entry.size_bytes
            ));
        }
        let path = self.object_path(entry);
        let bytes = on_own_runtime(async {
            let got = self
                .store
                .get(&path)
                .await
                .map_err(|e| format!("cannot fetch {path}: {e}"))?;
            got.bytes()
                .await
                .map_err(|e| format!("cannot fetch {path}: {e}"))
        })
        .map_err(|e| format!("cannot fetch {path}: {e}"))??;
        if bytes.len() as u64 != entry.size_bytes || checksum(&bytes) != entry.crc32 {
            return Err(format!(
                "{} bytes whose CRC-32 is not the one the catalog recorded at seal; not read",
                bytes.len()
            ));
        }
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        static FETCHES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = FETCHES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let file_path = dir.join(format!(".fetch-{}-{}-{n}", entry.id, std::process::id()));
        let write = || -> std::io::Result<std::fs::File> {
            std::fs::write(&file_path, &bytes)?;
            let file = std::fs::File::open(&file_path)?;
            std::fs::remove_file(&file_path)?;
            Ok(file)
        };
        write().map_err(|e| {
            let _ = std::fs::remove_file(&file_path);
            format!("cannot keep it in {}: {e}", dir.display())
        })
    }
}

/// Copies the segments of the archive at `root` not yet copied to the store
/// `settings` names; one line for people saying what it did (and the
/// problems, one line each).
pub fn copy_archive(root: &Path, settings: &ObjectStoreSettings) -> Result<(Copied, String)> {
    let archive = Archive::open_reader(root).map_err(|e| DataFusionError::External(e.into()))?;
    let objects = Objects::open(settings)?;
    let mut copied =
        on_own_runtime(objects.copy_new(&archive)).map_err(DataFusionError::IoError)??;
    let removed = hindsight_store::objects::expire_local(&archive, settings.local_max_bytes)
        .map_err(|e| DataFusionError::External(e.into()))?;
    copied.local_removed = removed.len() as u64;
    let mut line = format!(
        "copied {} segment(s), {:.1} MB, to {}",
        copied.segments,
        copied.bytes as f64 / 1e6,
        settings.url
    );
    if !removed.is_empty() {
        line.push_str(&format!(
            "; removed the local files of {} copied segment(s) (local_max_bytes {})",
            removed.len(),
            settings.local_max_bytes
        ));
    }
    Ok((copied, line))
}

/// Runs `work` to its end on a thread of its own with a runtime of its own,
/// so that any thread may wait for it, a runtime's included (a search or a
/// copy round runs on all kinds); an error if no runtime could be started or
/// the work panicked.
fn on_own_runtime<T: Send>(work: impl Future<Output = T> + Send) -> std::io::Result<T> {
    std::thread::scope(|scope| {
        scope
            .spawn(move || {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map(|runtime| runtime.block_on(work))
            })
            .join()
            .unwrap_or_else(|_| Err(std::io::Error::other("it panicked")))
    })
}
