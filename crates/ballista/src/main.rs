//! `hindsight-ballista`: Apache DataFusion Ballista's scheduler and executor
//! with hindsight's SQL functions, and a client that asks them about the
//! segments an archive copies to S3-compatible storage.

use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use ballista_core::object_store::{runtime_env_with_s3_support, session_config_with_s3_support};
use ballista_executor::executor_process::{ExecutorProcessConfig, start_executor_process};
use ballista_scheduler::cluster::BallistaCluster;
use ballista_scheduler::config::SchedulerConfig;
use ballista_scheduler::scheduler_process::start_server;
use clap::{Parser, Subcommand};
use datafusion::execution::context::SQLOptions;
use hindsight_ballista::{Archives, check_loopback, client, function_registry, session_state};
use hindsight_output::Format;
use hindsight_output::rows::write;

#[derive(Parser)]
#[command(
    name = "hindsight-ballista",
    about = "Apache DataFusion Ballista over hindsight's archive copied to S3-compatible storage",
    long_about = "Apache DataFusion Ballista over hindsight's archive copied to S3-compatible \
                  storage.\n\nStart one scheduler and any number of executors, then ask with \
                  `sql`. Every process reads AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY. \
                  Ballista has no authentication: every process listens on loopback only."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Ballista's scheduler (its own options: `scheduler --help`).
    Scheduler {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        options: Vec<String>,
    },
    /// A Ballista executor (its own options: `executor --help`).
    Executor {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        options: Vec<String>,
    },
    /// Runs a SQL statement over the `packets` and `flows` tables of the
    /// archives' copies on the cluster, and prints its rows.
    Sql {
        /// The statement.
        sql: String,
        /// The scheduler.
        #[arg(long, default_value = "df://127.0.0.1:50050")]
        scheduler: String,
        /// An archive's `[archive] object_store` (`s3://bucket/prefix`); one per
        /// node whose copies to read.
        #[arg(long = "archive", required = true)]
        archives: Vec<String>,
        /// The S3 endpoint, for a store other than AWS.
        #[arg(long)]
        endpoint: Option<String>,
        /// The S3 region.
        #[arg(long)]
        region: Option<String>,
        /// Output format.
        #[arg(long, value_parser = format_arg(), default_value = "table")]
        format: Format,
        /// Prints the distributed plan instead of running the statement.
        #[arg(long)]
        explain: bool,
    },
}

/// `--format`: the formats a command line offers, by their names.
fn format_arg() -> impl clap::builder::TypedValueParser<Value = Format> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(Format::offered().map(Format::name))
        .map(|name| Format::from_name(&name).unwrap_or(Format::Table))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_ansi(false)
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        // Ballista's own binaries: deep plans recurse.
        .thread_stack_size(32 * 1024 * 1024)
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli.command)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// Ballista's own options, with `--bind-host 127.0.0.1` unless given.
fn options(program: &str, given: Vec<String>) -> Vec<String> {
    let mut args = vec![format!("hindsight-ballista {program}")];
    if !given
        .iter()
        .any(|a| a == "--bind-host" || a.starts_with("--bind-host="))
    {
        args.extend(["--bind-host".to_string(), "127.0.0.1".to_string()]);
    }
    args.extend(given);
    args
}

async fn run(command: Command) -> Result<()> {
    match command {
        Command::Scheduler { options: given } => {
            let opt = ballista_scheduler::config::Config::parse_from(options("scheduler", given));
            check_loopback(&opt.bind_host)?;
            let addr: SocketAddr = format!("{}:{}", opt.bind_host, opt.bind_port)
                .parse()
                .with_context(|| format!("--bind-host {}", opt.bind_host))?;
            let config: SchedulerConfig = opt.try_into()?;
            let config = config
                .with_override_config_producer(Arc::new(session_config_with_s3_support))
                .with_override_session_builder(Arc::new(session_state));
            let cluster = BallistaCluster::new_from_config(&config).await?;
            start_server(cluster, addr, Arc::new(config)).await?;
        }
        Command::Executor { options: given } => {
            let opt = ballista_executor::config::Config::parse_from(options("executor", given));
            check_loopback(&opt.bind_host)?;
            let mut config: ExecutorProcessConfig = opt.try_into()?;
            config.override_config_producer = Some(Arc::new(session_config_with_s3_support));
            config.override_runtime_producer = Some(Arc::new(runtime_env_with_s3_support));
            config.override_function_registry = Some(Arc::new(function_registry()));
            start_executor_process(Arc::new(config)).await?;
        }
        Command::Sql {
            sql,
            scheduler,
            archives,
            endpoint,
            region,
            format,
            explain,
        } => {
            format
                .check(hindsight_output::Answer::Rows)
                .map_err(anyhow::Error::msg)?;
            if format == Format::Parquet {
                bail!("--format parquet: give table, csv or jsonl");
            }
            let archives = Archives {
                urls: archives,
                endpoint,
                region,
            };
            let context = client(&scheduler, &archives).await?;
            let statement = if explain {
                format!("EXPLAIN {sql}")
            } else {
                sql
            };
            // Reads only, as `hindsight sql`: no DDL, no writes, no SET.
            let read_only = SQLOptions::new()
                .with_allow_ddl(false)
                .with_allow_dml(false)
                .with_allow_statements(false);
            let batches = context
                .sql_with_options(&statement, read_only)
                .await?
                .collect()
                .await?;
            let mut out = std::io::stdout().lock();
            write(&batches, format, &mut out)?;
            out.flush()?;
        }
    }
    Ok(())
}
