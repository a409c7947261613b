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

impl TlsFields {
    /// The code of a cipher suite named as the IANA registry, Wireshark and
    /// Zeek's ssl.log name it (`TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256`), or as
    /// Zeek writes one it has no name for (`unknown-49195`).
    pub fn cipher_from_name(name: &str) -> Option<u16> {
        if let Some(code) = name.strip_prefix("unknown-") {
            return code.parse().ok();
        }
        crate::cipher_suites::CIPHER_SUITES
            .iter()
            .find(|(_, known)| *known == name)
            .map(|(code, _)| *code)
    }

    /// The registry's name of a cipher suite.
    pub fn cipher_name(code: u16) -> Option<&'static str> {
        let suites = crate::cipher_suites::CIPHER_SUITES;
        suites
            .binary_search_by_key(&code, |(c, _)| *c)
            .ok()
            .map(|i| suites[i].1)
    }

    /// The version field of a protocol version as Zeek's ssl.log names it
    /// (`TLSv12` is 0x0303, `SSLv3` 0x0300, `DTLSv12` 0xfefd), or as it writes
    /// one it has no name for (`unknown-772`).
    pub fn version_from_name(name: &str) -> Option<u16> {
        Some(match name {
            "SSLv2" => 0x0002,
            "SSLv3" => 0x0300,
            "TLSv10" => 0x0301,
            "TLSv11" => 0x0302,
            "TLSv12" => 0x0303,
            "TLSv13" => 0x0304,
            "DTLSv10" => 0xfeff,
            "DTLSv12" => 0xfefd,
            "DTLSv13" => 0xfefc,
            other => return other.strip_prefix("unknown-")?.parse().ok(),
        })
    }
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

/// A kind of name the connection index keys connections by (the first byte of
/// a key of its `names` family).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NameKind {
    /// The first DNS query's name.
    DnsQuery = 1,
    /// The TLS server name (SNI).
    TlsSni = 2,
    /// The HTTP request's Host.
    HttpHost = 3,
    /// The HTTP request's User-Agent.
    UserAgent = 4,
    /// JA3 of the ClientHello.
    Ja3 = 5,
    /// JA3S of the ServerHello.
    Ja3s = 6,
    /// JA4 of the ClientHello.
    Ja4 = 7,
}

/// Which names of a kind a lookup in the connection index reads.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NameLookup {
    /// The name, whatever its case.
    Exact(NameKind, String),
    /// The subdomains of a domain (the domain itself is not one), whatever
    /// their case.
    Subdomains(NameKind, String),
    /// Every name of the kind.
    All(NameKind),
}

/// Names longer than this (in bytes) are not keys of the index.
pub const MAX_NAME_KEY: usize = 1024;

impl NameKind {
    /// Every kind, in key order.
    pub const ALL: [NameKind; 7] = [
        NameKind::DnsQuery,
        NameKind::TlsSni,
        NameKind::HttpHost,
        NameKind::UserAgent,
        NameKind::Ja3,
        NameKind::Ja3s,
        NameKind::Ja4,
    ];

    /// The kind of a key's first byte.
    pub fn from_code(code: u8) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| *kind as u8 == code)
    }

    /// True for domain names, whose keys are reversed by label so that a
    /// domain and its subdomains are one range of keys.
    pub fn is_domain(self) -> bool {
        matches!(
            self,
            NameKind::DnsQuery | NameKind::TlsSni | NameKind::HttpHost
        )
    }

    /// The name as a key: ASCII letters lowercased and, for domains, the
    /// labels in reverse order (`www.Example.com` → `com.example.www`); `None`
    /// for a name that is not a key (longer than [`MAX_NAME_KEY`], or holding
    /// a NUL byte, which ends the name in the key).
    pub fn key(self, name: &str) -> Option<Vec<u8>> {
        if name.len() > MAX_NAME_KEY || name.as_bytes().contains(&0) {
            return None;
        }
        let lower = name.to_ascii_lowercase();
        if !self.is_domain() {
            return Some(lower.into_bytes());
        }
        let mut key = Vec::with_capacity(lower.len());
        for (i, label) in lower.rsplit('.').enumerate() {
            if i > 0 {
                key.push(b'.');
            }
            key.extend_from_slice(label.as_bytes());
        }
        Some(key)
    }

    /// The lowercased name of a key ([`key`](Self::key) undone but for the case).
    pub fn name_of_key(self, key: &[u8]) -> String {
        let text = String::from_utf8_lossy(key);
        if !self.is_domain() {
            return text.into_owned();
        }
        text.rsplit('.').collect::<Vec<_>>().join(".")
    }
}

