//! NetFlow v5, NetFlow v9 (RFC 3954) and IPFIX (RFC 7011) export packets into
//! [`FlowRecord`]s, as a collector receives them.
//!
//! - Templates (v9, IPFIX) are kept per exporter (address and port), observation
//!   domain (v9 source id) and template id, as the RFCs scope them; a data set
//!   whose template has not arrived yet is counted and skipped, as nfcapd does.
//! - Sampling is applied: v5's header sampling interval, and the sampling interval
//!   an exporter announces in options records (v9 `SAMPLING_INTERVAL` 34 and
//!   `FLOW_SAMPLER_RANDOM_INTERVAL` 50, IPFIX `samplingInterval` 34,
//!   `samplingPacketInterval`/`samplingPacketSpace` 305/306) or in the data record
//!   itself multiplies the packet and byte counts.
//! - Sequence numbers are checked per exporter and domain (v5 counts flows, v9
//!   export packets, IPFIX data records); a jump forward is counted as loss.
//! - Records are unidirectional: the "in" counters stay zero. Times are absolute
//!   (v5 and v9 switched times are relative to the exporter's uptime in the
//!   header).
//!
//! The decoder never panics on any input (fuzz target `flow_sources`): a damaged
//! packet is an error naming the exporter and the byte offset, and the records
//! decoded before the damage are kept.

use std::fmt;
use std::net::SocketAddr;

use foldhash::HashMap;
use hindsight_model::{Addr16, FlowRecord, FlowSource, FlowState};

/// A malformed export packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetflowError {
    /// The exporter that sent it.
    pub exporter: SocketAddr,
    /// Byte offset of the damage within the UDP payload.
    pub offset: usize,
    /// What is wrong.
    pub reason: String,
}

impl fmt::Display for NetflowError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "export packet from {} at byte {}: {}",
            self.exporter, self.offset, self.reason
        )
    }
}

impl std::error::Error for NetflowError {}

/// What the decoder saw, for the collector's report.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NetflowStats {
    /// Export packets decoded without error, by version: v5, v9, IPFIX.
    pub packets: [u64; 3],
    /// Flow records produced.
    pub records: u64,
    /// Export packets with an error (the records before the error are kept).
    pub malformed: u64,
    /// Data sets skipped because their template was not known yet.
    pub unknown_template_sets: u64,
    /// Records (v5, IPFIX) or export packets (v9) missing by the sequence numbers.
    pub lost: u64,
    /// Templates received (v9 and IPFIX, options templates included).
    pub templates: u64,
}

/// One field of a template.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Field {
    /// Information element id (v9 field type); 0 for enterprise-specific ones,
    /// which are skipped.
    id: u16,
    /// Length in bytes; `VARIABLE` for an IPFIX variable-length field.
    len: u16,
}

const VARIABLE: u16 = 65535;

