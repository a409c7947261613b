//! `hindsight record -i IFACE --archive DIR [--trigger FILTER --dump TEMPLATE]`:
//! live capture into the capture ring, archived behind it; a trigger writes a
//! pcap of the window around each matching packet (FlowScope).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use hindsight_live::{DumpConfig, RecordConfig, Recorder, TriggerConfig};
use hindsight_query::Filter;
use hindsight_ring::RingConfig;
use hindsight_trigger::DumpTemplate;

use hindsight_output::human_bytes;

use crate::ArchiveArg;

/// Arguments of `hindsight record`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Interface to capture on (`any` for all).
    #[arg(long, short = 'i', value_name = "IFACE")]
    interface: String,
    #[command(flatten)]
    archive: ArchiveArg,
    /// Memory of the capture ring, MiB (in 2 MiB chunks).
    #[arg(long, default_value_t = 256, value_name = "MIB")]
    ring_mib: usize,
    /// Bytes captured per packet into the ring (the archive keeps 128 of them).
    #[arg(long, short = 's', default_value_t = 262_144, value_name = "BYTES")]
    snaplen: u32,
    /// Kernel capture buffer, MiB (per capture thread).
    #[arg(long, default_value_t = 64, value_name = "MIB")]
    kernel_buffer_mib: u32,
    /// Capture threads, each a producer of the ring; more than one share the
    /// interface's packets by flow hash (AF_PACKET fanout).
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = clap::value_parser!(u8).range(1..=64))]
    fanout: u8,
    /// Seal (make durable and queryable) what was archived every this many seconds.
    #[arg(long, default_value_t = 60, value_name = "SECONDS")]
    seal_secs: u64,
    /// Trigger filter (either syntax): a matching packet starts a dump.
    #[arg(long, value_name = "FILTER")]
    trigger: Option<String>,
    /// Dump filter, with `$src`, `$dst`, `$sport`, `$dport`, `$proto` taken from
    /// the trigger packet.
    #[arg(long, default_value = "host $src", value_name = "TEMPLATE")]
    dump: String,
    /// Seconds of traffic before the trigger packet in a dump.
    #[arg(long, default_value_t = 10.0, value_name = "SECONDS")]
    before: f64,
    /// Seconds of traffic after the trigger packet in a dump (also the hold-off:
    /// matches within it do not trigger again).
    #[arg(long, default_value_t = 5.0, value_name = "SECONDS")]
    after: f64,
    /// Directory of the dumps (default: `dumps` in the archive).
    #[arg(long, value_name = "DIR")]
    dumps: Option<PathBuf>,
    /// Most bytes of packets in one dump, MiB.
    #[arg(long, default_value_t = 256, value_name = "MIB")]
    max_dump_mib: u64,
    /// Stop after this many seconds (default: at SIGINT or SIGTERM).
    #[arg(long, value_name = "SECONDS")]
    duration: Option<f64>,
}

fn seconds(name: &str, value: f64) -> Result<Duration> {
    Duration::try_from_secs_f64(value)
        .ok()
        .with_context(|| format!("--{name} {value}: expected a number of seconds ≥ 0"))
}

/// Records until SIGINT, SIGTERM or `--duration`, then drains the ring, seals and
/// prints what was done.
pub fn run(args: Args) -> Result<ExitCode> {
    anyhow::ensure!(args.seal_secs > 0, "--seal-secs must be positive");
    let trigger = match &args.trigger {
        Some(text) => {
            let filter = Filter::parse(text).map_err(|e| anyhow::anyhow!("--trigger: {e}"))?;
            if let Some(problem) = filter.packet_only_problem() {
                anyhow::bail!("--trigger: {problem}");
            }
            let dump = DumpTemplate::new(&args.dump).map_err(|e| anyhow::anyhow!("--dump: {e}"))?;
            Some(TriggerConfig {
                filter,
                dump,
                before: seconds("before", args.before)?,
                after: seconds("after", args.after)?,
            })
        }
        None => None,
    };
    let dumps = DumpConfig {
        dir: args
            .dumps
            .clone()
            .unwrap_or_else(|| args.archive.archive.join("dumps")),
        max_dump_bytes: args.max_dump_mib << 20,
        max_total_bytes: 0,
    };
    let duration = args.duration.map(|d| seconds("duration", d)).transpose()?;
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, Arc::clone(&stop))
            .context("cannot install the signal handlers")?;
    }
    let with_dumps = trigger.is_some();
    let config = RecordConfig {
        interface: args.interface.clone(),
        snaplen: args.snaplen,
        kernel_buffer: args.kernel_buffer_mib.saturating_mul(1 << 20),
        fanout: usize::from(args.fanout),
        ring: RingConfig::with_memory(args.ring_mib << 20),
        seal_every: Duration::from_secs(args.seal_secs),
        // No reader shares this process.
        tail_bytes: 0,
        trigger,
        dumps,
    };
    let (recorder, _opened) = Recorder::open(&args.archive.archive, config, with_dumps)
        .with_context(|| format!("cannot record into {}", args.archive.archive.display()))?;
    eprintln!(
        "recording on {} (link type {}), ring {}",
        args.interface,
        recorder.link_type().0,
        human_bytes((args.ring_mib as u64) << 20)
    );
    let started = Instant::now();
    let counters = recorder.counters();
    // Until a signal, the duration, or the archiver stops on an error (a full
    // disk): then `stop` returns it.
    while !stop.load(Ordering::Relaxed)
        && duration.is_none_or(|d| started.elapsed() < d)
        && !counters.archiver_failed.load(Ordering::Relaxed)
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    for line in recorder.stop()?.lines(&args.dump) {
        eprintln!("{line}");
    }
    Ok(ExitCode::SUCCESS)
}
