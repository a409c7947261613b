//! `hindsight sql 'SELECT ...' --archive DIR`

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use hindsight_output::{Answer, Format};
use hindsight_serve::client::Client;
use hindsight_sql::{Limits, SqlError, SqlSession};

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
    #[arg(long, short = 'F', value_enum)]
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
    let limits = Limits {
        max_rows: Some(args.max_rows),
        ..Limits::default()
    };
    if let Some(cluster) = &args.source.cluster {
        let client = super::cluster::client(cluster)?;
        let mut out = hindsight_output::create(args.output.as_deref())?;
        let outcome = hindsight_cluster::sql::answer(
            client,
            &args.sql,
            args.explain,
            format,
            &mut out,
            &limits,
        )?;
        out.flush()?;
        return Ok(super::cluster::report(&outcome));
    }
    let root = args.source.archive.as_deref().context("no archive")?;
    if !args.sealed_only
        && !args.allow_writes
        && !args.explain
        && let Some(client) = Client::find(root)
    {
        let body = serde_json::json!({
            "sql": args.sql,
            "max_rows": args.max_rows,
            "format": format.name(),
        });
        match client.post("sql", &body) {
            Ok(answer) => {
                let incomplete = answer.incomplete();
                let mut out = hindsight_output::create(args.output.as_deref())?;
                answer.copy_to(&mut out)?;
                out.flush()?;
                super::answered_by(&client);
                return Ok(super::incomplete_exit(incomplete, args.strict));
            }
            Err(error) => super::unanswered(&client, &error),
        }
    }
    let mut session = SqlSession::open(root)
        .with_context(|| format!("cannot open archive {}", root.display()))?;
    let settings = hindsight_ingest::settings::archive_settings(root, None)?;
    if !settings.home.is_empty() {
        session.set_home(settings.home);
    }
    session = session.with_objects(settings.objects.as_ref())?;
    if args.allow_writes {
        session = session.allow_writes();
    }
    // Before the output file is created: a refused statement touches no file.
    match session.check(&args.sql) {
        Err(error @ SqlError::ReadOnly { .. }) => {
            return Err(anyhow::Error::from(error)
                .context("give --allow-writes to run it with your own rights"));
        }
        result => result?,
    }
    let mut out = hindsight_output::create(args.output.as_deref())?;
    if args.explain {
        writeln!(out, "{}", session.explain(&args.sql)?)?;
        out.flush()?;
        return Ok(ExitCode::SUCCESS);
    }
    session.run(&args.sql, format, &mut out, &limits)?;
    out.flush()?;
    Ok(super::warn_exit(&session.incomplete_lines(), args.strict))
}