impl AppFields {
    /// The names the connection index keys this connection by, each with its kind.
    pub fn names(&self) -> impl Iterator<Item = (NameKind, &str)> {
        let dns = self
            .dns
            .as_ref()
            .map(|dns| (NameKind::DnsQuery, dns.query.as_str()));
        let tls = self.tls.as_ref();
        let http = self.http.as_ref();
        let optional = [
            (NameKind::TlsSni, tls.and_then(|t| t.sni.as_deref())),
            (NameKind::HttpHost, http.and_then(|h| h.host.as_deref())),
            (
                NameKind::UserAgent,
                http.and_then(|h| h.user_agent.as_deref()),
            ),
            (NameKind::Ja3, tls.and_then(|t| t.ja3.as_deref())),
            (NameKind::Ja3s, tls.and_then(|t| t.ja3s.as_deref())),
            (NameKind::Ja4, tls.and_then(|t| t.ja4.as_deref())),
        ];
        dns.into_iter().chain(
            optional
                .into_iter()
                .filter_map(|(kind, name)| Some((kind, name?))),
        )
    }

    /// The fields as bytes (the connection index's values keep them; see
    /// `docs/formats/index.md`): a version byte, a byte of the protocols
    /// present, then each protocol's fields; strings and optional numbers as
    /// varint lengths (0 = absent, else length + 1 or value + 1).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(ENCODING_VERSION);
        let present = u8::from(self.dns.is_some())
            | u8::from(self.tls.is_some()) << 1
            | u8::from(self.http.is_some()) << 2
            | u8::from(self.quic_version.is_some()) << 3
            | u8::from(self.ssh.is_some()) << 4;
        out.push(present);
        if let Some(dns) = &self.dns {
            put_number(out, Some(u64::from(dns.id)));
            put_text(out, Some(&dns.query));
            put_number(out, Some(u64::from(dns.qtype)));
            put_number(out, dns.rcode.map(u64::from));
            crate::put_varint(out, dns.answers.len() as u64);
            for (answer, ttl) in dns.answers.iter().zip(&dns.ttls) {
                put_text(out, Some(answer));
                put_number(out, Some(u64::from(*ttl)));
            }
        }
        if let Some(tls) = &self.tls {
            put_text(out, tls.sni.as_deref());
            crate::put_varint(out, tls.alpn.len() as u64);
            for alpn in &tls.alpn {
                put_text(out, Some(alpn));
            }
            for number in [tls.client_version, tls.version, tls.cipher] {
                put_number(out, number.map(u64::from));
            }
            for text in [&tls.ja3, &tls.ja3s, &tls.ja4] {
                put_text(out, text.as_deref());
            }
        }
        if let Some(http) = &self.http {
            for text in [&http.method, &http.host, &http.uri, &http.user_agent] {
                put_text(out, text.as_deref());
            }
            put_number(out, http.status.map(u64::from));
            put_text(out, http.content_type.as_deref());
        }
        if let Some(version) = self.quic_version {
            put_number(out, Some(u64::from(version)));
        }
        if let Some(ssh) = &self.ssh {
            put_text(out, ssh.client.as_deref());
            put_text(out, ssh.server.as_deref());
        }
    }

    /// The fields of bytes [`encode`](Self::encode) wrote; `None` if they are
    /// not such bytes (every byte is used, and nothing follows).
    pub fn decode(mut bytes: &[u8]) -> Option<Self> {
        let input = &mut bytes;
        let (&version, rest) = input.split_first()?;
        let (&present, rest) = rest.split_first()?;
        *input = rest;
        if version != ENCODING_VERSION || present >> 5 != 0 {
            return None;
        }
        let mut fields = AppFields::default();
        if present & 1 != 0 {
            let id = number(input)?.map(u16::try_from)?.ok()?;
            let query = text(input)??;
            let qtype = number(input)?.map(u16::try_from)?.ok()?;
            let rcode = number(input)?.map(u8::try_from).transpose().ok()?;
            let count = crate::covering::varint(input)?;
            if count > DnsFields::MAX_ANSWERS as u64 {
                return None;
            }
            let (mut answers, mut ttls) = (Vec::new(), Vec::new());
            for _ in 0..count {
                answers.push(text(input)??);
                ttls.push(number(input)?.map(u32::try_from)?.ok()?);
            }
            fields.dns = Some(DnsFields {
                id,
                query,
                qtype,
                rcode,
                answers,
                ttls,
            });
        }
        if present & 2 != 0 {
            let sni = text(input)?;
            let count = crate::covering::varint(input)?;
            if count > input.len() as u64 {
                return None;
            }
            let alpn = (0..count)
                .map(|_| text(input)?)
                .collect::<Option<Vec<_>>>()?;
            let mut short = || number(input)?.map(u16::try_from).transpose().ok();
            let (client_version, version, cipher) = (short()?, short()?, short()?);
            fields.tls = Some(TlsFields {
                sni,
                alpn,
                client_version,
                version,
                cipher,
                ja3: text(input)?,
                ja3s: text(input)?,
                ja4: text(input)?,
            });
        }
        if present & 4 != 0 {
            let (method, host, uri, user_agent) =
                (text(input)?, text(input)?, text(input)?, text(input)?);
            let status = number(input)?.map(u16::try_from).transpose().ok()?;
            fields.http = Some(HttpFields {
                method,
                host,
                uri,
                user_agent,
                status,
                content_type: text(input)?,
            });
        }
        if present & 8 != 0 {
            fields.quic_version = Some(number(input)?.map(u32::try_from)?.ok()?);
        }
        if present & 16 != 0 {
            fields.ssh = Some(SshFields {
                client: text(input)?,
                server: text(input)?,
            });
        }
        input.is_empty().then_some(fields)
    }
}