#[derive(Clone, Debug, PartialEq, Eq)]
struct Template {
    fields: Vec<Field>,
    /// An options template: its records configure (sampling), they are not flows.
    options: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Scope {
    exporter: SocketAddr,
    version: u16,
    domain: u32,
}

/// Decodes export packets, keeping templates, sampling rates and sequence state.
#[derive(Debug, Default)]
pub struct NetflowDecoder {
    templates: HashMap<(Scope, u16), Template>,
    sampling: HashMap<Scope, u64>,
    /// systemInitTimeMilliseconds an exporter announced in an options record.
    boot_ms: HashMap<Scope, i64>,
    next_sequence: HashMap<Scope, u32>,
    stats: NetflowStats,
}

/// Bound on templates kept, against an exporter that floods template ids.
const MAX_TEMPLATES: usize = 65_536;

// Information elements (IPFIX ids; v9 uses the same numbers for these).
const OCTETS: u16 = 1;
const PACKETS: u16 = 2;
const PROTOCOL: u16 = 4;
const TCP_FLAGS: u16 = 6;
const SRC_PORT: u16 = 7;
const SRC_V4: u16 = 8;
const DST_PORT: u16 = 11;
const DST_V4: u16 = 12;
const LAST_SWITCHED: u16 = 21;
const FIRST_SWITCHED: u16 = 22;
const SRC_V6: u16 = 27;
const DST_V6: u16 = 28;
const ICMP_TYPE_CODE_V4: u16 = 32;
const SAMPLING_INTERVAL: u16 = 34;
const SAMPLER_RANDOM_INTERVAL: u16 = 50;
const OCTET_TOTAL: u16 = 85;
const PACKET_TOTAL: u16 = 86;
const ICMP_TYPE_CODE_V6: u16 = 139;
const START_SECONDS: u16 = 150;
const END_SECONDS: u16 = 151;
const START_MILLIS: u16 = 152;
const END_MILLIS: u16 = 153;
const START_MICROS: u16 = 154;
const END_MICROS: u16 = 155;
const START_NANOS: u16 = 156;
const END_NANOS: u16 = 157;
const START_DELTA_MICROS: u16 = 158;
const END_DELTA_MICROS: u16 = 159;
const SYSTEM_INIT_MILLIS: u16 = 160;
const SAMPLING_PACKET_INTERVAL: u16 = 305;
const SAMPLING_PACKET_SPACE: u16 = 306;

const MILLIS: i64 = 1_000_000;
const SECONDS: i64 = 1_000_000_000;
/// Seconds between the NTP epoch (1900) and the Unix epoch.
const NTP_UNIX_OFFSET: i64 = 2_208_988_800;

/// Where a packet is damaged (byte offset) and how.
type Damage = (usize, String);

/// A cursor over the payload that reports offsets.
struct Bytes<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Bytes<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], Damage> {
        match self.data.get(self.at..self.at.saturating_add(n)) {
            Some(bytes) if self.at.checked_add(n).is_some() => {
                self.at += n;
                Ok(bytes)
            }
            _ => Err((
                self.at,
                format!(
                    "{what}: needs {n} bytes, {} left",
                    self.data.len().saturating_sub(self.at)
                ),
            )),
        }
    }

    fn u8(&mut self, what: &str) -> Result<u8, Damage> {
        Ok(self.take(1, what)?[0])
    }

    fn u16(&mut self, what: &str) -> Result<u16, Damage> {
        let b = self.take(2, what)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    fn u32(&mut self, what: &str) -> Result<u32, Damage> {
        let b = self.take(4, what)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
}

/// A big-endian unsigned integer of 1 to 8 bytes (IPFIX reduced-size encoding).
fn unsigned(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .rev()
        .take(8)
        .rev()
        .fold(0u64, |value, &b| (value << 8) | u64::from(b))
}

impl NetflowDecoder {
    /// Returns an empty decoder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Returns what was decoded so far.
    pub fn stats(&self) -> &NetflowStats {
        &self.stats
    }

    /// Decodes one export packet (a UDP payload) from `exporter`, appending its
    /// flow records to `out`. On error, the records before the damage stay in `out`.
    pub fn decode(
        &mut self,
        exporter: SocketAddr,
        payload: &[u8],
        out: &mut Vec<FlowRecord>,
    ) -> Result<(), NetflowError> {
        let before = out.len();
        let mut bytes = Bytes {
            data: payload,
            at: 0,
        };
        let result = match bytes.u16("version") {
            Ok(5) => self.v5(exporter, &mut bytes, out),
            Ok(9) => self.v9(exporter, &mut bytes, out),
            Ok(10) => self.ipfix(exporter, &mut bytes, out),
            Ok(other) => Err((
                0,
                format!("version {other} is not NetFlow v5, v9 or IPFIX (10)"),
            )),
            Err(error) => Err(error),
        };
        self.stats.records += (out.len() - before) as u64;
        match result {
            Ok(version_slot) => {
                self.stats.packets[version_slot] += 1;
                Ok(())
            }
            Err((offset, reason)) => {
                self.stats.malformed += 1;
                Err(NetflowError {
                    exporter,
                    offset,
                    reason,
                })
            }
        }
    }

    /// Checks a sequence number against the expected one and records the next.
    fn sequence(&mut self, scope: Scope, sequence: u32, advance: u32) {
        if let Some(&expected) = self.next_sequence.get(&scope) {
            let gap = sequence.wrapping_sub(expected);
            // A jump forward of less than half the space is loss; anything else
            // is a reordered packet or a restarted exporter.
            if gap != 0 && gap < 1 << 31 {
                self.stats.lost += u64::from(gap);
            }
        }
        self.next_sequence
            .insert(scope, sequence.wrapping_add(advance));
    }

    fn v5(
        &mut self,
        exporter: SocketAddr,
        bytes: &mut Bytes<'_>,
        out: &mut Vec<FlowRecord>,
    ) -> Result<usize, Damage> {
        let count = bytes.u16("v5 record count")?;
        let uptime_ms = bytes.u32("v5 sysUptime")?;
        let secs = bytes.u32("v5 unix_secs")?;
        let nsecs = bytes.u32("v5 unix_nsecs")?;
        let sequence = bytes.u32("v5 flow_sequence")?;
        let engine_type = bytes.u8("v5 engine_type")?;
        let engine_id = bytes.u8("v5 engine_id")?;
        let sampling = bytes.u16("v5 sampling_interval")?;
        if count == 0 || count > 30 {
            return Err((2, format!("v5 record count {count} is not 1 to 30")));
        }
        let needed = usize::from(count) * 48;
        if bytes.data.len() < 24 + needed {
            return Err((
                24,
                format!(
                    "v5 packet announces {count} records ({needed} bytes), {} bytes follow the header",
                    bytes.data.len().saturating_sub(24)
                ),
            ));
        }
        let scope = Scope {
            exporter,
            version: 5,
            domain: u32::from(engine_type) << 8 | u32::from(engine_id),
        };
        self.sequence(scope, sequence, u32::from(count));
        let interval = u64::from(sampling & 0x3fff);
        let rate = if sampling >> 14 != 0 && interval > 1 {
            interval
        } else {
            1
        };
        let clock = Clock {
            export_ns: i64::from(secs) * SECONDS + i64::from(nsecs),
            uptime_ms: Some(uptime_ms),
        };
        for _ in 0..count {
            let r = bytes.take(48, "v5 record")?;
            let word = |at: usize| u32::from_be_bytes([r[at], r[at + 1], r[at + 2], r[at + 3]]);
            let half = |at: usize| u16::from_be_bytes([r[at], r[at + 1]]);
            let record = FlowRecord {
                first_ns: clock.switched(word(24)).unwrap_or(clock.export_ns),
                last_ns: clock.switched(word(28)).unwrap_or(clock.export_ns),
                src: Addr16::from_v4_bytes([r[0], r[1], r[2], r[3]]),
                dst: Addr16::from_v4_bytes([r[4], r[5], r[6], r[7]]),
                src_port: half(32),
                dst_port: half(34),
                proto: r[38],
                packets_out: u64::from(word(16)).saturating_mul(rate),
                bytes_out: u64::from(word(20)).saturating_mul(rate),
                tcp_flags: u16::from(r[37]),
                state: FlowState::Unknown,
                source: FlowSource::NetflowV5,
                exporter: Addr16::from(exporter.ip()),
                ..FlowRecord::default()
            };
            out.push(record);
        }
        Ok(0)
    }

    fn v9(
        &mut self,
        exporter: SocketAddr,
        bytes: &mut Bytes<'_>,
        out: &mut Vec<FlowRecord>,
    ) -> Result<usize, Damage> {
        let _count = bytes.u16("v9 record count")?;
        let uptime_ms = bytes.u32("v9 sysUptime")?;
        let secs = bytes.u32("v9 unix_secs")?;
        let sequence = bytes.u32("v9 sequence")?;
        let source_id = bytes.u32("v9 source id")?;
        let scope = Scope {
            exporter,
            version: 9,
            domain: source_id,
        };
        self.sequence(scope, sequence, 1);
        let clock = Clock {
            export_ns: i64::from(secs) * SECONDS,
            uptime_ms: Some(uptime_ms),
        };
        self.sets(scope, bytes, clock, FlowSource::NetflowV9, out, &mut 0)?;
        Ok(1)
    }

    fn ipfix(
        &mut self,
        exporter: SocketAddr,
        bytes: &mut Bytes<'_>,
        out: &mut Vec<FlowRecord>,
    ) -> Result<usize, Damage> {
        let length = usize::from(bytes.u16("IPFIX message length")?);
        let export_secs = bytes.u32("IPFIX export time")?;
        let sequence = bytes.u32("IPFIX sequence")?;
        let domain = bytes.u32("IPFIX observation domain")?;
        if length < 16 || length > bytes.data.len() {
            return Err((
                2,
                format!(
                    "IPFIX message length {length}, datagram has {} bytes",
                    bytes.data.len()
                ),
            ));
        }
        let mut message = Bytes {
            data: &bytes.data[..length],
            at: 16,
        };
        let scope = Scope {
            exporter,
            version: 10,
            domain,
        };
        let clock = Clock {
            export_ns: i64::from(export_secs) * SECONDS,
            uptime_ms: None,
        };
        // IPFIX counts data records, options records and records that are not
        // flows included (those of sets before their template cannot be counted).
        let mut records = 0u32;
        let result = self.sets(
            scope,
            &mut message,
            clock,
            FlowSource::Ipfix,
            out,
            &mut records,
        );
        self.sequence(scope, sequence, records);
        result.map(|()| 2)
    }

    /// Reads the flowsets (v9) or sets (IPFIX) up to the end of `bytes`.
    fn sets(
        &mut self,
        scope: Scope,
        bytes: &mut Bytes<'_>,
        clock: Clock,
        source: FlowSource,
        out: &mut Vec<FlowRecord>,
        data_records: &mut u32,
    ) -> Result<(), Damage> {
        let ipfix = source == FlowSource::Ipfix;
        let (template_set, options_set) = if ipfix { (2, 3) } else { (0, 1) };
        while bytes.data.len() - bytes.at >= 4 {
            let start = bytes.at;
            let id = bytes.u16("set id")?;
            let length = usize::from(bytes.u16("set length")?);
            if length < 4 {
                return Err((start + 2, format!("set length {length} is below 4")));
            }
            bytes.take(length - 4, "set body")?;
            let mut set = Bytes {
                data: &bytes.data[..start + length],
                at: start + 4,
            };
            if id == template_set {
                self.templates(scope, &mut set, false, ipfix)?;
            } else if id == options_set {
                self.templates(scope, &mut set, true, ipfix)?;
            } else if id >= 256 {
                let Some(template) = self.templates.get(&(scope, id)).cloned() else {
                    self.stats.unknown_template_sets += 1;
                    continue;
                };
                let min_len: usize = template
                    .fields
                    .iter()
                    .map(|f| {
                        if f.len == VARIABLE {
                            1
                        } else {
                            usize::from(f.len)
                        }
                    })
                    .sum();
                // Records follow each other; what is left shorter than a record
                // is padding.
                while min_len > 0 && set.data.len() - set.at >= min_len {
                    let values = read_record(&template, &mut set)?;
                    *data_records = data_records.wrapping_add(1);
                    if template.options {
                        if let Some(rate) = sampling_rate(&values) {
                            self.sampling.insert(scope, rate);
                        }
                        if let Some(&(_, init)) = values
                            .iter()
                            .find(|(id, value)| *id == SYSTEM_INIT_MILLIS && value.len() == 8)
                        {
                            self.boot_ms.insert(scope, unsigned(init) as i64);
                        }
                    } else if let Some(record) = self.flow(scope, &values, clock, source) {
                        out.push(record);
                    }
                }
            }
            // Set ids 4-255 are reserved: skipped.
        }
        Ok(())
    }

    /// Reads the templates of a template or options template set.
    fn templates(
        &mut self,
        scope: Scope,
        set: &mut Bytes<'_>,
        options: bool,
        ipfix: bool,
    ) -> Result<(), Damage> {
        while set.data.len() - set.at >= 4 {
            let at = set.at;
            let id = set.u16("template id")?;
            let (field_count, scope_fields) = if !options {
                (usize::from(set.u16("template field count")?), 0)
            } else if ipfix {
                let fields = usize::from(set.u16("options template field count")?);
                let scopes = usize::from(set.u16("options template scope field count")?);
                (fields, scopes)
            } else {
                // v9: lengths in bytes of the scope and option field lists.
                let scope_len = usize::from(set.u16("options scope length")?);
                let option_len = usize::from(set.u16("options length")?);
                if scope_len % 4 != 0 || option_len % 4 != 0 {
                    return Err((at + 4, "v9 options lengths are not multiples of 4".into()));
                }
                ((scope_len + option_len) / 4, 0)
            };
            if ipfix && field_count == 0 {
                // Template withdrawal.
                self.templates.remove(&(scope, id));
                continue;
            }
            if id < 256 {
                return Err((at, format!("template id {id} is below 256")));
            }
            if scope_fields > field_count {
                return Err((at + 6, "more scope fields than fields".into()));
            }
            let mut fields = Vec::with_capacity(field_count.min(512));
            for _ in 0..field_count {
                let raw = set.u16("field type")?;
                let len = set.u16("field length")?;
                let enterprise = ipfix && raw & 0x8000 != 0;
                if enterprise {
                    set.take(4, "enterprise number")?;
                }
                if len == VARIABLE && !ipfix {
                    return Err((set.at - 2, "v9 has no variable-length fields".into()));
                }
                fields.push(Field {
                    id: if enterprise { 0 } else { raw },
                    len,
                });
            }
            if fields.iter().all(|f| f.len == 0) {
                return Err((at, format!("template {id} has no bytes")));
            }
            self.stats.templates += 1;
            if self.templates.len() < MAX_TEMPLATES || self.templates.contains_key(&(scope, id)) {
                self.templates
                    .insert((scope, id), Template { fields, options });
            }
            // v9 options template sets may end with padding.
            if options && !ipfix && set.data.len() - set.at < 4 {
                break;
            }
        }
        Ok(())
    }

    /// Turns one data record into a flow record; `None` if it has no addresses.
    fn flow(
        &self,
        scope: Scope,
        values: &[(u16, &[u8])],
        clock: Clock,
        source: FlowSource,
    ) -> Option<FlowRecord> {
        let mut record = FlowRecord {
            source,
            exporter: Addr16::from(scope.exporter.ip()),
            state: FlowState::Unknown,
            ..FlowRecord::default()
        };
        let (mut has_src, mut has_dst) = (false, false);
        let (mut first, mut last) = (None, None);
        let (mut first_up, mut last_up, mut init_ms) = (None, None, None);
        let mut icmp = None;
        let mut rate = None;
        for &(id, value) in values {
            let n = unsigned(value);
            match (id, value.len()) {
                (SRC_V4, 4) => {
                    record.src = Addr16::from_v4_bytes([value[0], value[1], value[2], value[3]]);
                    has_src = true;
                }
                (DST_V4, 4) => {
                    record.dst = Addr16::from_v4_bytes([value[0], value[1], value[2], value[3]]);
                    has_dst = true;
                }
                (SRC_V6, 16) => {
                    record.src = Addr16(value.try_into().ok()?);
                    has_src = true;
                }
                (DST_V6, 16) => {
                    record.dst = Addr16(value.try_into().ok()?);
                    has_dst = true;
                }
                (SRC_PORT, 1..=2) => record.src_port = n as u16,
                (DST_PORT, 1..=2) => record.dst_port = n as u16,
                (PROTOCOL, 1) => record.proto = n as u8,
                (TCP_FLAGS, 1..=2) => record.tcp_flags = n as u16 & 0x0fff,
                (OCTETS | OCTET_TOTAL, 1..=8) => record.bytes_out = n,
                (PACKETS | PACKET_TOTAL, 1..=8) => record.packets_out = n,
                (ICMP_TYPE_CODE_V4 | ICMP_TYPE_CODE_V6, 2) => icmp = Some(n as u16),
                (FIRST_SWITCHED, 4) => first_up = Some(n as u32),
                (LAST_SWITCHED, 4) => last_up = Some(n as u32),
                (SYSTEM_INIT_MILLIS, 8) => init_ms = Some(n as i64),
                (START_SECONDS, 4) => first = Some(n as i64 * SECONDS),
                (END_SECONDS, 4) => last = Some(n as i64 * SECONDS),
                (START_MILLIS, 8) => first = Some((n as i64).saturating_mul(MILLIS)),
                (END_MILLIS, 8) => last = Some((n as i64).saturating_mul(MILLIS)),
                (START_MICROS | START_NANOS, 8) => first = Some(ntp_ns(n)),
                (END_MICROS | END_NANOS, 8) => last = Some(ntp_ns(n)),
                (START_DELTA_MICROS, 4) => first = Some(clock.export_ns - n as i64 * 1000),
                (END_DELTA_MICROS, 4) => last = Some(clock.export_ns - n as i64 * 1000),
                _ => {}
            }
            if matches!(id, SAMPLING_INTERVAL | SAMPLER_RANDOM_INTERVAL) && n > 1 {
                rate = Some(n);
            }
        }
        if !(has_src && has_dst) {
            return None;
        }
        if let Some(code) = icmp.filter(|_| record.src_port == 0 && record.dst_port == 0) {
            record.dst_port = code;
        }
        // Switched times are ms of the exporter's uptime: v9 relative to the
        // uptime in its header, IPFIX to systemInitTimeMilliseconds.
        let init_ms = init_ms.or(self.boot_ms.get(&scope).copied());
        let switched = |ms: u32| {
            clock
                .switched(ms)
                .or(init_ms.map(|init| (init + i64::from(ms)).saturating_mul(MILLIS)))
        };
        first = first.or(first_up.and_then(switched));
        last = last.or(last_up.and_then(switched));
        record.first_ns = first.or(last).unwrap_or(clock.export_ns);
        // As the exporter says, even when it says the flow ended before it began
        // (softflowd does, by a few ms): nfdump keeps such records as they are.
        record.last_ns = last.unwrap_or(record.first_ns);
        let rate = rate.or(self.sampling.get(&scope).copied()).unwrap_or(1);
        record.packets_out = record.packets_out.saturating_mul(rate);
        record.bytes_out = record.bytes_out.saturating_mul(rate);
        Some(record)
    }
}

/// Converts an NTP timestamp (32-bit seconds since 1900, 32-bit fraction) to ns
/// since the Unix epoch.
fn ntp_ns(ntp: u64) -> i64 {
    let secs = (ntp >> 32) as i64 - NTP_UNIX_OFFSET;
    let frac = ((ntp & 0xffff_ffff) * 1_000_000_000) >> 32;
    secs * SECONDS + frac as i64
}

/// The time references of one export packet.
#[derive(Clone, Copy, Debug)]
struct Clock {
    /// Export time from the header.
    export_ns: i64,
    /// The exporter's uptime in ms at export (v5, v9 headers).
    uptime_ms: Option<u32>,
}

impl Clock {
    /// The time of a "switched" uptime value: the uptime counter wraps every
    /// 2^32 ms (49.7 days), so a value above the header's uptime is from before
    /// the wrap, as nfdump reads it.
    fn switched(&self, ms: u32) -> Option<i64> {
        let ago = self.uptime_ms?.wrapping_sub(ms);
        Some(self.export_ns - i64::from(ago) * MILLIS)
    }
}

/// Reads one data record of `template`: (field id, value bytes) per field.
fn read_record<'a>(
    template: &Template,
    set: &mut Bytes<'a>,
) -> Result<Vec<(u16, &'a [u8])>, Damage> {
    let mut values = Vec::with_capacity(template.fields.len());
    for field in &template.fields {
        let len = if field.len == VARIABLE {
            match set.u8("variable-length field length")? {
                255 => usize::from(set.u16("variable-length field long length")?),
                short => usize::from(short),
            }
        } else {
            usize::from(field.len)
        };
        values.push((field.id, set.take(len, "data record field")?));
    }
    Ok(values)
}

/// The sampling rate an options record announces, if any.
fn sampling_rate(values: &[(u16, &[u8])]) -> Option<u64> {
    let get = |id: u16| {
        values
            .iter()
            .find(|(field, value)| *field == id && !value.is_empty() && value.len() <= 8)
            .map(|(_, value)| unsigned(value))
    };
    if let Some(interval) = get(SAMPLING_PACKET_INTERVAL).filter(|&n| n > 0) {
        let space = get(SAMPLING_PACKET_SPACE).unwrap_or(0);
        return Some((interval + space) / interval).filter(|&rate| rate > 1);
    }
    get(SAMPLING_INTERVAL)
        .or_else(|| get(SAMPLER_RANDOM_INTERVAL))
        .filter(|&rate| rate > 1)
}

#[cfg(test)]
mod tests;
