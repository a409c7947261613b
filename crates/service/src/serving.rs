//! The `serve` that captures into an archive answers (found by
//! `ARCHIVE/serving.json`): it sees its unsealed tail too. When it does not
//! answer, the archive's sealed segments do, and the answer says so.

use std::io::{self, Read, Write};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use hindsight_cluster::client::window_params;
use hindsight_output::Format;
use hindsight_store::archive::Serving as ServingFile;

use crate::local::conn_query;
use crate::{
    Answered, Cancel, ConnQuestion, INCOMPLETE_HEADER, Local, NEXT_HEADER, Output, PacketPlan,
    PacketQuestion, Page, Questions, SqlQuestion,
};

/// The serving process of an archive, with the archive to fall back on.
#[derive(Clone, Debug)]
pub struct Serving {
    client: Client,
    local: Local,
}

impl Serving {
    /// Asks `client`, or `local` when it does not answer.
    pub fn new(client: Client, local: Local) -> Self {
        Self { client, local }
    }

    /// Asks the serving process; when it does not answer, before any byte of
    /// the answer is written, asks the archive and says so.
    fn ask(
        &self,
        out: &mut Output<'_>,
        asked: Result<ServerAnswer>,
        write: impl FnOnce(ServerAnswer, &mut Output) -> Result<Answered>,
        fallback: impl FnOnce(&mut Output) -> Result<Answered>,
    ) -> Result<Answered> {
        let url = self.client.url();
        match asked {
            Ok(answer) => {
                let mut answered =
                    write(answer, out).with_context(|| format!("the answer of {url} broke off"))?;
                answered.notes.insert(0, self.answered_note());
                Ok(answered)
            }
            Err(error) => {
                let note = self.fallback_note(&error);
                let mut answered = fallback(out).context(note.clone())?;
                answered.notes.insert(0, note);
                Ok(answered)
            }
        }
    }

    fn answered_note(&self) -> String {
        format!(
            "hindsight: answered by the serving process at {} (sealed segments and what is \
             not yet sealed)",
            self.client.url()
        )
    }

    fn fallback_note(&self, error: &anyhow::Error) -> String {
        format!(
            "hindsight: the serving process at {} did not answer ({error:#}): answering from \
             the sealed segments only",
            self.client.url()
        )
    }
}

/// A packet question for the serving process, asked when it is written.
struct Planned {
    serving: Serving,
    question: PacketQuestion,
}

impl PacketPlan for Planned {
    fn write(
        self: Box<Self>,
        format: Format,
        out: &mut dyn Write,
        _cancel: Cancel,
    ) -> Result<Answered> {
        let (serving, question) = (&self.serving, &self.question);
        let mut params = window_params(question.time);
        params.push(("filter", question.filter.clone()));
        let asked = if question.count {
            params.push(("buckets", "1".to_owned()));
            serving.client.get("histogram", &params)
        } else {
            params.extend(question.limit.map(|n| ("limit", n.to_string())));
            params.push(("format", format.name().to_owned()));
            serving.client.get("query", &params)
        };
        let write = |answer: ServerAnswer, out: &mut Output| {
            let answered = answer.answered();
            if question.count {
                writeln!(out, "{}", answer.json()?["total"])?;
            } else {
                answer.copy_to(out.open()?)?;
            }
            Ok(answered)
        };
        serving.ask(&mut Output::over(out), asked, write, |out| {
            serving.local.packets(question, format, out)
        })
    }
}

impl Questions for Serving {
    fn plan(&self, question: &PacketQuestion, format: Format) -> Result<Box<dyn PacketPlan>> {
        if question.explain {
            return self.local.plan(question, format);
        }
        crate::local::parse_filter(&question.filter)?;
        Ok(Box::new(Planned {
            serving: self.clone(),
            question: question.clone(),
        }))
    }

