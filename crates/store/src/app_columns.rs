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

/// How a column is built and read back: text (a list is text joined by
/// [`join_list`]) or an unsigned integer.
trait Kind: Default {
    /// A value read back.
    type Value;
    const TYPE: DataType;
    fn read(batch: &RecordBatch, name: &str, row: usize) -> Option<Self::Value>;
}

impl Kind for StringBuilder {
    type Value = String;
    const TYPE: DataType = DataType::Utf8;
    fn read(batch: &RecordBatch, name: &str, row: usize) -> Option<String> {
        let array = crate::flows::column::<StringArray>(batch, name)?;
        array.is_valid(row).then(|| array.value(row).to_owned())
    }
}

macro_rules! kind_number {
    ($($builder:ty => $arrow:ty, $data_type:ident;)*) => {$(
        impl Kind for $builder {
            type Value = <$arrow as ArrowPrimitiveType>::Native;
            const TYPE: DataType = DataType::$data_type;
            fn read(batch: &RecordBatch, name: &str, row: usize) -> Option<Self::Value> {
                let array = crate::flows::column::<PrimitiveArray<$arrow>>(batch, name)?;
                array.is_valid(row).then(|| array.value(row))
            }
        }
    )*};
}
kind_number! {
    UInt8Builder => UInt8Type, UInt8;
    UInt16Builder => UInt16Type, UInt16;
    UInt32Builder => UInt32Type, UInt32;
}

/// Text made from the other fields (`service`): written, never read back.
#[derive(Debug, Default)]
struct Derived(StringBuilder);

impl std::ops::Deref for Derived {
    type Target = StringBuilder;
    fn deref(&self) -> &StringBuilder {
        &self.0
    }
}

impl std::ops::DerefMut for Derived {
    fn deref_mut(&mut self) -> &mut StringBuilder {
        &mut self.0
    }
}

impl Kind for Derived {
    type Value = ();
    const TYPE: DataType = DataType::Utf8;
    fn read(_: &RecordBatch, _: &str, _: usize) -> Option<()> {
        None
    }
}

type Text = StringBuilder;
type U8 = UInt8Builder;
type U16 = UInt16Builder;
type U32 = UInt32Builder;

