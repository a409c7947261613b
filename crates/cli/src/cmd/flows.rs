//! `hindsight flows [FILTER] --ip ADDR|CIDR --archive DIR`: the connections of an
//! address or network, answered from the connection index alone (Diventi's
//! lookup), optionally narrowed by a filter in the query language.

use std::io::{self, BufWriter, Write};
use std::process::ExitCode;

use anyhow::Result;
use hindsight_output::connections::ConnWriter;
use hindsight_output::{Answer, Format};
use hindsight_query::filter::Filter;
use hindsight_reader::{ConnQuery, Reader, decode_cursor, encode_cursor};

use crate::ArchiveArg;
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
    archive: ArchiveArg,
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
}

/// Runs `hindsight flows`.
pub fn run(args: Args) -> Result<ExitCode> {
    let format = super::query::output_format(Some(args.format), None, Answer::Connections)?;
    let filter = match &args.filter {
        Some(text) => Some(Filter::parse(text)?),
        None => None,
    };
    let query = ConnQuery {
        ranges: ConnQuery::ranges_of(args.ip.as_deref(), filter.as_ref())?,
        filter,
        time: args.window.range()?,
        limit: args.limit,
        after: args.after.as_deref().map(decode_cursor).transpose()?,
    };
    let page = Reader::open(&args.archive.archive)?
        .snapshot()?
        .connections(&query)?;
    let mut out = BufWriter::with_capacity(1 << 16, io::stdout().lock());
    let mut writer = ConnWriter::new(format).map_err(anyhow::Error::msg)?;
    for entry in &page.entries {
        writer.write(&mut out, entry)?;
    }
    writer.finish(&mut out)?;
    out.flush()?;
    if let Some(cursor) = page.next {
        eprintln!(
            "more connections: add --after {} to see the next {}",
            encode_cursor(&cursor),
            args.limit
        );
    }
    Ok(ExitCode::SUCCESS)
}
