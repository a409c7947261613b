//! A real SeaweedFS server (Apache-2.0; `scripts/setup` builds it) on
//! 127.0.0.1 with its S3 gateway, for the tests of object storage. Shared by
//! the `hindsight` tests (`common`) and the `hindsight-ballista` tests (by path).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A child killed when dropped.
pub struct Reaped(pub Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn weed() -> PathBuf {
    let cache = std::env::var_os("HINDSIGHT_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/hindsight")
        });
    let weed = cache.join("bin/weed");
    assert!(
        weed.exists(),
        "SeaweedFS is not built: run scripts/setup ({})",
        weed.display()
    );
    weed
}

/// A TCP port free on 127.0.0.1, with the port 10,000 above it free too
/// (SeaweedFS's gRPC port for it).
pub fn free_port_pair() -> u16 {
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap()
            .port();
        if port < 55_000 && std::net::TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return port;
        }
    }
}

/// SeaweedFS with its S3 gateway on `s3`, data under `dir`.
pub fn start_seaweedfs(dir: &Path) -> (Reaped, u16) {
    let (master, volume, filer, s3) = (
        free_port_pair(),
        free_port_pair(),
        free_port_pair(),
        free_port_pair(),
    );
    let log = std::fs::File::create(dir.join("weed.log")).unwrap();
    let child = Command::new(weed())
        .arg("server")
        .arg(format!("-dir={}", dir.display()))
        .args(["-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-s3"])
        .arg(format!("-master.port={master}"))
        .arg(format!("-volume.port={volume}"))
        .arg(format!("-filer.port={filer}"))
        .arg(format!("-s3.port={s3}"))
        .args(["-volume.max=8", "-master.volumeSizeLimitMB=64"])
        // With these set SeaweedFS requires them, and the test's own
        // requests (making the bucket, listing) are anonymous.
        .env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY")
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("start SeaweedFS");
    let server = Reaped(child);
    // Up once a bucket can be made (S3 CreateBucket).
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into();
    let started = Instant::now();
    loop {
        let made = agent
            .put(format!("http://127.0.0.1:{s3}/hindsight"))
            .send_empty()
            .ok()
            .map(|r| r.status().as_u16());
        if made == Some(200) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "SeaweedFS did not start ({made:?}): {}",
            std::fs::read_to_string(dir.join("weed.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    (server, s3)
}

/// The keys under `prefix` in the bucket, with their sizes (S3 ListObjectsV2).
pub fn list(s3: u16, prefix: &str) -> Vec<(String, u64)> {
    let text = ureq::get(format!(
        "http://127.0.0.1:{s3}/hindsight?list-type=2&prefix={prefix}"
    ))
    .call()
    .unwrap()
    .into_body()
    .read_to_string()
    .unwrap();
    let field = |part: &str, name: &str| {
        part.split(&format!("<{name}>"))
            .nth(1)
            .and_then(|rest| rest.split(&format!("</{name}>")).next())
            .map(str::to_owned)
    };
    text.split("<Contents>")
        .skip(1)
        .map(|part| {
            (
                field(part, "Key").unwrap(),
                field(part, "Size").unwrap().parse().unwrap(),
            )
        })
        .collect()
}
