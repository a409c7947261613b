//! `hindsight flows [FILTER] --ip ADDR|CIDR --archive DIR`: the connections of an
//! address, a network, a name or any filter: from the connection index
//! (Diventi's lookup) where the filter names addresses or names, else by a
//! scan of the `flows` segments in the window.

use std::process::ExitCode;

use anyhow::Result;
use hindsight_output::{Answer, Format};
use hindsight_service::ConnQuestion;
use hindsight_service::Output;

use crate::cmd::query::WindowArgs;

/// Arguments of `hindsight flows`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Keep the connections that match this filter (Wireshark or tcpdump syntax,
    /// as for `query`), on their addresses, ports, protocol, TCP flags and
    /// application fields; `ip.src` is the originator. Addresses and names
    /// (dns.qry.name, http.host, a JA3, ...) are looked up in the index; any
    /// other filter, or none, scans the window's connection records.
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
    #[arg(long, short = 'F', value_parser = crate::format_arg(), default_value = "table")]
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
    let question = ConnQuestion {
        ip: args.ip,
        filter: args.filter,
        time: args.window.range()?,
        limit: args.limit,
        after: args.after,
    };
    let mut out = Output::to(None);
    let answered = args
        .source
        .questions(args.sealed_only)?
        .connections(&question, format, &mut out)?;
    out.finish()?;
    if let Some(cursor) = &answered.next {
        eprintln!(
            "more connections: add --after {cursor} to see the next {}",
            args.limit
        );
    }
    Ok(super::exit(&answered, false))
}
