//! One connection's extractor: the first bytes of each direction, in order, and
//! the fields parsed from them.

use hindsight_model::ip_proto;

use crate::{AppFields, DnsFields, HttpFields, SshFields, TlsFields, dns, http, quic, ssh, tls};

/// How much of a connection the extractor reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// TCP: the bytes of each direction kept until their protocol's message is
    /// whole (a ClientHello with post-quantum key shares is some 1,900 bytes; an
    /// HTTP request head with cookies a few KiB). Default 8 KiB.
    pub stream_bytes: usize,
    /// UDP: the datagrams read, at most (a QUIC ClientHello with post-quantum
    /// key shares takes two Initials, and the server's Initial follows).
    /// Default 8.
    pub datagrams: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            stream_bytes: 8 << 10,
            datagrams: 8,
        }
    }
}

/// Ports of protocols that may turn to TLS after a plaintext start (STARTTLS
/// and its kin): FTP, SMTP, POP3, NNTP, IMAP, LDAP, submission, MySQL, XMPP,
/// PostgreSQL.
fn is_starttls_port(port: u16) -> bool {
    matches!(
        port,
        21 | 25 | 110 | 119 | 143 | 389 | 587 | 3306 | 5222 | 5269 | 5432
    )
}

/// Plaintext packets of each direction looked through for a TLS handshake on
/// a STARTTLS port.
const STARTTLS_PACKETS: u16 = 64;

