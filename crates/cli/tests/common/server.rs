//! A running `hindsight serve` and the requests the black-box tests make of it.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use super::agent;

/// A running `hindsight serve`; killed when dropped.
pub struct Server {
    pub child: Child,
    pub base: String,
}

impl Server {
    /// Starts serve on a free port of 127.0.0.1 with `config` (TOML) and waits
    /// until it listens.
    pub fn start(dir: &Path, config: &str) -> Self {
        Self::start_at(dir, config, "127.0.0.1:0")
    }

    /// As [`Self::start`], listening on `listen`.
    pub fn start_at(dir: &Path, config: &str, listen: &str) -> Self {
        let path = dir.join("hindsight.toml");
        std::fs::write(&path, config).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_hindsight"))
            .args(["serve", "--config", path.to_str().unwrap()])
            .args(["--listen", listen])
            .env_remove("HINDSIGHT_API_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start hindsight serve");
        let stderr = child.stderr.take().unwrap();
        let (address, got_address) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(at) = line.split("listening on http://").nth(1) {
                    let _ = address.send(at.trim().to_owned());
                }
                eprintln!("serve: {line}");
            }
        });
        let address = got_address
            .recv_timeout(Duration::from_secs(60))
            .expect("serve did not start listening");
        Self {
            child,
            base: format!("http://{address}"),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An answer: status, content type, body.
pub struct Answer {
    pub status: u16,
    pub content_type: String,
    pub body: Vec<u8>,
}

impl Answer {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// Asserts a JSON error with `status` whose message contains `needle`.
    pub fn error(&self, status: u16, needle: &str) {
        assert_eq!(self.status, status, "{}", self.text());
        assert!(
            self.content_type.starts_with("application/json"),
            "{}",
            self.content_type
        );
        let body = self.json();
        assert_eq!(body["status"], status);
        let message = body["error"].as_str().unwrap();
        assert!(message.contains(needle), "{message:?} lacks {needle:?}");
    }
}

pub fn answer(mut response: ureq::http::Response<ureq::Body>) -> Answer {
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let body = response
        .body_mut()
        .with_config()
        .limit(1 << 30)
        .read_to_vec()
        .unwrap();
    Answer {
        status,
        content_type,
        body,
    }
}

pub fn get(server: &Server, path: &str, token: Option<&str>) -> Answer {
    get_with(server, path, &[], token)
}

/// GET with query parameters (ureq percent-encodes them).
pub fn get_with(
    server: &Server,
    path: &str,
    params: &[(&str, &str)],
    token: Option<&str>,
) -> Answer {
    let mut request = agent()
        .get(server.url(path))
        .query_pairs(params.iter().copied());
    if let Some(token) = token {
        request = request.header("Authorization", format!("Bearer {token}"));
    }
    answer(request.call().expect("GET"))
}

/// POST `body` as JSON, with `token` as the bearer token if given.
pub fn post_with(server: &Server, path: &str, body: &[u8], token: Option<&str>) -> Answer {
    let mut request = agent()
        .post(server.url(path))
        .header("Content-Type", "application/json");
    if let Some(token) = token {
        request = request.header("Authorization", format!("Bearer {token}"));
    }
    answer(request.send(body).expect("POST"))
}

/// A fake peer: an HTTP/1.1 server on 127.0.0.1 that answers each request
/// with what `answer` gives for its method and path, and keeps every request
/// head it was sent. It serves until the test ends.
pub struct FakePeer {
    pub port: u16,
    pub heads: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

/// What a fake peer answers: status, content type, body.
pub type FakeAnswer = (u16, &'static str, Vec<u8>);

impl FakePeer {
    pub fn start(answer: impl Fn(&str, &str) -> FakeAnswer + Send + Sync + 'static) -> Self {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let heads = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let kept = std::sync::Arc::clone(&heads);
        let answer = std::sync::Arc::new(answer);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let (kept, answer) = (std::sync::Arc::clone(&kept), std::sync::Arc::clone(&answer));
                std::thread::spawn(move || {
                    let mut request = Vec::new();
                    let mut buf = [0u8; 65536];
                    let head_end = loop {
                        match stream.read(&mut buf) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => request.extend_from_slice(&buf[..n]),
                        }
                        if let Some(at) = request.windows(4).position(|w| w == b"\r\n\r\n") {
                            break at + 4;
                        }
                    };
                    let head = String::from_utf8_lossy(&request[..head_end]).into_owned();
                    let length: usize = head
                        .lines()
                        .find_map(|line| {
                            let (name, value) = line.split_once(':')?;
                            name.eq_ignore_ascii_case("content-length")
                                .then(|| value.trim().parse().ok())?
                        })
                        .unwrap_or(0);
                    while request.len() < head_end + length {
                        match stream.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => request.extend_from_slice(&buf[..n]),
                        }
                    }
                    let mut words = head.split_whitespace();
                    let (method, path) = (
                        words.next().unwrap_or_default().to_owned(),
                        words.next().unwrap_or_default().to_owned(),
                    );
                    kept.lock().unwrap().push(head.clone());
                    let (status, content_type, body) = answer(&method, &path);
                    let _ = stream.write_all(
                        format!(
                            "HTTP/1.1 {status} X\r\ncontent-type: {content_type}\r\n\
                             content-length: {}\r\nconnection: close\r\n\r\n",
                            body.len()
                        )
                        .as_bytes(),
                    );
                    let _ = stream.write_all(&body);
                });
            }
        });
        Self { port, heads }
    }

    /// The request heads sent so far.
    pub fn heads(&self) -> Vec<String> {
        self.heads.lock().unwrap().clone()
    }
}
