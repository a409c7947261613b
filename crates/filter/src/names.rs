//! Tests of a connection's application fields (`dns.qry.name`,
//! `tls.handshake.extensions_server_name`, `http.host`, `ja4`...), with
//! Wireshark's names and operators: `==`, `!=`, `contains`, `matches`, or the
//! field alone (it is there).
//!
//! A packet has none of these fields: they are the connection's, read from its
//! first packets ([`hindsight_model::AppFields`]). A connection lookup tests
//! them on each connection; a packet query first finds the connections in the
//! connection index's name keys, then reads their packets. Which name keys a
//! filter can be answered from is [`Filter::name_lookups`].

use std::fmt;

use hindsight_model::AppFields;
use hindsight_model::app::{NameKind, NameLookup};

use super::Filter;
use super::ast::{CmpOp, Expr};
use super::payload::Pattern;

/// A text field of a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TextField {
    /// `dns.qry.name`: the first query's name.
    DnsQryName,
    /// `tls.handshake.extensions_server_name`: the SNI (also a QUIC Initial's).
    TlsSni,
    /// `tls.handshake.extensions_alpn_str`: any protocol the client offered.
    TlsAlpn,
    /// `tls.handshake.ja3`: JA3 of the ClientHello.
    Ja3,
    /// `tls.handshake.ja3s`: JA3S of the ServerHello.
    Ja3s,
    /// `ja4`: JA4 of the ClientHello.
    Ja4,
    /// `http.host`.
    HttpHost,
    /// `http.request.uri`.
    HttpUri,
    /// `http.request.method`.
    HttpMethod,
    /// `http.user_agent`.
    HttpUserAgent,
    /// `http.content_type`: the response's.
    HttpContentType,
    /// `ssh.protocol`: either side's identification string.
    SshProtocol,
    /// `service`: Zeek's service name of the connection (`dns`, `ssl`,
    /// `http`, `quic`, `ssh`).
    Service,
    /// `http.response.code`: the first response's status (a number).
    HttpResponseCode,
    /// `dns.qry.type`: the first query's type (a number).
    DnsQryType,
    /// `dns.flags.rcode`: the first response's code (a number).
    DnsRcode,
    /// `quic.version`: the QUIC version of the Initial (a number).
    QuicVersion,
}

/// Every text field with its canonical name, then other names it answers to.
pub const TEXT_FIELDS: &[(&str, TextField)] = &[
    ("dns.qry.name", TextField::DnsQryName),
    ("tls.handshake.extensions_server_name", TextField::TlsSni),
    ("tls.handshake.extensions_alpn_str", TextField::TlsAlpn),
    ("tls.handshake.ja3", TextField::Ja3),
    ("tls.handshake.ja3s", TextField::Ja3s),
    ("ja4", TextField::Ja4),
    ("http.host", TextField::HttpHost),
    ("http.request.uri", TextField::HttpUri),
    ("http.request.method", TextField::HttpMethod),
    ("http.user_agent", TextField::HttpUserAgent),
    ("http.content_type", TextField::HttpContentType),
    ("ssh.protocol", TextField::SshProtocol),
    ("service", TextField::Service),
    ("http.response.code", TextField::HttpResponseCode),
    ("dns.qry.type", TextField::DnsQryType),
    ("dns.flags.rcode", TextField::DnsRcode),
    ("quic.version", TextField::QuicVersion),
];

/// Other names of text fields (Zeek's and the fingerprints' short names,
/// newer Wireshark's).
pub const TEXT_FIELD_ALIASES: &[(&str, TextField)] = &[
    ("ja3", TextField::Ja3),
    ("ja3s", TextField::Ja3s),
    ("tls.handshake.ja4", TextField::Ja4),
    ("tls.server_name", TextField::TlsSni),
];

impl TextField {
    /// The field named `name`, if it is a text field.
    pub fn from_name(name: &str) -> Option<Self> {
        TEXT_FIELDS
            .iter()
            .chain(TEXT_FIELD_ALIASES)
            .find(|(known, _)| *known == name)
            .map(|(_, field)| *field)
    }