/// The first byte of [`AppFields::encode`]'s bytes.
const ENCODING_VERSION: u8 = 1;

fn put_number(out: &mut Vec<u8>, value: Option<u64>) {
    crate::put_varint(out, value.map_or(0, |value| value.saturating_add(1)));
}

fn put_text(out: &mut Vec<u8>, value: Option<&str>) {
    match value {
        None => crate::put_varint(out, 0),
        Some(text) => {
            crate::put_varint(out, text.len() as u64 + 1);
            out.extend_from_slice(text.as_bytes());
        }
    }
}

/// An optional number: `Some(None)` absent, `None` malformed.
fn number(input: &mut &[u8]) -> Option<Option<u64>> {
    Some(crate::covering::varint(input)?.checked_sub(1))
}

/// An optional string: `Some(None)` absent, `None` malformed.
fn text(input: &mut &[u8]) -> Option<Option<String>> {
    let Some(len) = crate::covering::varint(input)?.checked_sub(1) else {
        return Some(None);
    };
    let len = usize::try_from(len).ok()?;
    let (head, rest) = input.split_at_checked(len)?;
    *input = rest;
    Some(Some(String::from_utf8(head.to_vec()).ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ciphers_and_versions_are_read_by_name() {
        let suite = "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256";
        assert_eq!(TlsFields::cipher_from_name(suite), Some(0xc02f));
        assert_eq!(TlsFields::cipher_name(0xc02f), Some(suite));
        assert_eq!(
            TlsFields::cipher_from_name("TLS_AES_128_GCM_SHA256"),
            Some(0x1301)
        );
        // The registry's code, not the draft's.
        let chacha = "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256";
        assert_eq!(TlsFields::cipher_from_name(chacha), Some(0xcca8));
        assert_eq!(TlsFields::cipher_from_name("unknown-49195"), Some(49195));
        assert_eq!(TlsFields::cipher_from_name("TLS_NO_SUCH"), None);
        assert!(
            crate::cipher_suites::CIPHER_SUITES
                .windows(2)
                .all(|w| w[0].0 < w[1].0)
        );
        assert_eq!(TlsFields::version_from_name("TLSv12"), Some(0x0303));
        assert_eq!(TlsFields::version_from_name("unknown-772"), Some(772));
        assert_eq!(TlsFields::version_from_name("TLSv99"), None);
    }

    fn sample() -> AppFields {
        AppFields {
            dns: Some(DnsFields {
                id: 7,
                query: "www.Example.com".to_owned(),
                qtype: 1,
                rcode: Some(0),
                answers: vec!["93.184.216.34".to_owned()],
                ttls: vec![3600],
            }),
            tls: Some(TlsFields {
                sni: Some("example.com".to_owned()),
                alpn: vec!["h2".to_owned(), "http/1.1".to_owned()],
                client_version: Some(0x0303),
                version: Some(0x0304),
                cipher: None,
                ja3: Some("a0e9f5d64349fb13191bc781f81f42e1".to_owned()),
                ja3s: None,
                ja4: Some("t13d1516h2_8daaf6152771_e5627efa2ab1".to_owned()),
            }),
            http: Some(HttpFields {
                method: Some("GET".to_owned()),
                status: Some(200),
                ..HttpFields::default()
            }),
            quic_version: Some(1),
            ssh: Some(SshFields {
                client: None,
                server: Some("SSH-2.0-x".to_owned()),
            }),
        }
    }

    #[test]
    fn fields_encode_and_decode_back() {
        for fields in [sample(), AppFields::default()] {
            let mut bytes = Vec::new();
            fields.encode(&mut bytes);
            assert_eq!(AppFields::decode(&bytes), Some(fields));
            // Cut anywhere, or followed by anything, the bytes are refused.
            for cut in 0..bytes.len() {
                assert_eq!(AppFields::decode(&bytes[..cut]), None, "cut at {cut}");
            }
            bytes.push(0);
            assert_eq!(AppFields::decode(&bytes), None);
        }
    }

    #[test]
    fn domain_keys_are_reversed_by_label_and_lowercased() {
        let key = NameKind::TlsSni.key("www.Example.COM").unwrap_or_default();
        assert_eq!(key, b"com.example.www");
        assert_eq!(NameKind::TlsSni.name_of_key(&key), "www.example.com");
        assert_eq!(
            NameKind::HttpHost
                .key("example.com:8080")
                .unwrap_or_default(),
            b"com:8080.example"
        );
        assert_eq!(NameKind::Ja4.key("T13d_X").unwrap_or_default(), b"t13d_x");
        assert_eq!(NameKind::DnsQuery.key("a\0b"), None);
        let fields = sample();
        let names: Vec<_> = fields.names().collect();
        assert_eq!(names.len(), 4);
        assert_eq!(names[0], (NameKind::DnsQuery, "www.Example.com"));
    }
}
