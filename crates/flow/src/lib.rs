//! The role of the flow crate is to produce connection records ([`FlowRecord`]):
//! assembled from decoded packets, as `hindsight ingest` reads a capture (a
//! bidirectional flow table with idle and active timeouts and TCP close handling,
//! bounded in memory by a maximum number of open flows), or read from flow logs
//! ([`zeek`] conn.log), or decoded from NetFlow v5/v9 and IPFIX export packets
//! ([`netflow`]).
//!
//! Semantics (the `flows` format documentation has the full list):
//! - A flow is keyed by protocol and the two (address, port) endpoints, either way
//!   round, so both directions of a connection are one record. The originator is
//!   the sender of the first packet, unless that packet is a TCP SYN-ACK (then the
//!   receiver is). ICMP follows NetFlow: no pairing, the source port is 0 and the
//!   destination port `type << 8 | code`.
//! - Bytes are IP bytes (header included), as NetFlow and nfdump count them.
//! - A flow ends after `idle_timeout` without packets, after `active_timeout` since
//!   its first packet (long connections give several records, as NetFlow's active
//!   timeout does), or `close_linger` after a RST or after FINs from both sides (so
//!   the final ACK still belongs to it, as in Zeek).
//! - Time is packet time: timeouts are checked as packets arrive, so a capture
//!   read from a file gives the same records however fast it is read.
//! - Packets without IP addresses (ARP, non-IP, undecodable) are not flows.
//!   IP fragments after the first have no ports and count in a flow with ports 0.

pub mod netflow;
pub mod zeek;

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use foldhash::HashMap;
use std::time::Duration;

use hindsight_model::{
    Addr16, FlowRecord, FlowSource, FlowState, PacketHeaders, ip_proto, tcp_flags,
};

/// Tunables of the flow table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowTableConfig {
    /// A flow without packets for this long is closed. Default 60 s (nfpcapd's).
    pub idle_timeout: Duration,
    /// A flow is cut into a new record after this long. Default 300 s (nfpcapd's).
    pub active_timeout: Duration,
    /// How long a flow stays open after a RST or FINs from both sides. Default 5 s.
    pub close_linger: Duration,
    /// At most this many flows are open; past it the flow idle the longest is
    /// closed early (and counted in [`FlowTableStats::evicted`]). Default 1,000,000.
    pub max_flows: usize,
    /// Application fields ([`hindsight_app`]): read from the first packets of
    /// each connection when set. Default on, with the default limits.
    pub app: Option<hindsight_app::Limits>,
    /// At most this many bytes of all flows' first packets are buffered for
    /// application fields; a flow that would need more gives what it has
    /// (counted in [`FlowTableStats::app_cut`]). Default 64 MiB.
    pub app_buffer_bytes: usize,
}

impl Default for FlowTableConfig {
    fn default() -> Self {
        Self {
            idle_timeout: Duration::from_secs(60),
            active_timeout: Duration::from_secs(300),
            close_linger: Duration::from_secs(5),
            max_flows: 1_000_000,
            app: Some(hindsight_app::Limits::default()),
            app_buffer_bytes: 64 << 20,
        }
    }
}

/// Counters of a flow table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowTableStats {
    /// Packets that went into a flow.
    pub packets: u64,
    /// Packets that are not flows (no IP addresses).
    pub not_flows: u64,
    /// Records emitted.
    pub records: u64,
    /// Flows closed early because the table was full.
    pub evicted: u64,
    /// Records with application fields.
    pub app_records: u64,
    /// Flows whose application fields were cut short because the buffers of
    /// all flows were at [`FlowTableConfig::app_buffer_bytes`].
    pub app_cut: u64,
}

/// A packet's transport payload, for the application fields.
#[derive(Clone, Copy, Debug, Default)]
pub struct Payload<'a> {
    /// The TCP or UDP payload bytes captured.
    pub bytes: &'a [u8],
    /// The TCP sequence number (`None` for UDP).
    pub seq: Option<u32>,
    /// The capture holds only the payload's start (a snap length).
    pub cut: bool,
}

/// The flow key: protocol and the two endpoints. For paired protocols the
/// endpoints are in canonical order (smaller first); for ICMP they are as sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct FlowKey {
    proto: u8,
    a: Addr16,
    b: Addr16,
    port_a: u16,
    port_b: u16,
}

// Three writes: the addresses, then protocol and ports in one word.
impl std::hash::Hash for FlowKey {
    #[inline]
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.a.hash(state);
        self.b.hash(state);
        state.write_u64(
            u64::from(self.proto) << 32 | u64::from(self.port_a) << 16 | u64::from(self.port_b),
        );
    }
}

