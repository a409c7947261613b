//! The client side of the API: the command-line tools ask the `serve` that
//! captures into an archive (found by `ARCHIVE/serving.json`) instead of reading
//! the sealed segments themselves, so that they see its unsealed tail too.

use std::io::{self, Read, Write};
use std::path::Path;
use std::time::Duration;

use anyhow::{Result, bail};
use hindsight_store::archive::Serving;

use crate::api::{INCOMPLETE_HEADER, NEXT_HEADER};

/// A serving process to ask.
#[derive(Debug)]
pub struct Client {
    serving: Serving,
    agent: ureq::Agent,
}

/// An answer of the serving process, its body not yet read.
#[derive(Debug)]
pub struct Answer {
    response: ureq::http::Response<ureq::Body>,
}

impl Client {
    /// The serving process of the archive at `root`, if one captures into it.
    pub fn find(root: &Path) -> Option<Self> {
        let serving = Serving::find(root)?;
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(Duration::from_secs(2)))
            .build()
            .into();
        Some(Self { serving, agent })
    }

    /// Where its API answers.
    pub fn url(&self) -> &str {
        &self.serving.url
    }

    /// `GET /api/v1/{route}` with `params`; an answer other than 200 is an error.
    pub fn get(&self, route: &str, params: &[(&str, String)]) -> Result<Answer> {
        let request = self
            .agent
            .get(format!("{}/api/v1/{route}", self.serving.url))
            .query_pairs(params.iter().map(|(k, v)| (*k, v.as_str())));
        let request = match token() {
            Some(token) => request.header("Authorization", token),
            None => request,
        };
        Answer::of(request.call()?)
    }

    /// `POST /api/v1/{route}` with a JSON body; an answer other than 200 is an error.
    pub fn post(&self, route: &str, body: &serde_json::Value) -> Result<Answer> {
        let request = self
            .agent
            .post(format!("{}/api/v1/{route}", self.serving.url))
            .header("Content-Type", "application/json");
        let request = match token() {
            Some(token) => request.header("Authorization", token),
            None => request,
        };
        Answer::of(request.send(body.to_string().as_bytes())?)
    }
}

/// The `Authorization` header from `HINDSIGHT_API_TOKEN`, if set.
fn token() -> Option<String> {
    std::env::var("HINDSIGHT_API_TOKEN")
        .ok()
        .filter(|token| !token.is_empty())
        .map(|token| format!("Bearer {token}"))
}

impl Answer {
    fn of(mut response: ureq::http::Response<ureq::Body>) -> Result<Self> {
        if response.status() != 200 {
            let text = response.body_mut().read_to_string().unwrap_or_default();
            bail!("{}: {}", response.status(), text.trim());
        }
        Ok(Self { response })
    }

    fn header(&self, name: &str) -> Option<String> {
        let value = self.response.headers().get(name)?;
        value.to_str().ok().map(str::to_owned)
    }

    /// What the answer went without (damaged segments), if anything.
    pub fn incomplete(&self) -> Option<String> {
        self.header(INCOMPLETE_HEADER)
    }

    /// The cursor of the next page of connections, if there is one.
    pub fn next(&self) -> Option<String> {
        self.header(NEXT_HEADER)
    }

    /// Copies the body to `out` as it arrives; a transfer that breaks off is an error.
    pub fn copy_to(mut self, out: &mut dyn Write) -> io::Result<u64> {
        let mut body = self
            .response
            .body_mut()
            .with_config()
            .limit(u64::MAX)
            .reader();
        io::copy(&mut body, out)
    }

    /// The body as JSON.
    pub fn json(mut self) -> Result<serde_json::Value> {
        let mut text = String::new();
        self.response
            .body_mut()
            .with_config()
            .limit(64 << 20)
            .reader()
            .read_to_string(&mut text)?;
        Ok(serde_json::from_str(&text)?)
    }
}
