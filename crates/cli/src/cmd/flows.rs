//! `hindsight flows [FILTER] --ip ADDR|CIDR --archive DIR`: the connections of an
//! address or network, answered from the connection index alone (Diventi's
//! lookup), optionally narrowed by a filter in the query language.

use std::io::{self, BufWriter, Write};
use std::process::ExitCode;

use anyhow::{Context, Result};
use hindsight_output::connections::ConnWriter;
use hindsight_output::{Answer, Format};
use hindsight_query::filter::Filter;
use hindsight_reader::{ConnQuery, decode_cursor, encode_cursor};
use hindsight_serve::client::Client;

use crate::cmd::query::WindowArgs;

/// Arguments of `hindsight flows`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Keep the connections that match this filter (Wireshark or tcpdump syntax,
    /// as for `query`), on their addresses, ports, protocol and TCP flags; `ip.src`
    /// is the originator. Without --ip, the filter must name addresses.
    #[arg(value_name = "FILTER")]
    filter: Option<String>,
    /// The address or network whose connections to list: 10.1.2.3, 10.1.2.0/24, 2001:db8::/32.
    #[arg(long, value_name = "ADDR|CIDR")]
    ip: Option<String>,
    #[command(flatten)]
    source: crate::Source,
    #[command(flatten)]
    window: WindowArgs,
    /// Output format.
    #[arg(long, short = 'F', value_enum, default_value = "table")]
    format: Format,
    /// Print at most N connections (one page); the command to get the next page is
    /// printed to stderr.
    #[arg(long, short = 'n', value_name = "N", default_value_t = 1000)]
    limit: usize,
    /// Resume after the page that ended with this cursor (printed by the previous page).
    #[arg(long, value_name = "CURSOR")]
    after: Option<String>,
    /// Read the connection index here, even when a `serve` captures into the
    /// archive (by default its API answers, with the records not yet committed).
    #[arg(long, conflicts_with = "cluster")]
    sealed_only: bool,
}

/// Runs `hindsight flows`.
pub fn run(args: Args) -> Result<ExitCode> {
    let format = super::query::output_format(Some(args.format), None, Answer::Connections)?;
    let filter = match &args.filter {
        Some(text) => Some(Filter::parse(text)?),
        None => None,
    };
    if let Some(cluster) = &args.source.cluster {
        let question = hindsight_cluster::client::ConnQuestion {
            ip: args.ip.clone(),
            filter: args.filter.clone(),
            time: args.window.range()?,
            limit: args.limit,
            after: args.after.clone(),
        };
        let page = super::cluster::client(cluster)?.connections(&question)?;
        let mut out = BufWriter::with_capacity(1 << 16, io::stdout().lock());
        let mut writer = ConnWriter::new(format).map_err(anyhow::Error::msg)?;
        for (node, entry) in &page.entries {
            writer.set_node(node);
            writer.set_community_seed(page.community_seed(node));
            writer.write(&mut out, entry)?;
        }
        writer.finish(&mut out)?;
        out.flush()?;
        if let Some(cursor) = &page.next {
            more(cursor, args.limit);
        }
        return Ok(super::cluster::report(&page.outcome));
    }
    let root = args.source.archive.as_deref().context("no archive")?;
    let query = ConnQuery {
        ranges: ConnQuery::ranges_of(args.ip.as_deref(), filter.as_ref())?,
        filter,
        time: args.window.range()?,
        limit: args.limit,
        after: args.after.as_deref().map(decode_cursor).transpose()?,
    };
    if !args.sealed_only
        && let Some(client) = Client::find(root)
    {
        match ask(&client, &args, format) {
            Ok(answered) => return answered,
            Err(error) => super::unanswered(&client, &error),
        }
    }
    let page = hindsight_reader::sealed_connections(root, &query)?;
    let mut out = BufWriter::with_capacity(1 << 16, io::stdout().lock());
    let mut writer = ConnWriter::new(format).map_err(anyhow::Error::msg)?;
    writer.set_community_seed(page.community_seed);
    for entry in &page.entries {
        writer.write(&mut out, entry)?;
    }
    writer.finish(&mut out)?;
    out.flush()?;
    if let Some(cursor) = page.next {
        more(&encode_cursor(&cursor), args.limit);
    }
    Ok(ExitCode::SUCCESS)
}

fn more(cursor: &str, limit: usize) {
    eprintln!("more connections: add --after {cursor} to see the next {limit}");
}

/// Asks the `serve` that captures into the archive, which answers from the
/// connection index and the records it has not committed, and prints the answer.
fn ask(client: &Client, args: &Args, format: Format) -> Result<Result<ExitCode>> {
    let window = &args.window;
    let mut params: Vec<(&str, String)> = vec![
        ("format", format.name().to_owned()),
        ("limit", args.limit.to_string()),
    ];
    params.extend(args.ip.clone().map(|ip| ("ip", ip)));
    params.extend(args.filter.clone().map(|filter| ("filter", filter)));
    params.extend(
        window
            .since_until()
            .map(|(name, time)| (name, time.to_owned())),
    );
    params.extend(args.after.clone().map(|after| ("after", after)));
    let answer = client.get("flows", &params)?;
    Ok((|| {
        let next = answer.next();
        let mut out = BufWriter::with_capacity(1 << 16, io::stdout().lock());
        answer.copy_to(&mut out)?;
        out.flush()?;
        super::answered_by(client);
        if let Some(cursor) = next {
            more(&cursor, args.limit);
        }
        Ok(ExitCode::SUCCESS)
    })())
}