/// Per-direction TCP history, for the connection state.
#[derive(Clone, Copy, Debug, Default)]
struct TcpHistory {
    syn: bool,
    syn_ack: bool,
    fin: bool,
    rst: bool,
}

#[derive(Debug)]
struct OpenFlow {
    key: FlowKey,
    record: FlowRecord,
    orig: TcpHistory,
    resp: TcpHistory,
    /// Set once the flow saw a RST or FINs from both sides.
    closing_at: Option<i64>,
    /// Unique per flow, so a queue entry of an ended flow with the same key is
    /// recognised as stale.
    generation: u64,
    /// The application fields' extractor, while it reads.
    app: Option<Box<hindsight_app::Conversation>>,
}

/// A bidirectional flow table.
#[derive(Debug)]
pub struct FlowTable {
    config: FlowTableConfig,
    /// The slot of each open flow.
    flows: HashMap<FlowKey, usize>,
    /// Open flows by slot; `None` slots are listed in `free`.
    slots: Vec<Option<OpenFlow>>,
    free: Vec<usize>,
    /// The key and slot of the last packet's flow: most packets follow one of
    /// their own flow (73% on lan-hour), and then need no hash lookup.
    last: Option<(FlowKey, usize)>,
    /// (deadline, generation, slot), earliest deadline first. Entries are re-queued
    /// lazily: when one comes due, the flow's real deadline is checked; an entry
    /// whose slot holds another generation is stale.
    queue: BinaryHeap<Reverse<(i64, u64, usize)>>,
    now: i64,
    next_generation: u64,
    stats: FlowTableStats,
    /// Bytes the open flows' extractors buffer.
    app_bytes: usize,
}