    /// The canonical name.
    pub fn name(self) -> &'static str {
        TEXT_FIELDS
            .iter()
            .find(|(_, field)| *field == self)
            .map_or("?", |(name, _)| name)
    }

    /// The kind of name key the connection index keeps this field under, if
    /// it keeps it.
    pub fn kind(self) -> Option<NameKind> {
        Some(match self {
            TextField::DnsQryName => NameKind::DnsQuery,
            TextField::TlsSni => NameKind::TlsSni,
            TextField::HttpHost => NameKind::HttpHost,
            TextField::HttpUserAgent => NameKind::UserAgent,
            TextField::Ja3 => NameKind::Ja3,
            TextField::Ja3s => NameKind::Ja3s,
            TextField::Ja4 => NameKind::Ja4,
            _ => return None,
        })
    }

    /// True for a field whose value is a number, compared with `==`, `!=`,
    /// `<`, `<=`, `>` and `>=`.
    pub fn is_number(self) -> bool {
        matches!(
            self,
            TextField::HttpResponseCode
                | TextField::DnsQryType
                | TextField::DnsRcode
                | TextField::QuicVersion
        )
    }

    /// The value of a number field in `app`, if it has one.
    fn number(self, app: &AppFields) -> Option<u64> {
        match self {
            TextField::HttpResponseCode => app.http.as_ref()?.status.map(u64::from),
            TextField::DnsQryType => app.dns.as_ref().map(|dns| u64::from(dns.qtype)),
            TextField::DnsRcode => app.dns.as_ref()?.rcode.map(u64::from),
            TextField::QuicVersion => app.quic_version.map(u64::from),
            _ => None,
        }
    }

    /// Calls `f` with each value of the field in `app` (most fields have at
    /// most one); stops at the first true and returns it.
    fn any_value(self, app: &AppFields, mut f: impl FnMut(&str) -> bool) -> bool {
        let tls = app.tls.as_ref();
        let http = app.http.as_ref();
        let one = match self {
            TextField::DnsQryName => app.dns.as_ref().map(|dns| dns.query.as_str()),
            TextField::TlsSni => tls.and_then(|t| t.sni.as_deref()),
            TextField::Ja3 => tls.and_then(|t| t.ja3.as_deref()),
            TextField::Ja3s => tls.and_then(|t| t.ja3s.as_deref()),
            TextField::Ja4 => tls.and_then(|t| t.ja4.as_deref()),
            TextField::HttpHost => http.and_then(|h| h.host.as_deref()),
            TextField::HttpUri => http.and_then(|h| h.uri.as_deref()),
            TextField::HttpMethod => http.and_then(|h| h.method.as_deref()),
            TextField::HttpUserAgent => http.and_then(|h| h.user_agent.as_deref()),
            TextField::HttpContentType => http.and_then(|h| h.content_type.as_deref()),
            TextField::Service => app.service(),
            TextField::HttpResponseCode
            | TextField::DnsQryType
            | TextField::DnsRcode
            | TextField::QuicVersion => None,
            TextField::TlsAlpn => {
                return tls.is_some_and(|t| t.alpn.iter().any(|alpn| f(alpn)));
            }
            TextField::SshProtocol => {
                return app.ssh.as_ref().is_some_and(|ssh| {
                    [&ssh.client, &ssh.server]
                        .into_iter()
                        .flatten()
                        .any(|side| f(side))
                });
            }
        };
        one.is_some_and(f)
    }
}

impl fmt::Display for TextField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a text test does with the field's values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TextOp {
    /// The field is there.
    Exists,
    /// Some value equals the text (case matters, as in Wireshark).
    Eq(String),
    /// Every value differs from the text (and there is one).
    Ne(String),
    /// Some value contains the text (case matters).
    Contains(String),
    /// Some value matches the expression (case-insensitive, as in Wireshark).
    Matches(Pattern),
    /// A number field's value stands in this relation to the number.
    Compare(CmpOp, u64),
}

/// A test of a connection's text field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TextTest {
    /// The field.
    pub field: TextField,
    /// The test.
    pub op: TextOp,
}

impl TextTest {
    /// True if a connection with these fields passes; false without fields.
    pub fn matches(&self, app: Option<&AppFields>) -> bool {
        let Some(app) = app else {
            return false;
        };
        if self.field.is_number() {
            let value = self.field.number(app);
            return match self.op {
                TextOp::Exists => value.is_some(),
                TextOp::Compare(op, number) => value.is_some_and(|value| op.holds(value, number)),
                _ => false,
            };
        }
        match &self.op {
            TextOp::Ne(text) => {
                let mut present = false;
                let equal = self.field.any_value(app, |value| {
                    present = true;
                    value == text
                });
                present && !equal
            }
            _ => self.field.any_value(app, |value| self.test(value)),
        }
    }

