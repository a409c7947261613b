//! Connection lookups: the connections of address ranges from the connection
//! index alone (Diventi's lookup), optionally narrowed by a filter, one page at a
//! time with a cursor.

use std::sync::Arc;
use std::time::Duration;

use hindsight_filter::Filter;
use hindsight_index::Stored;
use hindsight_index::connections::DEFAULT_COMMUNITY_SEED;
use hindsight_index::{ConnEntry, ConnScan, ConnectionIndex};
use hindsight_model::app::NameLookup;
use hindsight_model::{
    Addr16, FlowRecord, PacketHeaders, PacketRecord, SegmentId, ip_proto, network_range,
};
use hindsight_store::{Archive, FooterCache, TimeRange};

use crate::ReaderError;

/// A connection lookup.
#[derive(Debug, Clone)]
pub struct ConnQuery {
    /// The address ranges whose connections to list (inclusive).
    pub ranges: Vec<(Addr16, Addr16)>,
    /// Keeps the connections that match (on addresses, ports, protocol, flags).
    pub filter: Option<Filter>,
    /// The window on the connections' start times.
    pub time: TimeRange,
    /// Connections at most in one page.
    pub limit: usize,
    /// The key the previous page ended with ([`Connections::next`]).
    pub after: Option<Vec<u8>>,
    /// A scan of the `flows` segments ([`Self::scans`]) stops with
    /// [`LimitExceeded::Time`](crate::LimitExceeded) past this.
    pub timeout: Option<Duration>,
}

impl ConnQuery {
    /// The ranges of a lookup given as an address or network (`--ip`, `ip=`), or
    /// else as a filter that names the addresses every connection must have.
    pub fn ranges_of(
        ip: Option<&str>,
        filter: Option<&Filter>,
    ) -> Result<Vec<(Addr16, Addr16)>, ReaderError> {
        if filter.is_some_and(Filter::reads_bytes) {
            return Err(ReaderError::Request(
                "the filter reads the packets' bytes (byte offsets, payload), which connection \
                 records do not have: ask `query` for the packets"
                    .to_owned(),
            ));
        }
        let names = filter.and_then(Filter::name_lookups);
        let exact_names = names
            .as_ref()
            .is_some_and(|names| !names.iter().any(|n| matches!(n, NameLookup::All(_))));
        match (ip, filter) {
            (Some(ip), _) => Ok(vec![network_range(ip).map_err(ReaderError::Request)?]),
            // Found by the Community ID keys at lookup.
            (None, Some(filter)) if filter.community_ids().is_some() => Ok(Vec::new()),
            // Found by the name keys at lookup: an exact name or a domain's
            // range before addresses, addresses before every name of a kind.
            (None, Some(_)) if exact_names => Ok(Vec::new()),
            (None, Some(filter)) => Ok(filter.address_ranges().unwrap_or_default()),
            // Every connection in the window, scanned.
            (None, None) => Ok(Vec::new()),
        }
    }

    /// Whether the lookup scans the `flows` segments: no address range and
    /// no name or Community ID the index is keyed by (`udp port 53`, a
    /// state, a JA3S, no filter at all).
    pub fn scans(&self) -> bool {
        self.ranges.is_empty()
            && self.filter.as_ref().is_none_or(|filter| {
                filter.address_ranges().is_none()
                    && filter.community_ids().is_none()
                    && filter.name_lookups().is_none()
            })
    }
}

/// A page of connections.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Connections {
    /// The connections, in the index's order.
    pub entries: Vec<ConnEntry>,
    /// Where the next page starts, if there is one.
    pub next: Option<Vec<u8>>,
    /// The seed of the connections' Community IDs (the index's).
    pub community_seed: u16,
    /// For a lookup by name, each entry's place in the lookup's order (the
    /// cursor that resumes after it); empty for a lookup by address, whose
    /// entries are in their keys' order.
    pub places: Vec<Vec<u8>>,
    /// What a scan left out, a line each (a damaged `flows` segment).
    pub skipped: Vec<String>,
}

