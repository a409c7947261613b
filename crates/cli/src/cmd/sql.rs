//! `hindsight sql 'SELECT ...' --archive DIR`

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use hindsight_sql::{Limits, OutputFormat, SqlSession};

use crate::ArchiveArg;

/// Output formats of SQL results.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SqlFormat {
    /// An aligned table.
    Table,
    /// Comma-separated values with a header line.
    Csv,
    /// One JSON object per line.
    Jsonl,
}

/// Arguments of `hindsight sql`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The SQL statement; the table is `packets` (see docs/sql.md).
    #[arg(value_name = "SQL")]
    sql: String,
    #[command(flatten)]
    archive: ArchiveArg,
    /// Output format.
    #[arg(long, short = 'F', value_enum, default_value = "table")]
    format: SqlFormat,
    /// Write to FILE instead of standard output.
    #[arg(long, short = 'o', value_name = "FILE")]
    output: Option<PathBuf>,
    /// Refuse results longer than N rows (table output is buffered).
    #[arg(long, value_name = "N", default_value_t = 1_000_000)]
    max_rows: u64,
    /// Print the plan instead of running the statement.
    #[arg(long)]
    explain: bool,
}

/// Runs `hindsight sql`.
pub fn run(args: Args) -> Result<ExitCode> {
    let root = &args.archive.archive;
    let session = SqlSession::open(root)
        .with_context(|| format!("cannot open archive {}", root.display()))?;
    let mut out: Box<dyn Write> = match &args.output {
        Some(path) => Box::new(BufWriter::new(
            File::create(path).with_context(|| format!("cannot create {}", path.display()))?,
        )),
        None => Box::new(BufWriter::new(io::stdout().lock())),
    };
    if args.explain {
        writeln!(out, "{}", session.explain(&args.sql)?)?;
        out.flush()?;
        return Ok(ExitCode::SUCCESS);
    }
    let format = match args.format {
        SqlFormat::Table => OutputFormat::Table,
        SqlFormat::Csv => OutputFormat::Csv,
        SqlFormat::Jsonl => OutputFormat::Jsonl,
    };
    let limits = Limits {
        max_rows: Some(args.max_rows),
        timeout: None,
    };
    session.run(&args.sql, format, &mut out, &limits)?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
