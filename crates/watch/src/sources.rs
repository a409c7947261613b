//! Live streams for watches: an interface read directly (`hindsight watch
//! -i IFACE`) and a NetFlow/IPFIX collector (`--collect udp://ADDR:PORT`).
//! Both run on the caller's thread until `stop`, then end the stream.

use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, Ordering};

use hindsight_flow::netflow::{NetflowDecoder, NetflowStats};
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
    let mut decoder = NetflowDecoder::new();
    let mut records = Vec::new();
    let mut buffer = vec![0u8; 65_536];
    let mut now = i64::MIN;
    while !stop.load(Ordering::Relaxed) {
        if let Some((len, exporter)) = hindsight_live::collector::receive(socket, &mut buffer)? {
            let payload = buffer.get(..len).unwrap_or_default();
            if let Err(error) = decoder.decode(exporter, payload, &mut records) {
                malformed(format!("{exporter}: {error}"));
            }
            now = records.iter().map(|r| r.last_ns).fold(now, i64::max);
            watcher.push_flows(std::mem::take(&mut records), now, answer);
        }
    }
    watcher.finish(answer);
    Ok(decoder.stats().clone())
}