/// The connections of `query` from the index and from the records of the
/// unsealed tail that the index has not committed, in the index's order: the
/// tail's entries are placed by the keys the index will give them, so a cursor
/// pages across both.
///
/// A query that [scans](ConnQuery::scans) reads the `flows` segments of
/// `segments` (the archive and the reader's footers) instead of the index.
pub(crate) fn lookup(
    index: Option<&ConnectionIndex>,
    tail: &[(SegmentId, Arc<[FlowRecord]>)],
    segments: Option<(&Archive, &FooterCache)>,
    query: &ConnQuery,
) -> Result<Connections, ReaderError> {
    let community_seed = index.map_or(DEFAULT_COMMUNITY_SEED, ConnectionIndex::community_seed);
    let filter = query
        .filter
        .clone()
        .map(|filter| filter.with_community_seed(community_seed));
    let keep = |entry: &ConnEntry| {
        filter
            .as_ref()
            .is_none_or(|f| f.matches_connection(&as_packet(entry), entry.app.as_deref()))
    };
    if query.scans() {
        let Some((archive, footers)) = segments else {
            return Err(ReaderError::Request(
                "this lookup reads the connection index alone; a filter that names no address \
                 or name scans the flows segments, which needs the archive's catalog"
                    .to_owned(),
            ));
        };
        let source = crate::scan::Source {
            archive,
            footers,
            tail,
            community_seed,
        };
        return crate::scan::scan(&source, query, &keep);
    }
    if query.ranges.is_empty()
        && let Some(filter) = &filter
        && filter.community_ids().is_none()
        && let Some(names) = filter.name_lookups()
    {
        return lookup_names(index, tail, query, &names, filter, &keep, community_seed);
    }
    // A filter of Community IDs with no addresses: each ID's originator's
    // address, from the index's Community ID keys.
    let mut found;
    let query = match (&query.filter, index) {
        (Some(filter), Some(index)) if query.ranges.is_empty() => {
            found = query.clone();
            for id in filter.community_ids().unwrap_or_default() {
                let entries = index
                    .community(&id, i64::MIN, i64::MAX, 1)
                    .map_err(|source| ReaderError::Index {
                        which: "connection index",
                        root: index.path().to_owned(),
                        source,
                    })?;
                found
                    .ranges
                    .extend(entries.iter().map(|entry| (entry.addr, entry.addr)));
            }
            found.ranges.sort_unstable();
            found.ranges.dedup();
            &found
        }
        _ => query,
    };
    let page = match index {
        Some(index) => lookup_index(index, query, &keep)?,
        None => Connections::default(),
    };
    let page = Connections {
        community_seed,
        ..page
    };
    let after = query.after.as_deref();
    let unsealed: Vec<ConnEntry> = tail
        .iter()
        .flat_map(|(_, records)| records.iter())
        .flat_map(ConnEntry::of_record)
        .filter(|e| {
            query
                .ranges
                .iter()
                .any(|&(low, high)| low <= e.addr && e.addr <= high)
                && e.ts_ns >= query.time.start_nanos
                && e.ts_ns <= query.time.end_nanos
                && after.is_none_or(|after| e.key().as_slice() > after)
                && keep(e)
        })
        .collect();
    if unsealed.is_empty() {
        return Ok(page);
    }
    let community_seed = page.community_seed;
    let mut entries = page.entries;
    entries.extend(unsealed);
    entries.sort_by_key(ConnEntry::key);
    entries.dedup_by_key(|e| e.key());
    // Past the index page's end, the tail's entries wait for the next page.
    if let Some(next) = &page.next {
        entries.retain(|e| e.key().as_slice() <= next.as_slice());
    }
    let more = page.next.is_some() || entries.len() > query.limit;
    entries.truncate(query.limit);
    let next = if more {
        entries.last().map(|e| e.key().to_vec())
    } else {
        None
    };
    Ok(Connections {
        entries,
        next,
        community_seed,
        ..Connections::default()
    })
}