    /// True if one value passes (for `!=`: differs).
    fn test(&self, value: &str) -> bool {
        match &self.op {
            TextOp::Exists => true,
            TextOp::Eq(text) => value == text,
            TextOp::Ne(text) => value != text,
            TextOp::Contains(text) => value.contains(text.as_str()),
            TextOp::Matches(pattern) => pattern.is_match(value.as_bytes()),
            TextOp::Compare(..) => false,
        }
    }

    /// The name keys that hold every connection passing this test, if the
    /// index keeps the field: the name for `==`, the subdomains (and the
    /// domain) for an expression that only takes a domain and its subdomains
    /// (`"(^|\\.)example\\.com$"`, `"\\.example\\.com$"`), else all of the kind.
    pub fn lookups(&self) -> Option<Vec<NameLookup>> {
        let kind = self.field.kind()?;
        Some(match &self.op {
            TextOp::Eq(text) => vec![NameLookup::Exact(kind, text.clone())],
            TextOp::Matches(pattern) if kind.is_domain() => match domain_suffix(pattern.source()) {
                Some((domain, true)) => vec![
                    NameLookup::Exact(kind, domain.clone()),
                    NameLookup::Subdomains(kind, domain),
                ],
                Some((domain, false)) => vec![NameLookup::Subdomains(kind, domain)],
                None => vec![NameLookup::All(kind)],
            },
            _ => vec![NameLookup::All(kind)],
        })
    }
}

impl fmt::Display for TextTest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let quoted = |text: &str| -> String {
            let mut out = String::with_capacity(text.len() + 2);
            out.push('"');
            for c in text.chars() {
                match c {
                    '"' | '\\' => {
                        out.push('\\');
                        out.push(c);
                    }
                    c if c.is_control() => out.push_str(&format!("\\x{:02x}", u32::from(c))),
                    c => out.push(c),
                }
            }
            out.push('"');
            out
        };
        match &self.op {
            TextOp::Exists => write!(f, "{}", self.field),
            TextOp::Eq(text) => write!(f, "{} == {}", self.field, quoted(text)),
            TextOp::Ne(text) => write!(f, "{} != {}", self.field, quoted(text)),
            TextOp::Contains(text) => write!(f, "{} contains {}", self.field, quoted(text)),
            TextOp::Matches(pattern) => {
                write!(f, "{} matches {}", self.field, quoted(pattern.source()))
            }
            TextOp::Compare(op, number) => write!(f, "{} {} {number}", self.field, op.symbol()),
        }
    }
}

/// The domain of an expression that matches exactly a domain's subdomains
/// (`\.example\.com$`, false) or the domain and its subdomains
/// (`(^|\.)example\.com$`, true), if it is one of those: labels of letters,
/// digits, `-` and `_`, dots escaped, anchored at the end.
fn domain_suffix(source: &str) -> Option<(String, bool)> {
    let body = source.strip_suffix('$')?;
    let (with_self, rest) = if let Some(rest) = body.strip_prefix("(^|\\.)") {
        (true, rest)
    } else if let Some(rest) = body.strip_prefix("\\.") {
        (false, rest)
    } else {
        return None;
    };
    let mut domain = String::with_capacity(rest.len());
    let mut chars = rest.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.next() == Some('.') => domain.push('.'),
            c if c.is_ascii_alphanumeric() || c == '-' || c == '_' => domain.push(c),
            _ => return None,
        }
    }
    let labels_ok = !domain.is_empty() && domain.split('.').all(|label| !label.is_empty());
    labels_ok.then_some((domain, with_self))
}

/// How good a lookup is: an exact name before a domain's range before a
/// whole kind.
fn cost(lookups: &[NameLookup]) -> u8 {
    lookups
        .iter()
        .map(|lookup| match lookup {
            NameLookup::Exact(..) => 0,
            NameLookup::Subdomains(..) => 1,
            NameLookup::All(_) => 2,
        })
        .max()
        .unwrap_or(0)
}

fn lookups_of(expr: &Expr) -> Option<Vec<NameLookup>> {
    match expr {
        Expr::Text(test) => test.lookups(),
        Expr::And(operands) => operands
            .iter()
            .filter_map(lookups_of)
            .min_by_key(|lookups| cost(lookups)),
        Expr::Or(operands) => {
            let mut all = Vec::new();
            for operand in operands {
                all.extend(lookups_of(operand)?);
            }
            Some(all)
        }
        _ => None,
    }
}

