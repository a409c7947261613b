//! Headless Chromium driven through chromedriver (WebDriver), for the tests
//! of the web UI.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::agent;

/// A WebDriver session of chromedriver driving headless Chromium.
pub struct Browser {
    driver: Child,
    base: String,
    session: String,
}

/// The WebDriver element key.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

impl Browser {
    pub fn start(downloads: &Path, profile: &Path) -> Self {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let base = format!("http://127.0.0.1:{port}");
        let started = Instant::now();
        while agent().get(format!("{base}/status")).call().is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "chromedriver did not start"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium_binary(),
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1280,900",
                         format!("--user-data-dir={}", profile.display())],
                "prefs": {
                    "download.default_directory": downloads.to_str().unwrap(),
                    "download.prompt_for_download": false,
                },
            },
        }}});
        let mut this = Self {
            driver,
            base,
            session: String::new(),
        };
        let created = this.call("POST", "/session", &capabilities);
        this.session = created["sessionId"]
            .as_str()
            .expect("session id")
            .to_owned();
        this.call(
            "POST",
            &format!("/session/{}/goog/cdp/execute", this.session),
            &json!({"cmd": "Browser.setDownloadBehavior",
                    "params": {"behavior": "allow", "downloadPath": downloads.to_str().unwrap()}}),
        );
        this
    }

    /// One WebDriver command; returns its `value`.
    pub fn call(&self, method: &str, path: &str, body: &Value) -> Value {
        let url = format!("{}{path}", self.base);
        let response = match method {
            "GET" => agent().get(&url).call(),
            "DELETE" => agent().delete(&url).call(),
            _ => agent().post(&url).send_json(body),
        }
        .expect("webdriver call");
        let status = response.status().as_u16();
        let text = response
            .into_body()
            .read_to_string()
            .expect("webdriver answer");
        assert_eq!(status, 200, "{method} {path}: {text}");
        let value: Value = serde_json::from_str(&text).expect("webdriver JSON");
        value["value"].clone()
    }

    fn session_path(&self, rest: &str) -> String {
        format!("/session/{}{rest}", self.session)
    }

    pub fn open(&self, url: &str) {
        self.call("POST", &self.session_path("/url"), &json!({"url": url}));
    }

    pub fn element(&self, css: &str) -> String {
        let found = self.call(
            "POST",
            &self.session_path("/element"),
            &json!({"using": "css selector", "value": css}),
        );
        found[ELEMENT].as_str().expect("element id").to_owned()
    }

    pub fn type_into(&self, css: &str, text: &str) {
        let id = self.element(css);
        self.call(
            "POST",
            &self.session_path(&format!("/element/{id}/clear")),
            &json!({}),
        );
        self.call(
            "POST",
            &self.session_path(&format!("/element/{id}/value")),
            &json!({"text": text}),
        );
    }

    pub fn click(&self, css: &str) {
        let id = self.element(css);
        self.call(
            "POST",
            &self.session_path(&format!("/element/{id}/click")),
            &json!({}),
        );
    }

    pub fn script(&self, script: &str) -> Value {
        self.call(
            "POST",
            &self.session_path("/execute/sync"),
            &json!({"script": script, "args": []}),
        )
    }

    /// Waits until `script` returns something truthy; returns it.
    pub fn wait_for(&self, script: &str) -> Value {
        let started = Instant::now();
        loop {
            let value = self.script(script);
            if !(value.is_null() || value == false || value == "" || value == 0) {
                return value;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "timed out on {script}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = agent()
                .delete(format!("{}/session/{}", self.base, self.session))
                .call();
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// The Chromium executable itself (Debian's `/usr/bin/chromium` is a shell wrapper).
fn chromium_binary() -> String {
    ["/usr/lib/chromium/chromium", "/usr/bin/chromium"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("chromium is not installed: run scripts/setup")
        .to_owned()
}