/// DNS, mDNS and LLMNR ports.
fn is_dns_port(port: u16) -> bool {
    matches!(port, 53 | 5353 | 5355)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
enum Proto {
    /// Not recognised yet: too few bytes.
    #[default]
    Unknown,
    Tls,
    Http,
    Ssh,
    Dns,
    /// Plaintext on a STARTTLS port: each packet is looked at for the start of
    /// a TLS handshake.
    Starttls,
}

/// One direction of a TCP connection.
#[derive(Debug, Default)]
struct Side {
    /// The direction's first bytes, in sequence order.
    buf: Vec<u8>,
    /// The sequence number after the last byte taken.
    next_seq: Option<u32>,
    /// Segments that came ahead of a gap, with their sequence numbers, until
    /// the gap is filled.
    pending: Vec<(u32, Vec<u8>)>,
    proto: Proto,
    done: bool,
    /// Plaintext packets looked at (STARTTLS).
    plain_packets: u16,
}

/// What [`Side::take`] did with a segment.
enum Took {
    /// New bytes were appended to the buffer from this offset on.
    Appended(usize),
    /// Nothing new in order: a retransmission, or a segment held ahead of a gap.
    Nothing,
    /// A gap that cannot be waited for within the limit.
    Overflow,
}

/// Sequence number distances below this are ahead, the rest behind (RFC 1982).
const HALF: u32 = 1 << 31;

impl Side {
    fn end(&mut self) {
        self.done = true;
        self.buf = Vec::new();
        self.pending = Vec::new();
    }

    fn append(&mut self, bytes: &[u8], limit: usize) {
        let room = limit.saturating_sub(self.buf.len());
        self.buf
            .extend_from_slice(bytes.get(..room.min(bytes.len())).unwrap_or_default());
    }

    /// Appends the bytes of the segment at `seq` after `next_seq` (those before
    /// it were taken already), and moves `next_seq` past them.
    fn extend(&mut self, seq: u32, bytes: &[u8], limit: usize) {
        let Some(next) = self.next_seq else {
            return;
        };
        let seen = next.wrapping_sub(seq) as usize;
        if let Some(rest) = bytes.get(seen..).filter(|rest| !rest.is_empty()) {
            self.append(rest, limit);
            let len = u32::try_from(rest.len()).unwrap_or(u32::MAX);
            self.next_seq = Some(next.wrapping_add(len));
        }
    }

    /// Takes the segment at `seq`: its bytes not seen before, in order, then
    /// those of held segments it connects to.
    fn take(&mut self, seq: u32, payload: &[u8], limit: usize) -> Took {
        let len = u32::try_from(payload.len()).unwrap_or(u32::MAX);
        let Some(next) = self.next_seq else {
            self.next_seq = Some(seq.wrapping_add(len));
            self.append(payload, limit);
            return Took::Appended(0);
        };
        let ahead = seq.wrapping_sub(next);
        if ahead != 0 && ahead < HALF {
            // Ahead of a gap: held until the gap fills, as far as the buffer
            // would reach; what lies beyond is never read.
            let room = limit.saturating_sub(self.buf.len());
            let Some(keep) = room.checked_sub(ahead as usize).filter(|&k| k > 0) else {
                return Took::Nothing;
            };
            if self.pending.iter().any(|(at, _)| *at == seq) {
                return Took::Nothing;
            }
            let bytes = payload.get(..keep.min(payload.len())).unwrap_or_default();
            let held: usize = self.pending.iter().map(|(_, p)| p.len()).sum();
            if held.saturating_add(bytes.len()) > limit {
                return Took::Overflow;
            }
            self.pending.push((seq, bytes.to_vec()));
            return Took::Nothing;
        }
        let start = self.buf.len();
        self.next_seq = Some(next);
        self.extend(seq, payload, limit);
        // Held segments that start at or before the new end connect.
        while let Some(end) = self.next_seq
            && let Some(i) = self
                .pending
                .iter()
                .position(|(at, _)| end.wrapping_sub(*at) < HALF)
        {
            let (at, bytes) = self.pending.swap_remove(i);
            self.extend(at, &bytes, limit);
        }
        let appended = self.next_seq != Some(next);
        if appended {
            Took::Appended(start)
        } else {
            Took::Nothing
        }
    }
}

/// The extractor of one connection (see the crate documentation).
#[derive(Debug)]
pub struct Conversation {
    limits: Limits,
    tcp: bool,
    dns_port: bool,
    starttls_port: bool,
    datagrams: u32,
    /// QUIC Initials, once the first datagram was one.
    quic: Option<Box<quic::Initials>>,
    orig: Side,
    resp: Side,
    fields: AppFields,
}

impl Conversation {
    /// The extractor of a connection of protocol `proto` between the ports
    /// given; `None` where nothing would be recognised (not TCP, not UDP to or
    /// from a DNS port).
    pub fn new(proto: u8, orig_port: u16, resp_port: u16, limits: Limits) -> Option<Self> {
        let dns_port = is_dns_port(orig_port) || is_dns_port(resp_port);
        let tcp = match proto {
            ip_proto::TCP => true,
            ip_proto::UDP => false,
            _ => return None,
        };
        Some(Self {
            limits,
            tcp,
            dns_port,
            starttls_port: is_starttls_port(orig_port) || is_starttls_port(resp_port),
            datagrams: 0,
            quic: None,
            orig: Side::default(),
            resp: Side::default(),
            fields: AppFields::default(),
        })
    }

    /// Takes a TCP SYN's sequence number: the direction's stream starts after
    /// it, so segments that come before the first one are waited for.
    pub fn syn(&mut self, from_originator: bool, seq: u32) {
        let tcp = self.tcp;
        let side = self.side(from_originator);
        if tcp && side.next_seq.is_none() {
            side.next_seq = Some(seq.wrapping_add(1));
        }
    }

    /// Takes one packet's payload: sent by the originator or not, with its TCP
    /// sequence number (`None` for UDP); `cut` when the capture holds only its
    /// start (a snap length), which ends the direction with what it has.
    pub fn push(&mut self, from_originator: bool, seq: Option<u32>, payload: &[u8], cut: bool) {
        if payload.is_empty() || self.is_done() {
            return;
        }
        if !self.tcp {
            self.datagrams = self.datagrams.saturating_add(1);
            if self.dns_port {
                if let Some(message) = dns::parse(payload) {
                    self.take_dns(message);
                }
            } else if let Some(initials) = &mut self.quic {
                initials.datagram(from_originator, payload);
            } else if self.datagrams == 1 && from_originator && quic::looks_like_initial(payload) {
                let mut initials = Box::<quic::Initials>::default();
                initials.datagram(true, payload);
                self.quic = Some(initials);
            }
            self.take_quic();
            return;
        }
        let (limit, dns_port, starttls_port) =
            (self.limits.stream_bytes, self.dns_port, self.starttls_port);
        let side = self.side(from_originator);
        if side.done {
            return;
        }
        // Most directions start with bytes no parser reads: decided on the
        // first payload, before anything is copied.
        if side.proto == Proto::Unknown
            && side.buf.is_empty()
            && side.pending.is_empty()
            && payload.len() >= 8
            && recognise(payload, dns_port).is_none()
            && !starttls_port
            && side.next_seq.is_none_or(|next| next == seq.unwrap_or(0))
        {
            side.end();
            return;
        }
        let start = match side.take(seq.unwrap_or(0), payload, limit) {
            Took::Appended(start) => start,
            Took::Nothing => return,
            Took::Overflow => {
                self.finish_side(from_originator);
                return;
            }
        };
        if side.proto == Proto::Starttls {
            let new = side.buf.get(start..).unwrap_or_default();
            if new.first() == Some(&22) && tls::looks_like_tls(new) {
                side.buf.drain(..start);
                side.proto = Proto::Tls;
            } else {
                side.buf.clear();
                side.plain_packets = side.plain_packets.saturating_add(1);
                if side.plain_packets >= STARTTLS_PACKETS {
                    side.end();
                }
                return;
            }
        }
        let full = cut || side.buf.len() >= limit;
        if side.proto == Proto::Unknown {
            side.proto = match recognise(&side.buf, dns_port) {
                Some(proto) => proto,
                None if starttls_port => {
                    side.buf.clear();
                    side.plain_packets = 1;
                    Proto::Starttls
                }
                None => {
                    side.end();
                    return;
                }
            };
            if side.proto == Proto::Starttls {
                return;
            }
        }
        self.parse_side(from_originator, full);
    }

    /// Parses a direction's buffer; ends it when its message is read, or when
    /// `last` (no more bytes will come) with what is there.
    fn parse_side(&mut self, from_originator: bool, last: bool) {
        let side = self.side(from_originator);
        let buf = std::mem::take(&mut side.buf);
        let proto = side.proto;
        let done = match proto {
            Proto::Unknown | Proto::Starttls => last,
            Proto::Tls => read_tls(&mut self.fields, &buf, last),
            Proto::Http => read_http(&mut self.fields, &buf, last),
            Proto::Ssh => match ssh::banner(&buf) {
                Some(banner) => {
                    let ssh = self.fields.ssh.get_or_insert_with(SshFields::default);
                    if from_originator {
                        ssh.client = Some(banner);
                    } else {
                        ssh.server = Some(banner);
                    }
                    true
                }
                None => last,
            },
            Proto::Dns => {
                let len = buf
                    .first_chunk::<2>()
                    .map(|len| usize::from(u16::from_be_bytes(*len)));
                match len.and_then(|len| buf.get(2..len.saturating_add(2))) {
                    Some(message) => {
                        if let Some(message) = dns::parse(message) {
                            self.take_dns(message);
                        }
                        true
                    }
                    None => last,
                }
            }
        };
        let side = self.side(from_originator);
        if done {
            side.end();
        } else {
            side.buf = buf;
        }
    }

    /// The direction sent by the originator, or the other one.
    fn side(&mut self, from_originator: bool) -> &mut Side {
        if from_originator {
            &mut self.orig
        } else {
            &mut self.resp
        }
    }

    fn finish_side(&mut self, from_originator: bool) {
        if !self.side(from_originator).done {
            self.parse_side(from_originator, true);
        }
    }

    /// The fields of the QUIC Initials' hellos, once each is whole.
    fn take_quic(&mut self) {
        let Some(initials) = &self.quic else {
            return;
        };
        if self.fields.quic_version.is_none() {
            self.fields.quic_version = initials.version();
        }
        let tls = self.fields.tls.as_ref();
        if tls.and_then(|t| t.ja4.as_ref()).is_none()
            && let Some(message @ (tls::CLIENT_HELLO, _)) = initials.client_message()
        {
            take_hello(&mut self.fields, message, b'q');
        }
        let tls = self.fields.tls.as_ref();
        if tls.and_then(|t| t.cipher).is_none()
            && let Some(message @ (tls::SERVER_HELLO, _)) = initials.server_message()
        {
            take_hello(&mut self.fields, message, b'q');
        }
    }

    fn take_dns(&mut self, message: dns::Message) {
        let dns = match &mut self.fields.dns {
            Some(dns) => {
                if !message.response || dns.rcode.is_some() || dns.id != message.id {
                    return;
                }
                dns
            }
            None => {
                let (query, qtype) = message.question.clone().unwrap_or_default();
                self.fields.dns.insert(DnsFields {
                    id: message.id,
                    query,
                    qtype,
                    ..DnsFields::default()
                })
            }
        };
        if message.response {
            dns.rcode = Some(message.rcode);
            let (answers, ttls) = message.answers.into_iter().unzip();
            dns.answers = answers;
            dns.ttls = ttls;
        }
    }

    /// True when nothing more will be read.
    pub fn is_done(&self) -> bool {
        if self.tcp {
            self.orig.done && self.resp.done
        } else if self.datagrams >= self.limits.datagrams {
            true
        } else if self.dns_port {
            self.fields.dns.as_ref().is_some_and(|d| d.rcode.is_some())
        } else {
            // Not QUIC after the first datagram, or both hellos read.
            (self.datagrams > 0 && self.quic.is_none())
                || self
                    .fields
                    .tls
                    .as_ref()
                    .is_some_and(|t| t.ja4.is_some() && t.cipher.is_some())
        }
    }

    /// The bytes held in buffers.
    pub fn buffered(&self) -> usize {
        [&self.orig, &self.resp]
            .iter()
            .flat_map(|side| {
                std::iter::once(side.buf.capacity())
                    .chain(side.pending.iter().map(|(_, p)| p.capacity()))
            })
            .fold(0, usize::saturating_add)
    }

    /// The fields read (parsing what the buffers hold as cut short); `None`
    /// when no protocol was recognised.
    pub fn finish(mut self) -> Option<AppFields> {
        if self.tcp {
            self.finish_side(true);
            self.finish_side(false);
        }
        (!self.fields.is_empty()).then_some(self.fields)
    }
}

/// The protocol a direction's first bytes start, `None` when they start none
/// hindsight reads; `Some(Unknown)` while too few bytes are there to tell.
fn recognise(buf: &[u8], dns_port: bool) -> Option<Proto> {
    // Either side may send an HTTP request or response: a capture that starts
    // mid-connection takes the server for the originator.
    let candidates = [
        (tls::looks_like_tls(buf), Proto::Tls),
        (
            http::looks_like_request(buf) || http::looks_like_response(buf),
            Proto::Http,
        ),
        (ssh::looks_like_ssh(buf), Proto::Ssh),
    ];
    let mut matching = candidates.iter().filter(|(yes, _)| *yes).map(|(_, p)| *p);
    match (matching.next(), matching.next()) {
        (None, _) if dns_port => Some(Proto::Dns),
        (None, _) => None,
        (Some(one), None) if buf.len() >= 8 => Some(one),
        _ => Some(Proto::Unknown),
    }
}

/// Reads the first handshake message of a direction: a ClientHello or a
/// ServerHello, whichever side sent it.
fn read_tls(fields: &mut AppFields, buf: &[u8], last: bool) -> bool {
    let mut scratch = Vec::new();
    match tls::handshake(buf, &mut scratch) {
        tls::Found::Message(kind, body) => {
            take_hello(fields, (kind, body), b't');
            true
        }
        tls::Found::NeedMore => last,
        tls::Found::NotTls => true,
    }
}

/// Fills the TLS fields of a handshake message (type, body) sent over
/// `transport` (JA4's letter): a ClientHello's or a ServerHello's; other
/// messages have none.
fn take_hello(fields: &mut AppFields, (kind, body): (u8, &[u8]), transport: u8) {
    match kind {
        tls::CLIENT_HELLO => {
            if let Some(hello) = tls::ClientHello::parse(body) {
                client_hello(fields, &hello, transport);
            }
        }
        tls::SERVER_HELLO => {
            if let Some(hello) = tls::ServerHello::parse(body) {
                let tls = fields.tls.get_or_insert_with(TlsFields::default);
                tls.version = Some(hello.chosen_version());
                tls.cipher = Some(hello.cipher);
                tls.ja3s = Some(hello.ja3s());
            }
        }
        _ => {}
    }
}

/// Fills the TLS fields of a ClientHello sent over `transport` (JA4's letter).
fn client_hello(fields: &mut AppFields, hello: &tls::ClientHello, transport: u8) {
    let tls = fields.tls.get_or_insert_with(TlsFields::default);
    tls.sni = hello.sni.clone();
    tls.alpn = hello.alpn.iter().map(|p| crate::text(p)).collect();
    tls.client_version = Some(hello.version);
    tls.ja3 = Some(hello.ja3());
    tls.ja4 = Some(hello.ja4(transport));
}

/// Reads the first message head of a direction: a request or a response,
/// whichever side sent it.
fn read_http(fields: &mut AppFields, buf: &[u8], last: bool) -> bool {
    if http::looks_like_request(buf) {
        let Some(request) = http::request(buf, !last) else {
            return last;
        };
        let http = fields.http.get_or_insert_with(HttpFields::default);
        http.method = Some(request.method);
        http.uri = Some(request.uri);
        http.host = request.host;
        http.user_agent = request.user_agent;
    } else {
        let Some(response) = http::response(buf, !last) else {
            return last;
        };
        let http = fields.http.get_or_insert_with(HttpFields::default);
        http.status = Some(response.status);
        http.content_type = response.content_type;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_http_exchange_in_pieces_gives_both_heads() {
        let mut c = Conversation::new(ip_proto::TCP, 40000, 80, Limits::default()).unwrap();
        let request = b"GET /x HTTP/1.1\r\nHost: h.example\r\n\r\n";
        c.push(true, Some(1000), &request[..10], false);
        c.push(true, Some(1000), &request[..10], false); // a retransmission
        c.push(true, Some(1010), &request[10..], false);
        c.push(
            false,
            Some(5),
            b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nhi",
            false,
        );
        assert!(c.is_done());
        assert_eq!(c.buffered(), 0);
        let http = c.finish().unwrap().http.unwrap();
        assert_eq!(http.method.as_deref(), Some("GET"));
        assert_eq!(http.uri.as_deref(), Some("/x"));
        assert_eq!(http.host.as_deref(), Some("h.example"));
        assert_eq!(http.status, Some(200));
        assert_eq!(http.content_type.as_deref(), Some("text/plain"));
    }

    #[test]
    fn unknown_streams_end_at_once_and_gaps_end_a_direction() {
        let mut c = Conversation::new(ip_proto::TCP, 40000, 9999, Limits::default()).unwrap();
        c.push(true, Some(1), b"\x00\x01binary", false);
        c.push(false, Some(1), b"SSH-2.0-srv\r\n", false);
        assert!(c.is_done());
        let ssh = c.finish().unwrap().ssh.unwrap();
        assert_eq!(ssh.server.as_deref(), Some("SSH-2.0-srv"));

        let mut c = Conversation::new(ip_proto::TCP, 40000, 80, Limits::default()).unwrap();
        c.push(true, Some(1), b"GET / HTTP/1.1\r\nHost: a\r\n", false);
        c.push(true, Some(500), b"User-Agent: b\r\n\r\n", false);
        let http = c.finish().unwrap().http.unwrap();
        assert_eq!(http.host.as_deref(), Some("a"));
        assert_eq!(http.user_agent, None);
    }

    #[test]
    fn tls_after_a_plaintext_start_is_read_on_starttls_ports() {
        let mut hello = vec![22, 3, 1, 0, 0x2d, 1, 0, 0, 0x29, 3, 3];
        hello.extend_from_slice(&[0; 32]);
        hello.extend_from_slice(&[0, 0, 2, 0x13, 0x01, 1, 0]);
        let (_, body) = hello.split_at(9);
        assert!(tls::ClientHello::parse(body).is_some());
        let mut c = Conversation::new(ip_proto::TCP, 40000, 25, Limits::default()).unwrap();
        c.push(true, Some(1), b"EHLO x\r\n", false);
        c.push(true, Some(9), b"STARTTLS\r\n", false);
        c.push(true, Some(19), &hello, false);
        let tls = c.finish().unwrap().tls.unwrap();
        assert_eq!(tls.ja3.as_deref().map(str::len), Some(32));
        assert_eq!(tls.client_version, Some(0x0303));
    }

    #[test]
    fn segments_ahead_of_a_gap_wait_for_it() {
        let mut c = Conversation::new(ip_proto::TCP, 443, 40000, Limits::default()).unwrap();
        let response = b"HTTP/1.1 301 Moved\r\nContent-Type: a/b\r\n\r\n";
        c.push(false, Some(100), &response[..5], false);
        c.push(false, Some(120), &response[20..], false);
        c.push(false, Some(110), &response[10..25], false);
        assert!(!c.resp.done);
        c.push(false, Some(105), &response[5..12], false);
        assert!(c.resp.done);
        let http = c.finish().unwrap().http.unwrap();
        assert_eq!(http.status, Some(301));
        assert_eq!(http.content_type.as_deref(), Some("a/b"));
    }

    #[test]
    fn after_a_syn_the_streams_start_is_waited_for() {
        let mut c = Conversation::new(ip_proto::TCP, 40000, 80, Limits::default()).unwrap();
        c.syn(false, 999);
        c.push(false, Some(1015), b"Content-Type: x/y\r\n\r\n", false);
        c.push(false, Some(1000), b"HTTP/1.1 2", false);
        c.push(false, Some(1000), b"HTTP/1.1 204 \r\n", false);
        let http = c.finish().unwrap().http.unwrap();
        assert_eq!(http.status, Some(204));
        assert_eq!(http.content_type.as_deref(), Some("x/y"));
    }

    #[test]
    fn buffers_stop_at_the_limit() {
        let limits = Limits {
            stream_bytes: 64,
            datagrams: 4,
        };
        let mut c = Conversation::new(ip_proto::TCP, 1, 2, limits).unwrap();
        let mut seq = 0u32;
        for _ in 0..10 {
            c.push(true, Some(seq), &[22, 3, 1, 0xff, 0xff, 1, 0, 0xff], false);
            seq += 8;
            assert!(c.orig.buf.len() <= 64);
        }
        assert!(c.orig.done);
        assert_eq!(c.finish(), None);
        assert!(Conversation::new(ip_proto::ICMP, 0, 0, limits).is_none());
    }
}