/// What a filter says of a connection with one name known: `Some` when the
/// name alone decides.
fn by_name(expr: &Expr, kind: NameKind, name: &str) -> Option<bool> {
    match expr {
        Expr::Text(test) if test.field.kind() == Some(kind) => Some(match &test.op {
            TextOp::Exists => true,
            TextOp::Ne(text) => name != text,
            _ => test.test(name),
        }),
        Expr::Not(inner) => by_name(inner, kind, name).map(|known| !known),
        Expr::And(operands) => {
            let mut all = Some(true);
            for operand in operands {
                match by_name(operand, kind, name) {
                    Some(false) => return Some(false),
                    Some(true) => {}
                    None => all = None,
                }
            }
            all
        }
        Expr::Or(operands) => {
            let mut all = Some(false);
            for operand in operands {
                match by_name(operand, kind, name) {
                    Some(true) => return Some(true),
                    Some(false) => {}
                    None => all = None,
                }
            }
            all
        }
        _ => None,
    }
}

impl Filter {
    /// The name keys of the connection index that hold every connection
    /// passing the filter, if there are such (the filter tests a name the
    /// index keeps, and every alternative of it does).
    pub fn name_lookups(&self) -> Option<Vec<NameLookup>> {
        let mut lookups = lookups_of(self.root()?)?;
        lookups.sort();
        lookups.dedup();
        Some(lookups)
    }

    /// The filter with each test of a connection's text field replaced by
    /// the filter `resolve` gives for it (a packet query's: the packets of the
    /// connections that pass the test).
    pub fn resolve_text<E>(
        &self,
        resolve: &mut dyn FnMut(&TextTest) -> Result<Filter, E>,
    ) -> Result<Filter, E> {
        fn walk<E>(
            expr: &Expr,
            resolve: &mut dyn FnMut(&TextTest) -> Result<Filter, E>,
        ) -> Result<Expr, E> {
            Ok(match expr {
                Expr::Text(test) => match resolve(test)?.root {
                    Some(root) => root,
                    // Every packet: the test of a frame.
                    None => Expr::Exists(crate::Field::Frame),
                },
                Expr::Not(inner) => Expr::Not(Box::new(walk(inner, resolve)?)),
                Expr::And(operands) => Expr::And(
                    operands
                        .iter()
                        .map(|operand| walk(operand, resolve))
                        .collect::<Result<_, E>>()?,
                ),
                Expr::Or(operands) => Expr::Or(
                    operands
                        .iter()
                        .map(|operand| walk(operand, resolve))
                        .collect::<Result<_, E>>()?,
                ),
                Expr::Xor(operands) => Expr::Xor(
                    operands
                        .iter()
                        .map(|operand| walk(operand, resolve))
                        .collect::<Result<_, E>>()?,
                ),
                leaf => leaf.clone(),
            })
        }
        let root = self.root().map(|root| walk(root, resolve)).transpose()?;
        Ok(Filter::from_root(root).with_community_seed(self.community_seed()))
    }

    /// The filter of one text test (to find the connections that pass it).
    pub fn of_text(test: &TextTest) -> Filter {
        Filter::from_root(Some(Expr::Text(Box::new(test.clone()))))
    }

    /// Why the filter cannot test packets one at a time as they arrive (a
    /// live trigger's), if it cannot: it tests a connection's application
    /// fields.
    pub fn packet_only_problem(&self) -> Option<String> {
        self.tests_app_fields().then(|| {
            "it tests a connection's application fields (dns.qry.name, http.host, ja4...), \
             which are the connection's, not a packet's; a trigger tests each packet as it \
             arrives"
                .to_owned()
        })
    }

    /// True if the filter tests a connection's application fields.
    pub fn tests_app_fields(&self) -> bool {
        fn walk(expr: &Expr) -> bool {
            match expr {
                Expr::Text(_) => true,
                Expr::Not(inner) => walk(inner),
                Expr::And(operands) | Expr::Or(operands) | Expr::Xor(operands) => {
                    operands.iter().any(walk)
                }
                _ => false,
            }
        }
        self.root().is_some_and(walk)
    }

