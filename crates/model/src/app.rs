//! The application fields of a connection: what its first packets say about
//! the names and software on either side (DNS, TLS, HTTP/1.x, QUIC, SSH).
//!
//! The `app` crate extracts them from packets; Zeek's dns.log, ssl.log and
//! http.log give the same fields. Each protocol keeps the first transaction of
//! the connection (the first DNS query and its answer, the first HTTP request and
//! its response), as Arkime's session records do for the fields it does not
//! list in full. Strings are as sent, bounded in length by the extractor.

/// The application fields of one connection; `None` where the protocol was not
/// seen.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct AppFields {
    /// The first DNS query and its response.
    pub dns: Option<DnsFields>,
    /// The TLS handshake (also the one inside a QUIC Initial).
    pub tls: Option<TlsFields>,
    /// The first HTTP/1.x request and its response.
    pub http: Option<HttpFields>,
    /// The QUIC version of the first Initial packet.
    pub quic_version: Option<u32>,
    /// The SSH identification strings.
    pub ssh: Option<SshFields>,
}

impl AppFields {
    /// True when no protocol was seen.
    pub fn is_empty(&self) -> bool {
        self.dns.is_none()
            && self.tls.is_none()
            && self.http.is_none()
            && self.quic_version.is_none()
            && self.ssh.is_none()
    }

    /// The service, in Zeek's `conn.log` names: `dns`, `ssl` (TLS), `http`,
    /// `quic`, `ssh`; `None` when no protocol was seen.
    pub fn service(&self) -> Option<&'static str> {
        if self.quic_version.is_some() {
            Some("quic")
        } else if self.tls.is_some() {
            Some("ssl")
        } else if self.http.is_some() {
            Some("http")
        } else if self.dns.is_some() {
            Some("dns")
        } else if self.ssh.is_some() {
            Some("ssh")
        } else {
            None
        }
    }
}

/// A DNS query and its response (Wireshark's `dns.*` fields, Zeek's dns.log).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct DnsFields {
    /// The transaction id.
    pub id: u16,
    /// The first question's name, as sent (without the trailing dot; `<Root>`
    /// is the empty name).
    pub query: String,
    /// The first question's type (1 A, 28 AAAA, ...).
    pub qtype: u16,
    /// The response code of the response with the query's id; `None` without one.
    pub rcode: Option<u8>,
    /// The response's answers of type A, AAAA (the address), CNAME, PTR, NS
    /// (the name), in order, at most [`DnsFields::MAX_ANSWERS`].
    pub answers: Vec<String>,
    /// The TTL of each answer in `answers`.
    pub ttls: Vec<u32>,
}

impl DnsFields {
    /// At most this many answers are kept.
    pub const MAX_ANSWERS: usize = 16;
}

/// A TLS handshake's hello messages (Wireshark's `tls.handshake.*`, Zeek's
/// ssl.log, the JA3/JA3S/JA4 fingerprints).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct TlsFields {
    /// The server name (SNI) the client asked for.
    pub sni: Option<String>,
    /// The ALPN protocols the client offered, in order.
    pub alpn: Vec<String>,
    /// The ClientHello's version field (0x0303 for TLS 1.2 and 1.3).
    pub client_version: Option<u16>,
    /// The version the server chose: its supported_versions extension, else
    /// the ServerHello's version field.
    pub version: Option<u16>,
    /// The cipher suite the server chose.
    pub cipher: Option<u16>,
    /// JA3 of the ClientHello: the MD5 of its string, in hex (Wireshark's
    /// `tls.handshake.ja3`).
    pub ja3: Option<String>,
    /// JA3S of the ServerHello, in hex.
    pub ja3s: Option<String>,
    /// JA4 of the ClientHello (`t13d1516h2_8daaf6152771_e5627efa2ab1`; `q` first
    /// for QUIC).
    pub ja4: Option<String>,
}

/// An HTTP/1.x request and its response (Wireshark's `http.*`, Zeek's http.log).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct HttpFields {
    /// The request method.
    pub method: Option<String>,
    /// The request's `Host` header.
    pub host: Option<String>,
    /// The request URI, as sent.
    pub uri: Option<String>,
    /// The request's `User-Agent` header.
    pub user_agent: Option<String>,
    /// The response status code.
    pub status: Option<u16>,
    /// The response's `Content-Type` header.
    pub content_type: Option<String>,
}

/// The SSH identification strings (RFC 4253 4.2) of both sides, without the
/// line ending (Wireshark's `ssh.protocol`).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct SshFields {
    /// The originator's: `SSH-2.0-OpenSSH_9.2p1 Debian-2`.
    pub client: Option<String>,
    /// The responder's.
    pub server: Option<String>,
}
