//! `hindsight sql 'SELECT ...' --archive DIR`

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use hindsight_output::{Answer, Format};
use hindsight_service::{Output, SqlQuestion};
use hindsight_sql::SqlError;

/// Arguments of `hindsight sql`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The SQL statement; the table is `packets` (see docs/sql.md). `-`
    /// reads it from standard input.
    #[arg(value_name = "SQL")]
    sql: String,
    #[command(flatten)]
    source: crate::Source,
    /// Output format [default: from -o FILE's extension (.csv, .jsonl, .parquet), else table].
    #[arg(long, short = 'F', value_parser = crate::format_arg())]
    format: Option<Format>,
    /// Write the result to FILE instead of standard output.
    #[arg(long, short = 'o', value_name = "FILE")]
    output: Option<PathBuf>,
    /// Let statements that write, create, drop or set options run (COPY ... TO,
    /// CREATE EXTERNAL TABLE, SET); without it SQL only reads.
    #[arg(long, conflicts_with = "cluster")]
    allow_writes: bool,
    /// Fail (exit code 3) when a damaged segment or catalog line made the answer
    /// incomplete, instead of answering from the rest with a warning.
    #[arg(long)]
    strict: bool,
    /// Refuse results longer than N rows (table output is buffered).
    #[arg(long, value_name = "N", default_value_t = 1_000_000)]
    max_rows: u64,
    /// Print the plan instead of running the statement.
    #[arg(long)]
    explain: bool,
    /// Read the sealed segments here, even when a `serve` captures into the
    /// archive (by default its API answers, with the rows not yet sealed).
    #[arg(long, conflicts_with = "cluster")]
    sealed_only: bool,
}

/// Runs `hindsight sql`.
pub fn run(mut args: Args) -> Result<ExitCode> {
    if args.sql == "-" {
        args.sql.clear();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut args.sql)
            .context("cannot read the statement from standard input")?;
    }
    let format = super::query::output_format(args.format, args.output.as_deref(), Answer::Rows)?;
    if format == Format::Parquet && args.output.is_none() && !args.explain {
        bail!("--format parquet writes a file: give -o FILE.parquet");
    }
    let question = SqlQuestion {
        text: args.sql,
        max_rows: args.max_rows,
        explain: args.explain,
        allow_writes: args.allow_writes,
    };
    let mut out = Output::to(args.output.as_deref());
    let answered = args
        .source
        .questions(args.sealed_only)?
        .sql(&question, format, &mut out)
        .map_err(|error| match error.downcast_ref::<SqlError>() {
            Some(SqlError::ReadOnly { .. }) => {
                error.context("give --allow-writes to run it with your own rights")
            }
            _ => error,
        })?;
    out.finish()?;
    Ok(super::exit(&answered, args.strict))
}