    fn page(&self, question: &ConnQuestion) -> Result<Page> {
        conn_query(question)?;
        let mut params = window_params(question.time);
        params.push(("limit", question.limit.to_string()));
        params.extend(question.ip.clone().map(|ip| ("ip", ip)));
        params.extend(question.filter.clone().map(|filter| ("filter", filter)));
        params.extend(question.after.clone().map(|after| ("after", after)));
        params.push(("stored", "true".to_owned()));
        let asked = self.client.get("flows", &params).and_then(|answer| {
            let answered = answer.answered();
            let page = hindsight_cluster::client::parse_connections(&answer.json()?)
                .map_err(anyhow::Error::msg)?;
            Ok((page, answered))
        });
        match asked {
            Ok(((entries, next, seed), answered)) => {
                let entries = entries.into_iter().map(|(_, entry)| entry).collect();
                let mut page = Page::of_archive(entries, Vec::new(), seed, next);
                // What a scan left out, as the server said it.
                page.answered.incomplete = answered.incomplete;
                page.answered.notes = answered.notes;
                page.answered.notes.push(self.answered_note());
                Ok(page)
            }
            Err(error) => {
                let note = self.fallback_note(&error);
                let mut page = self.local.page(question).context(note.clone())?;
                page.answered.notes.insert(0, note);
                Ok(page)
            }
        }
    }

    fn sql(
        &self,
        question: &SqlQuestion,
        format: Format,
        out: &mut Output<'_>,
    ) -> Result<Answered> {
        if question.explain || question.allow_writes {
            return self.local.sql(question, format, out);
        }
        let body = serde_json::json!({
            "sql": question.text,
            "max_rows": question.max_rows,
            "format": format.name(),
        });
        let asked = self.client.post("sql", &body);
        let write = |answer: ServerAnswer, out: &mut Output| {
            let answered = answer.answered();
            answer.copy_to(out.open()?)?;
            Ok(answered)
        };
        self.ask(out, asked, write, |out| {
            self.local.sql(question, format, out)
        })
    }
}

/// A serving process to ask, over HTTP on loopback.
#[derive(Clone, Debug)]
pub struct Client {
    serving: ServingFile,
    agent: ureq::Agent,
}

/// An answer of the serving process, its body not yet read.
#[derive(Debug)]
struct ServerAnswer {
    response: ureq::http::Response<ureq::Body>,
}

impl Client {
    /// The serving process of the archive at `root`, if one captures into it.
    pub fn find(root: &std::path::Path) -> Option<Self> {
        let serving = ServingFile::find(root)?;
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
    fn get(&self, route: &str, params: &[(&str, String)]) -> Result<ServerAnswer> {
        let request = self
            .agent
            .get(format!("{}/api/v1/{route}", self.serving.url))
            .query_pairs(params.iter().map(|(k, v)| (*k, v.as_str())));
        ServerAnswer::of(authorized(request).call()?)
    }

    /// `POST /api/v1/{route}` with a JSON body; an answer other than 200 is an error.
    fn post(&self, route: &str, body: &serde_json::Value) -> Result<ServerAnswer> {
        let request = self
            .agent
            .post(format!("{}/api/v1/{route}", self.serving.url))
            .header("Content-Type", "application/json");
        ServerAnswer::of(authorized(request).send(body.to_string().as_bytes())?)
    }
}

/// `request` with the `Authorization` header of `HINDSIGHT_API_TOKEN`, if set.
fn authorized<B>(request: ureq::RequestBuilder<B>) -> ureq::RequestBuilder<B> {
    match std::env::var("HINDSIGHT_API_TOKEN") {
        Ok(token) if !token.is_empty() => {
            request.header("Authorization", format!("Bearer {token}"))
        }
        _ => request,
    }
}

impl ServerAnswer {
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

    /// What its headers say: what it went without, the next page's cursor.
    fn answered(&self) -> Answered {
        let incomplete = self.header(INCOMPLETE_HEADER);
        Answered {
            notes: incomplete
                .iter()
                .map(|what| format!("warning: the answer is incomplete: {what}"))
                .collect(),
            incomplete: incomplete.is_some(),
            next: self.header(NEXT_HEADER),
            ..Answered::default()
        }
    }

    /// Copies the body to `out` as it arrives; a transfer that breaks off is an error.
    fn copy_to(mut self, out: &mut dyn Write) -> io::Result<u64> {
        let mut body = self
            .response
            .body_mut()
            .with_config()
            .limit(u64::MAX)
            .reader();
        io::copy(&mut body, out)
    }

    /// The body as JSON.
    fn json(mut self) -> Result<serde_json::Value> {
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