fn nanos(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

impl FlowTable {
    /// Returns an empty table.
    pub fn new(config: FlowTableConfig) -> Self {
        Self {
            config,
            flows: HashMap::default(),
            slots: Vec::new(),
            free: Vec::new(),
            last: None,
            queue: BinaryHeap::new(),
            now: i64::MIN,
            next_generation: 0,
            stats: FlowTableStats::default(),
            app_bytes: 0,
        }
    }

    /// Returns the counters.
    pub fn stats(&self) -> FlowTableStats {
        self.stats
    }

    /// Returns the number of open flows.
    pub fn open_flows(&self) -> usize {
        self.flows.len()
    }

    /// Accounts one packet seen at `ts_ns` with decoded `headers` and `wire_len`
    /// bytes on the wire; appends the records that end by this time to `out`.
    pub fn push(
        &mut self,
        ts_ns: i64,
        headers: &PacketHeaders,
        wire_len: u32,
        out: &mut Vec<FlowRecord>,
    ) {
        self.push_payload(ts_ns, headers, wire_len, Payload::default(), out);
    }

    /// [`push`](Self::push), with the packet's transport payload for the
    /// application fields.
    pub fn push_payload(
        &mut self,
        ts_ns: i64,
        headers: &PacketHeaders,
        wire_len: u32,
        payload: Payload<'_>,
        out: &mut Vec<FlowRecord>,
    ) {
        let (Some(src), Some(dst), Some(proto), Some(_)) = (
            headers.src_addr,
            headers.dst_addr,
            headers.ip_proto,
            headers.ip_version,
        ) else {
            self.stats.not_flows += 1;
            return;
        };
        if ts_ns > self.now {
            self.now = ts_ns;
            self.expire(out);
        }
        self.stats.packets += 1;
        let (src_port, dst_port) = match proto {
            ip_proto::ICMP | ip_proto::ICMPV6 => (
                0,
                u16::from(headers.icmp_type.unwrap_or(0)) << 8
                    | u16::from(headers.icmp_code.unwrap_or(0)),
            ),
            _ => (headers.src_port.unwrap_or(0), headers.dst_port.unwrap_or(0)),
        };
        let paired = !matches!(proto, ip_proto::ICMP | ip_proto::ICMPV6);
        let forward = !paired || (src, src_port) <= (dst, dst_port);
        let key = if forward {
            FlowKey {
                proto,
                a: src,
                b: dst,
                port_a: src_port,
                port_b: dst_port,
            }
        } else {
            FlowKey {
                proto,
                a: dst,
                b: src,
                port_a: dst_port,
                port_b: src_port,
            }
        };
        let flags = headers.tcp_flags.unwrap_or(0);
        let bytes = u64::from(headers.ip_len.unwrap_or(wire_len));

        let slot = match self.last {
            Some((last, slot)) if last == key => slot,
            _ => self.slot_of(key, ts_ns, flags, (src, src_port), out),
        };
        self.last = Some((key, slot));
        let Some(flow) = self.slots.get_mut(slot).and_then(Option::as_mut) else {
            return;
        };
        let record = &mut flow.record;
        record.first_ns = record.first_ns.min(ts_ns);
        record.last_ns = record.last_ns.max(ts_ns);
        let outbound = record.src == src && record.src_port == src_port;
        if outbound {
            record.packets_out += 1;
            record.bytes_out += bytes;
        } else {
            record.packets_in += 1;
            record.bytes_in += bytes;
        }
        if proto == ip_proto::TCP {
            record.tcp_flags |= flags;
            let side = if outbound {
                &mut flow.orig
            } else {
                &mut flow.resp
            };
            if flags & tcp_flags::SYN != 0 {
                if flags & tcp_flags::ACK != 0 {
                    side.syn_ack = true;
                } else {
                    side.syn = true;
                }
            }
            side.fin |= flags & tcp_flags::FIN != 0;
            side.rst |= flags & tcp_flags::RST != 0;
            let closed = flow.orig.rst || flow.resp.rst || (flow.orig.fin && flow.resp.fin);
            if closed && flow.closing_at.is_none() {
                let at = ts_ns.saturating_add(nanos(self.config.close_linger));
                flow.closing_at = Some(at);
                self.queue.push(Reverse((at, flow.generation, slot)));
            }
        }
        if flags & tcp_flags::SYN != 0
            && let (Some(conversation), Some(seq)) = (flow.app.as_mut(), payload.seq)
        {
            conversation.syn(outbound, seq);
        }
        if !payload.bytes.is_empty()
            && let Some(conversation) = flow.app.as_mut()
        {
            let before = conversation.buffered();
            conversation.push(outbound, payload.seq, payload.bytes, payload.cut);
            let after = conversation.buffered();
            self.app_bytes = (self.app_bytes + after).saturating_sub(before);
            let over = self.app_bytes > self.config.app_buffer_bytes;
            if conversation.is_done() || over {
                if over && !conversation.is_done() {
                    self.stats.app_cut += 1;
                }
                close_app(&mut self.app_bytes, flow);
            }
        }
    }

    /// The slot of the flow `key`, opened by this packet if it is new (closing
    /// the flow due first if the table is full).
    fn slot_of(
        &mut self,
        key: FlowKey,
        ts_ns: i64,
        flags: u16,
        (src, src_port): (Addr16, u16),
        out: &mut Vec<FlowRecord>,
    ) -> usize {
        if let Some(&slot) = self.flows.get(&key) {
            return slot;
        }
        if self.flows.len() >= self.config.max_flows {
            self.evict_one(out);
        }
        let proto = key.proto;
        let (dst, dst_port) = if (key.a, key.port_a) == (src, src_port) {
            (key.b, key.port_b)
        } else {
            (key.a, key.port_a)
        };
        // The originator sends the first packet, unless it is a SYN-ACK.
        let syn_ack =
            flags & (tcp_flags::SYN | tcp_flags::ACK) == (tcp_flags::SYN | tcp_flags::ACK);
        let (orig, orig_port, resp, resp_port) = if proto == ip_proto::TCP && syn_ack {
            (dst, dst_port, src, src_port)
        } else {
            (src, src_port, dst, dst_port)
        };
        let record = FlowRecord {
            first_ns: ts_ns,
            last_ns: ts_ns,
            src: orig,
            dst: resp,
            src_port: orig_port,
            dst_port: resp_port,
            proto,
            source: FlowSource::Packets,
            ..FlowRecord::default()
        };
        let generation = self.next_generation;
        self.next_generation += 1;
        let flow = OpenFlow {
            key,
            record,
            orig: TcpHistory::default(),
            resp: TcpHistory::default(),
            closing_at: None,
            generation,
            app: self.config.app.and_then(|limits| {
                hindsight_app::Conversation::new(proto, orig_port, resp_port, limits).map(Box::new)
            }),
        };
        let slot = match self.free.pop() {
            Some(slot) => {
                self.slots[slot] = Some(flow);
                slot
            }
            None => {
                self.slots.push(Some(flow));
                self.slots.len() - 1
            }
        };
        self.flows.insert(key, slot);
        let deadline = ts_ns.saturating_add(nanos(self.config.idle_timeout));
        self.queue.push(Reverse((deadline, generation, slot)));
        slot
    }

    /// The open flow in `slot` if it is of `generation`.
    fn flow(&self, slot: usize, generation: u64) -> Option<&OpenFlow> {
        self.slots
            .get(slot)
            .and_then(Option::as_ref)
            .filter(|flow| flow.generation == generation)
    }

    /// Returns when `flow` is due to end, by its last packet, first packet and close.
    fn deadline(&self, flow: &OpenFlow) -> i64 {
        let idle = flow
            .record
            .last_ns
            .saturating_add(nanos(self.config.idle_timeout));
        let active = flow
            .record
            .first_ns
            .saturating_add(nanos(self.config.active_timeout));
        let mut deadline = idle.min(active);
        if let Some(closing) = flow.closing_at {
            deadline = deadline.min(closing);
        }
        deadline
    }

    /// Ends the flows whose deadline has passed at `self.now`.
    fn expire(&mut self, out: &mut Vec<FlowRecord>) {
        while let Some(&Reverse((due, generation, slot))) = self.queue.peek() {
            if due > self.now {
                break;
            }
            self.queue.pop();
            let Some(flow) = self.flow(slot, generation) else {
                continue;
            };
            let deadline = self.deadline(flow);
            if deadline > self.now {
                // Still active: look again at its real deadline.
                self.queue.push(Reverse((deadline, generation, slot)));
                continue;
            }
            self.end(slot, out);
        }
    }

    /// Closes the flow whose queued deadline is earliest (an approximation of the
    /// least recently used).
    fn evict_one(&mut self, out: &mut Vec<FlowRecord>) {
        while let Some(Reverse((_, generation, slot))) = self.queue.pop() {
            if self.flow(slot, generation).is_some() {
                self.stats.evicted += 1;
                self.end(slot, out);
                return;
            }
        }
    }

    fn end(&mut self, slot: usize, out: &mut Vec<FlowRecord>) {
        if let Some(flow) = self.slots.get_mut(slot).and_then(Option::take) {
            self.flows.remove(&flow.key);
            self.free.push(slot);
            if self.last.is_some_and(|(_, last)| last == slot) {
                self.last = None;
            }
            let record = self.finish(flow);
            out.push(record);
        }
    }

    /// Ends every open flow (end of input); appends their records to `out` in
    /// order of first packet.
    pub fn flush(&mut self, out: &mut Vec<FlowRecord>) {
        let start = out.len();
        let slots = std::mem::take(&mut self.slots);
        for flow in slots.into_iter().flatten() {
            let record = self.finish(flow);
            out.push(record);
        }
        self.flows.clear();
        self.free.clear();
        self.last = None;
        out[start..].sort_by_key(|r| (r.first_ns, r.src, r.src_port, r.dst, r.dst_port));
        self.queue.clear();
    }
}

impl FlowTable {
    /// Completes a record: its state and application fields, and counts it.
    /// (Its uid is derived when read: see [`FlowRecord::uid`].)
    fn finish(&mut self, mut flow: OpenFlow) -> FlowRecord {
        close_app(&mut self.app_bytes, &mut flow);
        let mut record = flow.record;
        record.state = state(&record, &flow.orig, &flow.resp);
        self.stats.records += 1;
        if record.app.is_some() {
            self.stats.app_records += 1;
        }
        record
    }
}

/// Ends `flow`'s extractor, if it still reads: its fields go on the record,
/// and its buffers leave `app_bytes` (the table's count of them).
fn close_app(app_bytes: &mut usize, flow: &mut OpenFlow) {
    if let Some(conversation) = flow.app.take() {
        *app_bytes = app_bytes.saturating_sub(conversation.buffered());
        flow.record.app = conversation.finish().map(Box::new);
    }
}

/// The connection state in Zeek's vocabulary, from what each side sent.
fn state(record: &FlowRecord, orig: &TcpHistory, resp: &TcpHistory) -> FlowState {
    if record.proto != ip_proto::TCP {
        return match (record.packets_out > 0, record.packets_in > 0) {
            (true, true) => FlowState::SF,
            (true, false) => FlowState::S0,
            (false, _) => FlowState::SHR,
        };
    }
    let established = orig.syn && resp.syn_ack;
    if established {
        return match () {
            () if orig.rst => FlowState::RSTO,
            () if resp.rst => FlowState::RSTR,
            () if orig.fin && resp.fin => FlowState::SF,
            () if orig.fin => FlowState::S2,
            () if resp.fin => FlowState::S3,
            () => FlowState::S1,
        };
    }
    if orig.syn {
        return match () {
            () if resp.rst => FlowState::REJ,
            () if orig.rst => FlowState::RSTOS0,
            () if orig.fin => FlowState::SH,
            () if record.packets_in == 0 => FlowState::S0,
            () => FlowState::OTH,
        };
    }
    if resp.syn_ack {
        return match () {
            () if resp.rst => FlowState::RSTRH,
            () if resp.fin => FlowState::SHR,
            () => FlowState::OTH,
        };
    }
    FlowState::OTH
}

#[cfg(test)]
mod tests;
