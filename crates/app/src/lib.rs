//! The role of the app crate is to say what a connection's first packets carry at
//! the application layer ([`AppFields`]): the DNS query and its answers, the TLS
//! hellos (SNI, ALPN, versions, cipher, JA3, JA3S, JA4), the HTTP/1.x request and
//! response heads, the QUIC version, the SSH identification strings.
//!
//! [`Conversation`] is one connection's extractor: the flow table hands it each
//! payload with its direction (and the TCP sequence number), it keeps the first
//! bytes of each direction in order, parses them when they are enough, and says
//! when it needs no more. The parsers ([`dns`], [`tls`], [`http`], [`ssh`]) are
//! pure functions of bytes that never panic (fuzzed), bounded in what they keep.
//!
//! What is read, and how much (the `flows` format documentation has the full list):
//! - TCP: the first [`Limits::stream_bytes`] bytes of each direction, in sequence
//!   order from the first payload (a retransmission is skipped; a gap ends the
//!   direction). TLS, HTTP and SSH are recognised by their first bytes on any
//!   port; DNS over TCP on port 53.
//! - UDP: each of the first [`Limits::datagrams`] datagrams on its own: DNS on
//!   ports 53, 5353 (mDNS) and 5355 (LLMNR); QUIC when the originator's first
//!   datagram is a long-header packet of a known version, whose Initials are
//!   decrypted (RFC 9001 5) for the ClientHello and ServerHello in them.
//! - Nothing else of the connection is read: the extractor is done when every
//!   protocol it recognised has what it keeps, or its limits are reached.

#![cfg_attr(
    not(test),
    deny(
        clippy::indexing_slicing,
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::arithmetic_side_effects
    )
)]

pub mod dns;
mod extract;
pub mod http;
pub mod quic;
pub mod ssh;
pub mod tls;

pub use extract::{Conversation, Limits};
pub use hindsight_model::app::{AppFields, DnsFields, HttpFields, SshFields, TlsFields};

/// The longest string kept from any field (a name, a URI, a user agent):
/// longer ones are cut at a character boundary.
pub const MAX_TEXT: usize = 4096;

/// A reader of big-endian fields over a byte slice: every read is checked.
#[derive(Clone, Copy, Debug)]
struct Bytes<'a> {
    rest: &'a [u8],
}

impl<'a> Bytes<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Self { rest: bytes }
    }

    fn u8(&mut self) -> Option<u8> {
        let (&first, rest) = self.rest.split_first()?;
        self.rest = rest;
        Some(first)
    }

    fn u16(&mut self) -> Option<u16> {
        let bytes = self.take(2)?;
        Some(u16::from_be_bytes(bytes.try_into().ok()?))
    }

    fn u24(&mut self) -> Option<u32> {
        let bytes = self.take(3)?;
        Some(u32::from_be_bytes([
            0,
            *bytes.first()?,
            *bytes.get(1)?,
            *bytes.get(2)?,
        ]))
    }

    fn u32(&mut self) -> Option<u32> {
        let bytes = self.take(4)?;
        Some(u32::from_be_bytes(bytes.try_into().ok()?))
    }

    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.rest.len() {
            return None;
        }
        let (head, rest) = self.rest.split_at(n);
        self.rest = rest;
        Some(head)
    }

    /// A vector with a one-byte length.
    fn vec8(&mut self) -> Option<Bytes<'a>> {
        let n = self.u8()?;
        self.take(usize::from(n)).map(Bytes::new)
    }

    /// A vector with a two-byte length.
    fn vec16(&mut self) -> Option<Bytes<'a>> {
        let n = self.u16()?;
        self.take(usize::from(n)).map(Bytes::new)
    }

    fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }
}

/// True when `stream` starts with `prefix`, as far as `stream` goes (a
/// stream shorter than the prefix may still become it); false when empty.
fn starts_so_far(stream: &[u8], prefix: &[u8]) -> bool {
    let n = stream.len().min(prefix.len());
    n > 0 && stream.get(..n) == prefix.get(..n)
}

/// `bytes` as text: UTF-8 kept (invalid sequences replaced), control characters
/// escaped as `\xNN`, cut to [`MAX_TEXT`] bytes.
fn text(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().min(MAX_TEXT));
    for c in String::from_utf8_lossy(bytes).chars() {
        if out.len() >= MAX_TEXT {
            break;
        }
        if c.is_control() {
            for byte in c.to_string().bytes() {
                out.push_str(&format!("\\x{byte:02x}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}
