//! The `hindsight` command: a thin shell over the library crates, one module per
//! subcommand under `cmd/`.

mod cmd;

use std::io::{self, IsTerminal};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// The version and the commit it was built from (see `build.rs`).
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("HINDSIGHT_COMMIT"),
    ")"
);

/// hindsight: a network flight recorder. Records traffic into a compressed, indexed
/// archive and answers questions about it.
#[derive(Debug, Parser)]
#[command(name = "hindsight", version = VERSION, about, max_term_width = 100)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Where the archive lives, shared by every subcommand.
#[derive(Debug, clap::Args)]
struct ArchiveArg {
    /// Archive directory (created by `ingest` if missing).
    #[arg(long, short = 'a', env = "HINDSIGHT_ARCHIVE", value_name = "DIR")]
    archive: PathBuf,
}

/// Where a question goes: one archive, or a cluster of recorders.
#[derive(Debug, clap::Args)]
struct Source {
    /// Archive directory.
    #[arg(
        long,
        short = 'a',
        env = "HINDSIGHT_ARCHIVE",
        value_name = "DIR",
        required_unless_present = "cluster"
    )]
    archive: Option<PathBuf>,
    /// Ask a cluster of recorders instead (its `[cluster]` file): only the nodes
    /// that may hold matches answer, merged and tagged with their node; exit code
    /// 3 if one of them did not answer.
    #[arg(long, value_name = "CLUSTER.toml", conflicts_with = "archive")]
    cluster: Option<PathBuf>,
}

/// `--format`: the formats a command line offers, by their names.
fn format_arg() -> impl clap::builder::TypedValueParser<Value = hindsight_output::Format> {
    use clap::builder::TypedValueParser;
    let names = hindsight_output::Format::offered().map(hindsight_output::Format::name);
    clap::builder::PossibleValuesParser::new(names).map(|name| {
        hindsight_output::Format::from_name(&name).unwrap_or(hindsight_output::Format::Table)
    })
}

impl Source {
    /// What answers this source's questions (the one place that chooses):
    /// the cluster; else the `serve` that captures into the archive, unless
    /// `sealed_only`; else the archive.
    fn questions(
        &self,
        sealed_only: bool,
    ) -> anyhow::Result<Box<dyn hindsight_service::Questions>> {
        hindsight_service::open(&hindsight_service::Source {
            archive: self.archive.clone(),
            cluster: self.cluster.clone(),
            sealed_only,
        })
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Read pcap/pcapng captures (plain or gzip) into the archive.
    Ingest(cmd::ingest::Args),
    /// Find packets matching a filter (Wireshark display-filter or tcpdump syntax).
    Query(cmd::query::Args),
    /// Run SQL over the `packets` table (Apache DataFusion).
    Sql(cmd::sql::Args),
    /// Receive NetFlow v5/v9 and IPFIX over UDP into the flows table and the connection index.
    Collect(cmd::collect::Args),
    /// List the connections of an address or network from the connection index.
    Flows(cmd::flows::Args),
    /// Show what the archive holds: segments, time span, packets, bytes.
    Stats(cmd::stats::Args),
    /// Verify every segment, the catalog and the indexes; --repair sets damage aside.
    Check(cmd::check::Args),
    /// Capture live from an interface into the archive; dump pcaps around triggers.
    Record(cmd::record::Args),
    /// Run a continuous query (SQL over windows of a stream) and print its answers.
    Watch(cmd::watch::Args),
    /// A cluster of recorders: the nodes as its index node sees them, or a new node token.
    Cluster(cmd::cluster::Args),
    /// Run continuously: live capture, archive, retention, triggers, and the HTTP API and web UI.
    Serve(cmd::serve::Args),
    /// Write the man pages or shell completions (for packagers).
    #[command(hide = true)]
    Generate(cmd::generate::Args),
}

fn main() -> ExitCode {
    // The command runs on a thread with the stack of the threads that plan
    // and run SQL (`hindsight_sql::STACK_BYTES`): a statement is planned on
    // the thread that asks for it.
    let code = std::thread::Builder::new()
        .name("main".to_owned())
        .stack_size(hindsight_sql::STACK_BYTES)
        .spawn(run)
        .map_or(ExitCode::FAILURE, |thread| {
            thread.join().unwrap_or(ExitCode::FAILURE)
        });
    exit_now(code)
}

fn run() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            // Help and version go to stdout with status 0; usage errors to stderr.
            let _ = error.print();
            return if error.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    hindsight_output::log::init(hindsight_output::log::LogFormat::Plain);
    let result = match cli.command {
        Command::Ingest(args) => cmd::ingest::run(args),
        Command::Query(args) => cmd::query::run(args),
        Command::Sql(args) => cmd::sql::run(args),
        Command::Flows(args) => cmd::flows::run(args),
        Command::Collect(args) => cmd::collect::run(args),
        Command::Stats(args) => cmd::stats::run(args),
        Command::Check(args) => cmd::check::run(args),
        Command::Record(args) => cmd::record::run(args),
        Command::Serve(args) => cmd::serve::run(args),
        Command::Watch(args) => cmd::watch::run(args),
        Command::Cluster(args) => cmd::cluster::run(args),
        Command::Generate(args) => {
            cmd::generate::run(args, <Cli as clap::CommandFactory>::command())
        }
    };
    match result {
        Ok(code) => code,
        Err(error) if is_broken_pipe(&error) => ExitCode::SUCCESS,
        Err(error) => {
            let color = io::stderr().is_terminal();
            let prefix = if color {
                "\x1b[1;31merror\x1b[0m"
            } else {
                "error"
            };
            eprintln!("{prefix}: {}", chain_text(&error));
            ExitCode::FAILURE
        }
    }
}

/// Ends the process once everything the command owned is dropped (archives
/// closed, files synced) and standard output is flushed, without running the
/// exit handlers: those only free the static option tables of RocksDB's C++
/// library, about a quarter of a millisecond that every short query would pay.
fn exit_now(code: ExitCode) -> ExitCode {
    use std::io::Write;
    if io::stdout().flush().is_err() || io::stderr().flush().is_err() {
        return code;
    }
    let status = if code == ExitCode::SUCCESS {
        0
    } else if code == ExitCode::from(2) {
        2
    } else if code == ExitCode::from(cmd::query::INCOMPLETE) {
        i32::from(cmd::query::INCOMPLETE)
    } else {
        1
    };
    // SAFETY: `_exit` ends the process; nothing of this process runs after it.
    unsafe { libc::_exit(status) }
}

/// The error and its causes, `: `-separated, as anyhow's `{:#}` prints them,
/// but without a cause whose text its outer message already ends with (an
/// error that says its source and also names it as its source).
fn chain_text(error: &anyhow::Error) -> String {
    let mut text = String::new();
    let mut outer = String::new();
    for cause in error.chain() {
        let message = cause.to_string();
        if !outer.is_empty() && outer.ends_with(&message) {
            outer = message;
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&message);
        outer = message;
    }
    text
}

/// Returns true if the error is a closed pipe (`hindsight query ... | head`): not a failure.
fn is_broken_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<io::Error>()
            .is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe)
    })
}
