//! The application columns of the `flows` table: one nullable column per field
//! of [`AppFields`], null where the protocol was not seen. Segments written
//! before these columns existed read as all null.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, PrimitiveArray, RecordBatch, StringArray, StringBuilder, UInt8Builder,
    UInt16Builder, UInt32Builder,
};
use arrow::datatypes::{ArrowPrimitiveType, DataType, Field, UInt8Type, UInt16Type, UInt32Type};
use hindsight_model::app::{AppFields, DnsFields, HttpFields, SshFields, TlsFields};

/// Column names, in schema order.
pub mod col {
    /// Zeek's `service`: `dns`, `ssl`, `http`, `quic`, `ssh`.
    pub const SERVICE: &str = "service";
    /// The first DNS query's name (Wireshark `dns.qry.name`).
    pub const DNS_QUERY: &str = "dns_query";
    /// Its type (`dns.qry.type`).
    pub const DNS_QTYPE: &str = "dns_qtype";
    /// The response code (`dns.flags.rcode`).
    pub const DNS_RCODE: &str = "dns_rcode";
    /// The answers' addresses and names, comma-separated (a comma inside one
    /// is written `\x2c`, as Zeek writes its sets).
    pub const DNS_ANSWERS: &str = "dns_answers";
    /// The answers' TTLs in seconds, comma-separated.
    pub const DNS_TTLS: &str = "dns_ttls";
    /// The TLS server name (`tls.handshake.extensions_server_name`).
    pub const TLS_SNI: &str = "tls_sni";
    /// The ALPN protocols offered, comma-separated as `dns_answers`
    /// (`tls.handshake.extensions_alpn_str`).
    pub const TLS_ALPN: &str = "tls_alpn";
    /// The ClientHello's version field.
    pub const TLS_CLIENT_VERSION: &str = "tls_client_version";
    /// The version the server chose.
    pub const TLS_VERSION: &str = "tls_version";
    /// The cipher suite the server chose.
    pub const TLS_CIPHER: &str = "tls_cipher";
    /// JA3 of the ClientHello (`tls.handshake.ja3`).
    pub const JA3: &str = "ja3";
    /// JA3S of the ServerHello (`tls.handshake.ja3s`).
    pub const JA3S: &str = "ja3s";
    /// JA4 of the ClientHello.
    pub const JA4: &str = "ja4";
    /// The first request's method (`http.request.method`).
    pub const HTTP_METHOD: &str = "http_method";
    /// Its Host header (`http.host`).
    pub const HTTP_HOST: &str = "http_host";
    /// Its URI (`http.request.uri`).
    pub const HTTP_URI: &str = "http_uri";
    /// Its User-Agent header (`http.user_agent`).
    pub const HTTP_USER_AGENT: &str = "http_user_agent";
    /// The response's status code (`http.response.code`).
    pub const HTTP_STATUS: &str = "http_status";
    /// The response's Content-Type header (`http.content_type`).
    pub const HTTP_CONTENT_TYPE: &str = "http_content_type";
    /// The QUIC version (`quic.version`).
    pub const QUIC_VERSION: &str = "quic_version";
    /// The originator's SSH identification string (`ssh.protocol`).
    pub const SSH_CLIENT: &str = "ssh_client";
    /// The responder's.
    pub const SSH_SERVER: &str = "ssh_server";
}

/// `items` joined with commas, a comma inside one written `\x2c`.
pub fn join_list<T: std::fmt::Display>(items: impl IntoIterator<Item = T>) -> String {
    let mut out = String::new();
    for (i, item) in items.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&item.to_string().replace(',', "\\x2c"));
    }
    out
}

/// The items of a [`join_list`] text.
pub fn split_list(text: &str) -> Vec<String> {
    if text.is_empty() {
        return Vec::new();
    }
    text.split(',')
        .map(|item| item.replace("\\x2c", ","))
        .collect()
}