    /// False if no connection whose `kind` name is `name` (as sent) can pass
    /// the filter, whatever its other fields; true if one may.
    pub fn may_pass_name(&self, kind: NameKind, name: &str) -> bool {
        self.root()
            .is_none_or(|root| by_name(root, kind, name) != Some(false))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn domain_suffixes_are_recognised() {
        assert_eq!(
            domain_suffix("(^|\\.)example\\.com$"),
            Some(("example.com".to_owned(), true))
        );
        assert_eq!(
            domain_suffix("\\.ex-ample\\.co_m$"),
            Some(("ex-ample.co_m".to_owned(), false))
        );
        for not_one in [
            "example\\.com$",
            "\\.example\\.com",
            "\\.exa.ple\\.com$",
            "\\.example\\.(com|net)$",
            "(^|\\.)$",
            "\\.example\\.\\.com$",
        ] {
            assert_eq!(domain_suffix(not_one), None, "{not_one}");
        }
    }

    #[test]
    fn lookups_follow_the_tree() {
        let lookups = |text: &str| Filter::parse(text).ok().and_then(|f| f.name_lookups());
        assert_eq!(
            lookups("dns.qry.name == \"a.example.com\" && ip.addr == 10.0.0.1"),
            Some(vec![NameLookup::Exact(
                NameKind::DnsQuery,
                "a.example.com".to_owned()
            )])
        );
        assert_eq!(
            lookups(
                "ja4 == \"x\" || tls.handshake.extensions_server_name matches \"\\\\.b\\\\.org$\""
            ),
            Some(vec![
                NameLookup::Exact(NameKind::Ja4, "x".to_owned()),
                NameLookup::Subdomains(NameKind::TlsSni, "b.org".to_owned()),
            ])
        );
        assert_eq!(
            lookups("http.host contains \"evil\" && ja3 == \"abc\""),
            Some(vec![NameLookup::Exact(NameKind::Ja3, "abc".to_owned())])
        );
        assert_eq!(lookups("http.request.uri contains \"/admin\""), None);
        assert_eq!(lookups("ja4 == \"x\" || tcp.port == 80"), None);
        assert_eq!(lookups("!(ja4 == \"x\")"), None);
    }

    #[test]
    fn number_fields_compare_numbers_and_print_as_parsed() {
        let app = AppFields {
            http: Some(hindsight_model::app::HttpFields {
                status: Some(503),
                ..Default::default()
            }),
            dns: Some(hindsight_model::app::DnsFields {
                qtype: 28,
                rcode: None,
                ..Default::default()
            }),
            ..Default::default()
        };
        let passes = |text: &str| {
            let filter = Filter::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            // What it prints parses back to the same filter.
            let printed = filter.to_string();
            assert_eq!(
                Filter::parse(&printed).ok(),
                Some(filter.clone()),
                "{printed}"
            );
            let record = hindsight_model::PacketRecord::default();
            filter.matches_connection(&record, Some(&app))
        };
        assert!(passes("http.response.code >= 500"));
        assert!(passes("http.response.code == 0x1f7"));
        assert!(!passes("http.response.code < 500"));
        assert!(passes("http.response.code"));
        assert!(passes("dns.qry.type == 28 && !dns.flags.rcode"));
        assert!(!passes("dns.flags.rcode == 0"));
        assert!(!passes("dns.flags.rcode != 0"));
        assert!(!passes("quic.version"));
        assert!(passes("service == \"ssl\" || service == \"http\""));
        assert_eq!(lookups_of_text("http.response.code >= 500"), None);
        for (refused, why) in [
            ("http.response.code contains \"5\"", "is a number"),
            ("http.response.code == \"x\"", "a number"),
            ("dns.qry.type > 99999999999999999999999", "too large"),
            ("quic.version == 0x1_0000_0000_0", "not a valid"),
        ] {
            let error = Filter::parse(refused).err().map(|e| e.to_string());
            assert!(
                error.as_deref().is_some_and(|e| e.contains(why)),
                "{refused}: {error:?}"
            );
        }
    }

    fn lookups_of_text(text: &str) -> Option<Vec<NameLookup>> {
        Filter::parse(text).ok().and_then(|f| f.name_lookups())
    }

    #[test]
    fn a_name_alone_decides_what_it_can() {
        let filter = Filter::parse("http.host == \"a.com\" && tcp.port == 80").ok();
        let filter = filter.unwrap_or_default();
        assert!(filter.may_pass_name(NameKind::HttpHost, "a.com"));
        assert!(!filter.may_pass_name(NameKind::HttpHost, "A.com"));
        assert!(filter.may_pass_name(NameKind::TlsSni, "b.com"));
        let filter = Filter::parse("!(http.host matches \"^a\")").unwrap_or_default();
        assert!(!filter.may_pass_name(NameKind::HttpHost, "A.com"));
        assert!(filter.may_pass_name(NameKind::HttpHost, "b.com"));
    }
}
