//! Live streams for watches: an interface read directly (`hindsight watch
//! -i IFACE`) and a NetFlow/IPFIX collector (`--collect udp://ADDR:PORT`).
//! Both run on the caller's thread until `stop`, then end the stream.

use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, Ordering};

use hindsight_flow::netflow::NetflowStats;
use hindsight_live::{InterfaceReader, LiveError};

use crate::{Answer, Watcher};

/// Watches the packets of `reader` until `stop`. While the interface is
/// quiet, windows close by the clock: the kernel has delivered every packet
/// up to a little before now.
pub fn interface(
    reader: &mut InterfaceReader,
    watcher: &mut Watcher,
    stop: &AtomicBool,
    answer: &mut dyn FnMut(Answer),
) -> Result<(), LiveError> {
    while !stop.load(Ordering::Relaxed) {
        match reader.next_frame()? {
            Some(frame) => watcher.push_frame(&frame, answer),
            None => watcher.tick(InterfaceReader::caught_up_to(), answer),
        }
    }
    watcher.finish(answer);
    Ok(())
}

/// Watches the connection records exported to `socket` (NetFlow v5, v9,
/// IPFIX) until `stop`. The stream's time is the latest end of a connection
/// received; records of windows already answered are late (see
/// [`Watcher::set_flow_lateness`]). Malformed export packets go to `malformed`.
pub fn collector(
    socket: &UdpSocket,
    watcher: &mut Watcher,
    stop: &AtomicBool,
    answer: &mut dyn FnMut(Answer),
    malformed: &mut dyn FnMut(String),
) -> std::io::Result<NetflowStats> {
    let mut collector = hindsight_live::collector::Collector::default();
    let mut now = i64::MIN;
    while !stop.load(Ordering::Relaxed) {
        let received = collector.receive(socket, &mut |exporter, error| {
            malformed(format!("{exporter}: {error}"));
        })?;
        let Some(records) = received else {
            continue;
        };
        now = records.iter().map(|r| r.last_ns).fold(now, i64::max);
        watcher.push_flows(std::mem::take(records), now, answer);
    }
    watcher.finish(answer);
    Ok(collector.stats().clone())
}

/// Where a watch's rows come from.
#[derive(Debug)]
pub enum Stream {
    /// Captures, replayed in order.
    Replay(Vec<std::path::PathBuf>),
    /// An interface, until `stop`: its name and the bytes kept of a packet
    /// (0: whole packets).
    Interface(String, u32),
    /// The NetFlow/IPFIX records exported to a UDP address (`udp://ADDR:PORT`),
    /// until `stop`, taken until `lateness` past their window's end.
    Collect(String, std::time::Duration),
    /// The archive's own past: the windows of `[since_ns, until_ns)`.
    OverArchive(i64, i64),
}

/// Runs `spec` over `stream` on `session` (its archive and home network),
/// each answer to `answer`, what it does to `notes`, until the stream ends or
/// `stop`. Returns how many rows came after their windows were answered.
pub fn watch(
    session: hindsight_sql::SqlSession,
    spec: crate::WatchSpec,
    stream: &Stream,
    stop: &AtomicBool,
    answer: &mut dyn FnMut(Answer),
    notes: &mut dyn FnMut(String),
) -> anyhow::Result<u64> {
    if let Stream::OverArchive(since_ns, until_ns) = stream {
        crate::rerun::rerun(&session, vec![spec], *since_ns, *until_ns, answer)?;
        return Ok(0);
    }
    let flows = (!matches!(stream, Stream::Collect(..))).then(Default::default);
    let mut watcher = Watcher::new(session, vec![spec], flows)?;
    match stream {
        Stream::Interface(name, snaplen) => {
            let mut reader = InterfaceReader::open(name, *snaplen, 64 << 20)?;
            notes(format!("watching {name} (Ctrl-C stops)"));
            interface(&mut reader, &mut watcher, stop, answer)?;
        }
        Stream::Collect(url, lateness) => {
            let socket = hindsight_live::collector::bind(url)?;
            watcher.set_flow_lateness(*lateness);
            notes(format!(
                "watching the flow records sent to udp://{} (Ctrl-C stops)",
                socket.local_addr()?
            ));
            collector(&socket, &mut watcher, stop, answer, &mut |line| {
                notes(format!("malformed: {line}"));
            })?;
        }
        Stream::Replay(paths) => crate::replay::replay_until(paths, &mut watcher, answer, stop)?,
        Stream::OverArchive(..) => {}
    }
    Ok(watcher.counts().late)
}

/// The home network for `ip_home()`: `nets` if given, else the archive's
/// `[network] home`; `None` if neither names one.
pub fn home(
    nets: &[String],
    archive: Option<&std::path::Path>,
) -> anyhow::Result<Option<hindsight_sql::Networks>> {
    use anyhow::Context;
    if !nets.is_empty() {
        let nets = nets
            .iter()
            .map(|net| hindsight_model::network_range(net).map_err(anyhow::Error::msg))
            .collect::<anyhow::Result<_>>()
            .context("bad --home")?;
        return Ok(Some(nets));
    }
    let Some(root) = archive else {
        return Ok(None);
    };
    let settings = hindsight_store::settings::archive_settings(root, None)?;
    Ok((!settings.home.is_empty()).then_some(settings.home))
}