/// The application columns' fields, in schema order.
pub fn fields() -> Vec<Field> {
    let text = |name| Field::new(name, DataType::Utf8, true);
    vec![
        text(col::SERVICE),
        text(col::DNS_QUERY),
        Field::new(col::DNS_QTYPE, DataType::UInt16, true),
        Field::new(col::DNS_RCODE, DataType::UInt8, true),
        text(col::DNS_ANSWERS),
        text(col::DNS_TTLS),
        text(col::TLS_SNI),
        text(col::TLS_ALPN),
        Field::new(col::TLS_CLIENT_VERSION, DataType::UInt16, true),
        Field::new(col::TLS_VERSION, DataType::UInt16, true),
        Field::new(col::TLS_CIPHER, DataType::UInt16, true),
        text(col::JA3),
        text(col::JA3S),
        text(col::JA4),
        text(col::HTTP_METHOD),
        text(col::HTTP_HOST),
        text(col::HTTP_URI),
        text(col::HTTP_USER_AGENT),
        Field::new(col::HTTP_STATUS, DataType::UInt16, true),
        text(col::HTTP_CONTENT_TYPE),
        Field::new(col::QUIC_VERSION, DataType::UInt32, true),
        text(col::SSH_CLIENT),
        text(col::SSH_SERVER),
    ]
}

/// Builds the application columns.
#[derive(Debug, Default)]
pub(crate) struct AppColumnsBuilder {
    service: StringBuilder,
    dns_query: StringBuilder,
    dns_qtype: UInt16Builder,
    dns_rcode: UInt8Builder,
    dns_answers: StringBuilder,
    dns_ttls: StringBuilder,
    tls_sni: StringBuilder,
    tls_alpn: StringBuilder,
    tls_client_version: UInt16Builder,
    tls_version: UInt16Builder,
    tls_cipher: UInt16Builder,
    ja3: StringBuilder,
    ja3s: StringBuilder,
    ja4: StringBuilder,
    http_method: StringBuilder,
    http_host: StringBuilder,
    http_uri: StringBuilder,
    http_user_agent: StringBuilder,
    http_status: UInt16Builder,
    http_content_type: StringBuilder,
    quic_version: UInt32Builder,
    ssh_client: StringBuilder,
    ssh_server: StringBuilder,
    /// Rows without application fields not yet appended: most connections
    /// have none (98% of lan-hour's), and appending them a run at a time, not
    /// a null a column a row, took the builder from 1,342 to 172
    /// instructions a connection (callgrind, 100,673 connections).
    nulls: usize,
}

impl AppColumnsBuilder {
    pub(crate) fn append(&mut self, app: Option<&AppFields>) {
        // An empty `AppFields` is all nulls too, as the columns below make it.
        let Some(app) = app.filter(|app| !app.is_empty()) else {
            self.nulls += 1;
            return;
        };
        self.append_nulls();
        self.service.append_option(app.service());
        let dns = app.dns.as_ref();
        self.dns_query.append_option(dns.map(|d| &d.query));
        self.dns_qtype.append_option(dns.map(|d| d.qtype));
        self.dns_rcode.append_option(dns.and_then(|d| d.rcode));
        let answered = dns.filter(|d| d.rcode.is_some());
        self.dns_answers
            .append_option(answered.map(|d| join_list(&d.answers)));
        self.dns_ttls
            .append_option(answered.map(|d| join_list(&d.ttls)));
        let tls = app.tls.as_ref();
        self.tls_sni.append_option(tls.and_then(|t| t.sni.as_ref()));
        self.tls_alpn.append_option(
            tls.filter(|t| t.client_version.is_some())
                .map(|t| join_list(&t.alpn)),
        );
        self.tls_client_version
            .append_option(tls.and_then(|t| t.client_version));
        self.tls_version.append_option(tls.and_then(|t| t.version));
        self.tls_cipher.append_option(tls.and_then(|t| t.cipher));
        self.ja3.append_option(tls.and_then(|t| t.ja3.as_ref()));
        self.ja3s.append_option(tls.and_then(|t| t.ja3s.as_ref()));
        self.ja4.append_option(tls.and_then(|t| t.ja4.as_ref()));
        let http = app.http.as_ref();
        self.http_method
            .append_option(http.and_then(|h| h.method.as_ref()));
        self.http_host
            .append_option(http.and_then(|h| h.host.as_ref()));
        self.http_uri
            .append_option(http.and_then(|h| h.uri.as_ref()));
        self.http_user_agent
            .append_option(http.and_then(|h| h.user_agent.as_ref()));
        self.http_status.append_option(http.and_then(|h| h.status));
        self.http_content_type
            .append_option(http.and_then(|h| h.content_type.as_ref()));
        self.quic_version.append_option(app.quic_version);
        let ssh = app.ssh.as_ref();
        self.ssh_client
            .append_option(ssh.and_then(|s| s.client.as_ref()));
        self.ssh_server
            .append_option(ssh.and_then(|s| s.server.as_ref()));
    }