/// The connections of a lookup by name: from the index's name keys, in their
/// order, then (on the last page) the unsealed tail's connections that pass.
fn lookup_names(
    index: Option<&ConnectionIndex>,
    tail: &[(SegmentId, Arc<[FlowRecord]>)],
    query: &ConnQuery,
    names: &[NameLookup],
    filter: &Filter,
    keep: &dyn Fn(&ConnEntry) -> bool,
    community_seed: u16,
) -> Result<Connections, ReaderError> {
    let page = match index {
        Some(index) => index
            .names(
                names,
                query.time.start_nanos,
                query.time.end_nanos,
                query.after.as_deref(),
                query.limit,
                keep,
                &|kind, name| filter.may_pass_name(kind, name),
            )
            .map_err(|source| ReaderError::Index {
                which: "connection index",
                root: index.path().to_owned(),
                source,
            })?,
        None => Default::default(),
    };
    let mut connections = Connections {
        entries: page.entries,
        next: page.next,
        community_seed,
        places: page.places,
        ..Connections::default()
    };
    if connections.next.is_some() {
        return Ok(connections);
    }
    // The tail's connections come after the index's: their places are
    // their keys after a byte no name key starts with.
    let after = query.after.as_deref();
    let mut unsealed: Vec<(Vec<u8>, ConnEntry)> = tail
        .iter()
        .flat_map(|(_, records)| records.iter())
        .filter(|record| {
            record.first_ns >= query.time.start_nanos && record.first_ns <= query.time.end_nanos
        })
        .flat_map(ConnEntry::of_record)
        .filter(|e| !e.reverse && keep(e))
        .map(|e| ([&[u8::MAX][..], &e.key()].concat(), e))
        .filter(|(place, _)| after.is_none_or(|after| place.as_slice() > after))
        .collect();
    unsealed.sort_by(|a, b| a.0.cmp(&b.0));
    unsealed.dedup_by(|a, b| a.0 == b.0);
    for (place, entry) in unsealed {
        if connections.entries.len() == query.limit {
            connections.next = connections.places.last().cloned();
            break;
        }
        connections.places.push(place);
        connections.entries.push(entry);
    }
    Ok(connections)
}

fn lookup_index(
    index: &ConnectionIndex,
    query: &ConnQuery,
    keep: &dyn Fn(&ConnEntry) -> bool,
) -> Result<Connections, ReaderError> {
    let mut page = Connections::default();
    let mut after = query.after.clone();
    for &(low, high) in &query.ranges {
        // A cursor belongs to the range that holds its address.
        if let Some(cursor) = &after
            && cursor.get(..16).is_some_and(|a| a > &high.0[..])
        {
            continue;
        }
        let scan = ConnScan {
            low,
            high,
            start_ns: query.time.start_nanos,
            end_ns: query.time.end_nanos,
        };
        let left = query.limit - page.entries.len();
        let found = index
            .scan_where(&scan, after.take().as_deref(), left, keep)
            .map_err(|source| ReaderError::Index {
                which: "connection index",
                root: index.path().to_owned(),
                source,
            })?;
        page.entries.extend(found.entries);
        if let Some(cursor) = found.next {
            page.next = Some(cursor);
            break;
        }
    }
    Ok(page)
}

/// The fields of a connection a filter can test, as a packet of it would have
/// them: originator → responder, protocol, the union of TCP flags; ICMP type and
/// code from NetFlow's destination port.
fn as_packet(entry: &ConnEntry) -> PacketRecord {
    let (src, src_port, dst, dst_port) = entry.oriented();
    let proto = entry.proto;
    let has_ports = matches!(proto, ip_proto::TCP | ip_proto::UDP | ip_proto::SCTP);
    let icmp = matches!(proto, ip_proto::ICMP | ip_proto::ICMPV6);
    PacketRecord {
        ts_nanos: entry.ts_ns,
        headers: PacketHeaders {
            ip_version: Some(if src.is_v4() && dst.is_v4() { 4 } else { 6 }),
            src_addr: Some(src),
            dst_addr: Some(dst),
            ip_proto: Some(proto),
            src_port: has_ports.then_some(src_port),
            dst_port: has_ports.then_some(dst_port),
            tcp_flags: (proto == ip_proto::TCP).then_some(entry.summary.tcp_flags),
            icmp_type: icmp.then_some((dst_port >> 8) as u8),
            icmp_code: icmp.then_some(dst_port as u8),
            ..PacketHeaders::default()
        },
        ..PacketRecord::default()
    }
}

/// The longest cursor accepted, in hex digits: a name key's.
pub const MAX_CURSOR_HEX: usize = 2 * (2 + hindsight_model::app::MAX_NAME_KEY + 45);

/// A page's cursor as text (hex), as the command line and the API print it.
pub fn encode_cursor(key: &[u8]) -> String {
    key.iter().map(|b| format!("{b:02x}")).collect()
}

/// The key of a cursor printed by [`encode_cursor`].
pub fn decode_cursor(text: &str) -> Result<Vec<u8>, ReaderError> {
    let bad = || {
        ReaderError::Request(format!(
            "cursor {text:?} is not one that a page of connections ended with"
        ))
    };
    if !text.len().is_multiple_of(2) || text.len() > MAX_CURSOR_HEX {
        return Err(bad());
    }
    (0..text.len())
        .step_by(2)
        .map(|i| {
            text.get(i..i + 2)
                .and_then(|pair| u8::from_str_radix(pair, 16).ok())
                .ok_or_else(bad)
        })
        .collect()
}
