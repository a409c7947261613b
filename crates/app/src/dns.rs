//! DNS messages (RFC 1035): the header, the first question and the answers of
//! the types hindsight keeps. Names follow compression pointers, bounded in
//! jumps and length; a malformed message is `None`, never a panic.

use crate::{Bytes, text};
use hindsight_model::Addr16;

/// The parts of a DNS message hindsight keeps.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Message {
    /// The transaction id.
    pub id: u16,
    /// The QR bit: a response.
    pub response: bool,
    /// The response code (the header's 4 bits).
    pub rcode: u8,
    /// The first question's name and type.
    pub question: Option<(String, u16)>,
    /// Answers of type A and AAAA (the address as text), CNAME, PTR and NS (the
    /// name), with their TTLs, at most [`crate::DnsFields::MAX_ANSWERS`].
    pub answers: Vec<(String, u32)>,
}

/// Record types whose data is an address or a name.
const TYPE_A: u16 = 1;
const TYPE_NS: u16 = 2;
const TYPE_CNAME: u16 = 5;
const TYPE_PTR: u16 = 12;
const TYPE_AAAA: u16 = 28;

/// The longest name text kept (RFC 1035 bounds a name to 255 bytes on the wire).
const MAX_NAME: usize = 255;
/// Compression pointers followed per name, at most.
const MAX_JUMPS: usize = 32;

/// Parses a DNS message (over UDP as is; over TCP without its length prefix).
pub fn parse(message: &[u8]) -> Option<Message> {
    let mut r = Bytes::new(message);
    let id = r.u16()?;
    let flags = r.u16()?;
    let qdcount = r.u16()?;
    let ancount = r.u16()?;
    let _nscount = r.u16()?;
    let _arcount = r.u16()?;
    // Opcode 0 (query) only: the others (notify, update) are not lookups.
    if (flags >> 11) & 0xf != 0 {
        return None;
    }
    let mut out = Message {
        id,
        response: flags & 0x8000 != 0,
        rcode: (flags & 0xf) as u8,
        ..Message::default()
    };
    for i in 0..qdcount {
        let name = name(message, &mut r)?;
        let qtype = r.u16()?;
        let _class = r.u16()?;
        if i == 0 {
            out.question = Some((name, qtype));
        }
    }
    for _ in 0..ancount {
        if name(message, &mut r).is_none() {
            break;
        }
        let (Some(rtype), Some(_class), Some(ttl), Some(mut rdata)) =
            (r.u16(), r.u16(), r.u32(), r.vec16())
        else {
            break;
        };
        let data = match rtype {
            TYPE_A => rdata
                .take(4)
                .and_then(|b| <[u8; 4]>::try_from(b).ok())
                .map(|b| Addr16::from_v4_bytes(b).to_string()),
            TYPE_AAAA => rdata
                .take(16)
                .and_then(|b| <[u8; 16]>::try_from(b).ok())
                .map(|b| std::net::Ipv6Addr::from(b).to_string()),
            TYPE_CNAME | TYPE_PTR | TYPE_NS => {
                // The name may point back into the message: read it there.
                let start = message.len().checked_sub(r.rest.len())?;
                let rdata_start = start.checked_sub(rdata.rest.len())?;
                let mut at = Bytes::new(message.get(rdata_start..)?);
                name(message, &mut at)
            }
            _ => None,
        };
        if let Some(data) = data
            && out.answers.len() < crate::DnsFields::MAX_ANSWERS
        {
            out.answers.push((data, ttl));
        }
    }
    Some(out)
}

/// Reads a name at `r` (advancing it past the name as stored there), following
/// compression pointers into `message`. Labels are joined with `.`; the root is
/// the empty name. Bytes outside printable ASCII (and `.` and `\` inside a
/// label) are written `\DDD`, as RFC 4343 presents them.
fn name<'a>(message: &'a [u8], r: &mut Bytes<'a>) -> Option<String> {
    let mut out = String::new();
    let mut cursor = *r;
    let mut jumped = false;
    let mut jumps = 0usize;
    loop {
        let len = cursor.u8()?;
        match len & 0xc0 {
            0x00 => {
                if len == 0 {
                    break;
                }
                let label = cursor.take(usize::from(len))?;
                if !out.is_empty() {
                    out.push('.');
                }
                for &byte in label {
                    if byte.is_ascii_graphic() && byte != b'.' && byte != b'\\' {
                        out.push(char::from(byte));
                    } else {
                        out.push_str(&format!("\\{byte:03}"));
                    }
                }
                if out.len() > MAX_NAME * 4 {
                    return None;
                }
            }
            0xc0 => {
                let low = cursor.u8()?;
                let target = usize::from(len & 0x3f) << 8 | usize::from(low);
                if !jumped {
                    *r = cursor;
                    jumped = true;
                }
                jumps = jumps.saturating_add(1);
                if jumps > MAX_JUMPS {
                    return None;
                }
                cursor = Bytes::new(message.get(target..)?);
            }
            // 0x40 and 0x80 are the extended and reserved label types.
            _ => return None,
        }
    }
    if !jumped {
        *r = cursor;
    }
    Some(text(out.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A response for `www.example.com` A with a CNAME and an A record, the names
    /// compressed.
    fn response() -> Vec<u8> {
        let mut m = vec![0x12, 0x34, 0x81, 0x80, 0, 1, 0, 2, 0, 0, 0, 0];
        m.extend_from_slice(b"\x03www\x07example\x03com\x00\x00\x01\x00\x01");
        // CNAME www.example.com -> web.example.com (pointer to "example" at 16)
        m.extend_from_slice(&[0xc0, 12, 0, 5, 0, 1, 0, 0, 0x0e, 0x10, 0, 6]);
        m.extend_from_slice(b"\x03web\xc0\x10");
        // A web.example.com -> 93.184.216.34, the owner a pointer to the CNAME's data
        m.extend_from_slice(&[0xc0, 45, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 93, 184, 216, 34]);
        m
    }

    #[test]
    fn a_response_gives_its_question_answers_and_ttls() {
        let message = parse(&response()).unwrap();
        assert_eq!(message.id, 0x1234);
        assert!(message.response);
        assert_eq!(message.rcode, 0);
        assert_eq!(message.question, Some(("www.example.com".into(), 1)));
        assert_eq!(
            message.answers,
            vec![
                ("web.example.com".into(), 3600),
                ("93.184.216.34".into(), 60)
            ]
        );
    }

    #[test]
    fn pointer_loops_and_cut_messages_are_refused() {
        let mut looped = vec![0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0];
        looped.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1]);
        assert_eq!(parse(&looped), None);
        let whole = response();
        for cut in 0..30 {
            assert_eq!(parse(&whole[..cut]), None, "cut at {cut}");
        }
        // Cut inside the answers: the question is kept, the answers read so far too.
        let message = parse(&whole[..whole.len() - 3]).unwrap();
        assert_eq!(message.answers.len(), 1);
    }

    #[test]
    fn odd_bytes_in_labels_are_escaped() {
        let mut m = vec![0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0];
        m.extend_from_slice(b"\x03a.\x01\x00\x00\x10\x00\x01");
        let message = parse(&m).unwrap();
        assert_eq!(message.question, Some(("a\\046\\001".into(), 16)));
    }
}