    /// Appends the pending rows without application fields: a null in
    /// every column, as the fields of `AppFields::default()` are.
    fn append_nulls(&mut self) {
        let n = std::mem::take(&mut self.nulls);
        if n == 0 {
            return;
        }
        for text in [
            &mut self.service,
            &mut self.dns_query,
            &mut self.dns_answers,
            &mut self.dns_ttls,
            &mut self.tls_sni,
            &mut self.tls_alpn,
            &mut self.ja3,
            &mut self.ja3s,
            &mut self.ja4,
            &mut self.http_method,
            &mut self.http_host,
            &mut self.http_uri,
            &mut self.http_user_agent,
            &mut self.http_content_type,
            &mut self.ssh_client,
            &mut self.ssh_server,
        ] {
            text.append_nulls(n);
        }
        for number in [
            &mut self.dns_qtype,
            &mut self.tls_client_version,
            &mut self.tls_version,
            &mut self.tls_cipher,
            &mut self.http_status,
        ] {
            number.append_nulls(n);
        }
        self.dns_rcode.append_nulls(n);
        self.quic_version.append_nulls(n);
    }

    pub(crate) fn finish(&mut self) -> Vec<ArrayRef> {
        self.append_nulls();
        vec![
            Arc::new(self.service.finish()),
            Arc::new(self.dns_query.finish()),
            Arc::new(self.dns_qtype.finish()),
            Arc::new(self.dns_rcode.finish()),
            Arc::new(self.dns_answers.finish()),
            Arc::new(self.dns_ttls.finish()),
            Arc::new(self.tls_sni.finish()),
            Arc::new(self.tls_alpn.finish()),
            Arc::new(self.tls_client_version.finish()),
            Arc::new(self.tls_version.finish()),
            Arc::new(self.tls_cipher.finish()),
            Arc::new(self.ja3.finish()),
            Arc::new(self.ja3s.finish()),
            Arc::new(self.ja4.finish()),
            Arc::new(self.http_method.finish()),
            Arc::new(self.http_host.finish()),
            Arc::new(self.http_uri.finish()),
            Arc::new(self.http_user_agent.finish()),
            Arc::new(self.http_status.finish()),
            Arc::new(self.http_content_type.finish()),
            Arc::new(self.quic_version.finish()),
            Arc::new(self.ssh_client.finish()),
            Arc::new(self.ssh_server.finish()),
        ]
    }
}

/// The application columns of a batch, where it has them (each one is
/// optional: a segment written before them, or a projection, lacks some).
pub(crate) struct AppColumns<'a> {
    batch: &'a RecordBatch,
}

impl<'a> AppColumns<'a> {
    pub(crate) fn of(batch: &'a RecordBatch) -> Self {
        Self { batch }
    }

    fn text(&self, name: &str, row: usize) -> Option<String> {
        let array = crate::flows::column::<StringArray>(self.batch, name)?;
        array.is_valid(row).then(|| array.value(row).to_owned())
    }

    /// Row `row` of the integer column `name`, where it is there and not null.
    fn number<T: ArrowPrimitiveType>(&self, name: &str, row: usize) -> Option<T::Native> {
        let array = crate::flows::column::<PrimitiveArray<T>>(self.batch, name)?;
        array.is_valid(row).then(|| array.value(row))
    }

    fn u16(&self, name: &str, row: usize) -> Option<u16> {
        self.number::<UInt16Type>(name, row)
    }

    fn texts(&self, name: &str, row: usize) -> Option<Vec<String>> {
        self.text(name, row).map(|text| split_list(&text))
    }