/// The columns, each declared once: its constant, name, how it is built and
/// its value in a connection's [`AppFields`].
macro_rules! app_columns {
    ($($(#[$doc:meta])* $konst:ident = $name:literal, $field:ident: $kind:ident = |$app:ident| $get:expr;)*) => {
        /// Column names, in schema order.
        pub mod col {
            $($(#[$doc])* pub const $konst: &str = $name;)*
        }

        /// The application columns' fields, in schema order.
        pub fn fields() -> Vec<Field> {
            vec![$(Field::new(col::$konst, <$kind as Kind>::TYPE, true)),*]
        }

        /// Builds the application columns.
        #[derive(Debug, Default)]
        pub(crate) struct AppColumnsBuilder {
            $($field: $kind,)*
            /// Rows without application fields not yet appended: most
            /// connections have none (98% of lan-hour's), and appending them
            /// a run at a time, not a null a column a row, took the builder
            /// from 1,342 to 172 instructions a connection (callgrind,
            /// 100,673 connections).
            nulls: usize,
        }

        impl AppColumnsBuilder {
            pub(crate) fn append(&mut self, app: Option<&AppFields>) {
                // An empty `AppFields` is all nulls too, as the columns make it.
                let Some(app) = app.filter(|app| !app.is_empty()) else {
                    self.nulls += 1;
                    return;
                };
                self.append_nulls();
                $({
                    let $app = app;
                    self.$field.append_option($get);
                })*
            }

            /// Appends the pending rows without application fields: a null
            /// in every column, as the fields of `AppFields::default()` are.
            fn append_nulls(&mut self) {
                let n = std::mem::take(&mut self.nulls);
                if n > 0 {
                    $(self.$field.append_nulls(n);)*
                }
            }

            pub(crate) fn finish(&mut self) -> Vec<ArrayRef> {
                self.append_nulls();
                vec![$(Arc::new(self.$field.finish()),)*]
            }
        }

        /// One row's columns, read back (absent where null or missing; a
        /// derived column is never read).
        #[allow(dead_code)]
        struct Row {
            $($field: Option<<$kind as Kind>::Value>,)*
        }

        impl Row {
            fn read(batch: &RecordBatch, row: usize) -> Self {
                Self { $($field: <$kind as Kind>::read(batch, col::$konst, row),)* }
            }
        }
    };
}

app_columns! {
    /// Zeek's `service`: `dns`, `ssl`, `http`, `quic`, `ssh`.
    SERVICE = "service", service: Derived = |a| a.service();
    /// The first DNS query's name (Wireshark `dns.qry.name`).
    DNS_QUERY = "dns_query", dns_query: Text = |a| a.dns.as_ref().map(|d| &d.query);
    /// Its type (`dns.qry.type`).
    DNS_QTYPE = "dns_qtype", dns_qtype: U16 = |a| a.dns.as_ref().map(|d| d.qtype);
    /// The response code (`dns.flags.rcode`).
    DNS_RCODE = "dns_rcode", dns_rcode: U8 = |a| a.dns.as_ref().and_then(|d| d.rcode);
    /// The answers' addresses and names, comma-separated (a comma inside one
    /// is written `\x2c`, as Zeek writes its sets).
    DNS_ANSWERS = "dns_answers", dns_answers: Text =
        |a| a.dns.as_ref().filter(|d| d.rcode.is_some()).map(|d| join_list(&d.answers));
    /// The answers' TTLs in seconds, comma-separated.
    DNS_TTLS = "dns_ttls", dns_ttls: Text =
        |a| a.dns.as_ref().filter(|d| d.rcode.is_some()).map(|d| join_list(&d.ttls));
    /// The TLS server name (`tls.handshake.extensions_server_name`).
    TLS_SNI = "tls_sni", tls_sni: Text = |a| a.tls.as_ref().and_then(|t| t.sni.as_ref());
    /// The ALPN protocols offered, comma-separated as `dns_answers`
    /// (`tls.handshake.extensions_alpn_str`).
    TLS_ALPN = "tls_alpn", tls_alpn: Text =
        |a| a.tls.as_ref().filter(|t| t.client_version.is_some()).map(|t| join_list(&t.alpn));
    /// The ClientHello's version field.
    TLS_CLIENT_VERSION = "tls_client_version", tls_client_version: U16 =
        |a| a.tls.as_ref().and_then(|t| t.client_version);
    /// The version the server chose.
    TLS_VERSION = "tls_version", tls_version: U16 = |a| a.tls.as_ref().and_then(|t| t.version);
    /// The cipher suite the server chose.
    TLS_CIPHER = "tls_cipher", tls_cipher: U16 = |a| a.tls.as_ref().and_then(|t| t.cipher);
    /// JA3 of the ClientHello (`tls.handshake.ja3`).
    JA3 = "ja3", ja3: Text = |a| a.tls.as_ref().and_then(|t| t.ja3.as_ref());
    /// JA3S of the ServerHello (`tls.handshake.ja3s`).
    JA3S = "ja3s", ja3s: Text = |a| a.tls.as_ref().and_then(|t| t.ja3s.as_ref());
    /// JA4 of the ClientHello.
    JA4 = "ja4", ja4: Text = |a| a.tls.as_ref().and_then(|t| t.ja4.as_ref());
    /// The first request's method (`http.request.method`).
    HTTP_METHOD = "http_method", http_method: Text =
        |a| a.http.as_ref().and_then(|h| h.method.as_ref());
    /// Its Host header (`http.host`).
    HTTP_HOST = "http_host", http_host: Text = |a| a.http.as_ref().and_then(|h| h.host.as_ref());
    /// Its URI (`http.request.uri`).
    HTTP_URI = "http_uri", http_uri: Text = |a| a.http.as_ref().and_then(|h| h.uri.as_ref());
    /// Its User-Agent header (`http.user_agent`).
    HTTP_USER_AGENT = "http_user_agent", http_user_agent: Text =
        |a| a.http.as_ref().and_then(|h| h.user_agent.as_ref());
    /// The response's status code (`http.response.code`).
    HTTP_STATUS = "http_status", http_status: U16 = |a| a.http.as_ref().and_then(|h| h.status);
    /// The response's Content-Type header (`http.content_type`).
    HTTP_CONTENT_TYPE = "http_content_type", http_content_type: Text =
        |a| a.http.as_ref().and_then(|h| h.content_type.as_ref());
    /// The QUIC version (`quic.version`).
    QUIC_VERSION = "quic_version", quic_version: U32 = |a| a.quic_version;
    /// The originator's SSH identification string (`ssh.protocol`).
    SSH_CLIENT = "ssh_client", ssh_client: Text = |a| a.ssh.as_ref().and_then(|s| s.client.as_ref());
    /// The responder's.
    SSH_SERVER = "ssh_server", ssh_server: Text = |a| a.ssh.as_ref().and_then(|s| s.server.as_ref());
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

    /// Row `row`'s fields; `None` where every application column is null.
    pub(crate) fn row(&self, row: usize) -> Option<Box<AppFields>> {
        let r = Row::read(self.batch, row);
        let list = |text: Option<String>| text.map(|text| split_list(&text)).unwrap_or_default();
        let dns = r.dns_query.map(|query| DnsFields {
            id: 0,
            query,
            qtype: r.dns_qtype.unwrap_or(0),
            rcode: r.dns_rcode,
            answers: list(r.dns_answers),
            ttls: list(r.dns_ttls)
                .iter()
                .filter_map(|ttl| ttl.parse().ok())
                .collect(),
        });
        let tls = TlsFields {
            sni: r.tls_sni,
            alpn: list(r.tls_alpn),
            client_version: r.tls_client_version,
            version: r.tls_version,
            cipher: r.tls_cipher,
            ja3: r.ja3,
            ja3s: r.ja3s,
            ja4: r.ja4,
        };
        let http = HttpFields {
            method: r.http_method,
            host: r.http_host,
            uri: r.http_uri,
            user_agent: r.http_user_agent,
            status: r.http_status,
            content_type: r.http_content_type,
        };
        let ssh = SshFields {
            client: r.ssh_client,
            server: r.ssh_server,
        };
        let app = AppFields {
            dns,
            tls: (tls != TlsFields::default()).then_some(tls),
            http: (http != HttpFields::default()).then_some(http),
            quic_version: r.quic_version,
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