    /// Row `row`'s fields; `None` where every application column is null.
    pub(crate) fn row(&self, row: usize) -> Option<Box<AppFields>> {
        let dns = self.text(col::DNS_QUERY, row).map(|query| DnsFields {
            id: 0,
            query,
            qtype: self.u16(col::DNS_QTYPE, row).unwrap_or(0),
            rcode: self.number::<UInt8Type>(col::DNS_RCODE, row),
            answers: self.texts(col::DNS_ANSWERS, row).unwrap_or_default(),
            ttls: self
                .texts(col::DNS_TTLS, row)
                .unwrap_or_default()
                .iter()
                .filter_map(|ttl| ttl.parse().ok())
                .collect(),
        });
        let tls = TlsFields {
            sni: self.text(col::TLS_SNI, row),
            alpn: self.texts(col::TLS_ALPN, row).unwrap_or_default(),
            client_version: self.u16(col::TLS_CLIENT_VERSION, row),
            version: self.u16(col::TLS_VERSION, row),
            cipher: self.u16(col::TLS_CIPHER, row),
            ja3: self.text(col::JA3, row),
            ja3s: self.text(col::JA3S, row),
            ja4: self.text(col::JA4, row),
        };
        let http = HttpFields {
            method: self.text(col::HTTP_METHOD, row),
            host: self.text(col::HTTP_HOST, row),
            uri: self.text(col::HTTP_URI, row),
            user_agent: self.text(col::HTTP_USER_AGENT, row),
            status: self.u16(col::HTTP_STATUS, row),
            content_type: self.text(col::HTTP_CONTENT_TYPE, row),
        };
        let ssh = SshFields {
            client: self.text(col::SSH_CLIENT, row),
            server: self.text(col::SSH_SERVER, row),
        };
        let app = AppFields {
            dns,
            tls: (tls != TlsFields::default()).then_some(tls),
            http: (http != HttpFields::default()).then_some(http),
            quic_version: self.number::<UInt32Type>(col::QUIC_VERSION, row),
            ssh: (ssh != SshFields::default()).then_some(ssh),
        };
        (!app.is_empty()).then(|| Box::new(app))
    }
}

#[cfg(test)]
mod tests {
    use arrow::array::Array;

    use super::*;

    /// Every column, null or not, row by row, as text.
    fn rows(columns: &[ArrayRef]) -> Vec<Vec<String>> {
        let len = columns.first().map_or(0, |c| c.len());
        (0..len)
            .map(|row| {
                columns
                    .iter()
                    .map(|column| {
                        if column.is_null(row) {
                            "null".to_owned()
                        } else {
                            arrow::util::display::array_value_to_string(column, row)
                                .unwrap_or_default()
                        }
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn rows_without_fields_are_nulls_wherever_they_fall() {
        let dns = AppFields {
            dns: Some(DnsFields {
                id: 7,
                query: "example.com".to_owned(),
                qtype: 1,
                rcode: Some(0),
                answers: vec!["192.0.2.1".to_owned()],
                ttls: vec![60],
            }),
            ..AppFields::default()
        };
        let quic = AppFields {
            quic_version: Some(1),
            ..AppFields::default()
        };
        let empty = AppFields::default();
        let sequence = [
            None,
            Some(&dns),
            None,
            None,
            Some(&empty),
            Some(&quic),
            None,
        ];
        let mut builder = AppColumnsBuilder::default();
        for app in sequence {
            builder.append(app);
        }
        let got = rows(&builder.finish());
        assert_eq!(got.len(), sequence.len());
        for (row, app) in got.iter().zip(sequence) {
            let named = app.and_then(AppFields::service);
            assert_eq!(row[0], named.unwrap_or("null"), "{row:?}");
            let nulls = row.iter().filter(|v| *v == "null").count();
            match named {
                None => assert_eq!(nulls, row.len(), "{row:?}"),
                Some(_) => assert!(nulls < row.len(), "{row:?}"),
            }
        }
        assert_eq!(got[1][1], "example.com");
        // A builder finished starts empty, with no nulls left over.
        builder.append(None);
        builder.append(Some(&dns));
        let again = rows(&builder.finish());
        assert_eq!(again.len(), 2);
        assert_eq!(again[1], got[1]);
    }
}
