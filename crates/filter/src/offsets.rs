//! tcpdump's byte offsets: relations between arithmetic expressions over the
//! packet's bytes, `proto[expr:size]`, `len` and numbers (`tcp[tcpflags] &
//! tcp-syn != 0`, `ip[2:2] - ((ip[0] & 0xf) << 2) > 40`), with the meaning
//! libpcap 1.10 compiles them to:
//!
//! - `ether[]` (or `link[]`) counts from the first byte of the frame; `ip[]`,
//!   `ip6[]` and `arp[]` from the network header after the link header (14 bytes
//!   of Ethernet, not counting VLAN tags; 16 of Linux SLL; 20 of SLL2; none for
//!   raw IP; 4 of BSD and OpenBSD loopback, PPP and Cisco HDLC; 8 of PPPoE; 24
//!   of Solaris ipnet), once the link header says the packet is one
//!   (ethertype, PPP protocol, address family, or the version nibble of raw
//!   IP); behind any other link header (802.11, radiotap, ...) whether such a
//!   relation holds is not known, and the search says so; `tcp[]`, `udp[]`, `icmp[]`, `igmp[]` and `sctp[]`
//!   from the transport header of an IPv4 packet of that protocol that is not a
//!   non-first fragment, after the IPv4 header length; `icmp6[]` 40 bytes after
//!   the start of an IPv6 header whose next header is 58.
//! - A relation whose layer is not in the packet is false (and its negation
//!   true). A load past the captured bytes, or a division by zero, rejects the
//!   packet whatever the rest of the filter says, as BPF does; where the bytes
//!   were captured but not kept (hindsight's snap length), the answer is not
//!   known and the search says so.
//! - Arithmetic is unsigned 32-bit; `|` binds loosest, then `&`, the shifts,
//!   `+` `-`, `*` `/`; `%` and `^` (which libpcap's grammar gives no precedence)
//!   take everything to their right as their right operand.

use std::fmt;

use hindsight_model::{LinkType, PacketRecord};

use super::ast::CmpOp;

/// Largest depth of an arithmetic expression's tree (a number is 1).
pub const MAX_ARITH_DEPTH: usize = 64;
/// Largest nesting of the text that writes one (operators and parentheses),
/// more than any printed form of a tree [`MAX_ARITH_DEPTH`] deep needs.
const MAX_TEXT_NESTING: usize = 4 * MAX_ARITH_DEPTH;

/// A protocol whose bytes an expression reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layer {
    /// `ether[]` / `link[]`: the frame from its first byte.
    Link,
    /// `ip[]`.
    Ip,
    /// `ip6[]`.
    Ip6,
    /// `arp[]` (also `rarp[]`, with its own ethertype).
    Arp,
    /// `rarp[]`.
    Rarp,
    /// `tcp[]`, `udp[]`, `icmp[]`, `igmp[]`, `sctp[]`: IPv4 transport headers.
    Transport(u8),
    /// `icmp6[]`.
    Icmp6,
}

impl Layer {
    fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "ether" | "link" => Layer::Link,
            "ip" => Layer::Ip,
            "ip6" => Layer::Ip6,
            "arp" => Layer::Arp,
            "rarp" => Layer::Rarp,
            "tcp" => Layer::Transport(6),
            "udp" => Layer::Transport(17),
            "icmp" => Layer::Transport(1),
            "igmp" => Layer::Transport(2),
            "sctp" => Layer::Transport(132),
            "icmp6" => Layer::Icmp6,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            Layer::Link => "ether",
            Layer::Ip => "ip",
            Layer::Ip6 => "ip6",
            Layer::Arp => "arp",
            Layer::Rarp => "rarp",
            Layer::Transport(6) => "tcp",
            Layer::Transport(17) => "udp",
            Layer::Transport(1) => "icmp",
            Layer::Transport(2) => "igmp",
            Layer::Transport(_) => "sctp",
            Layer::Icmp6 => "icmp6",
        }
    }
}

/// A binary arithmetic operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ArithOp {
    /// `|`
    Or,
    /// `&`
    And,
    /// `<<`
    Shl,
    /// `>>`
    Shr,
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/`
    Div,
    /// `%`
    Mod,
    /// `^`
    Xor,
}

impl ArithOp {
    fn symbol(self) -> &'static str {
        match self {
            ArithOp::Or => "|",
            ArithOp::And => "&",
            ArithOp::Shl => "<<",
            ArithOp::Shr => ">>",
            ArithOp::Add => "+",
            ArithOp::Sub => "-",
            ArithOp::Mul => "*",
            ArithOp::Div => "/",
            ArithOp::Mod => "%",
            ArithOp::Xor => "^",
        }
    }

    /// Binding strength in libpcap's grammar; `None` for `%` and `^`.
    fn precedence(self) -> Option<u8> {
        match self {
            ArithOp::Or => Some(1),
            ArithOp::And => Some(2),
            ArithOp::Shl | ArithOp::Shr => Some(3),
            ArithOp::Add | ArithOp::Sub => Some(4),
            ArithOp::Mul | ArithOp::Div => Some(5),
            ArithOp::Mod | ArithOp::Xor => None,
        }
    }
}

/// An arithmetic expression over a packet.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Arith {
    /// A number.
    Const(u32),
    /// `len`: the length of the packet on the wire.
    Len,
    /// `proto[offset:size]`, size 1, 2 or 4, big-endian.
    Load {
        /// Whose bytes.
        layer: Layer,
        /// Where, from the layer's first byte.
        offset: Box<Arith>,
        /// How many bytes.
        size: u8,
    },
    /// Unary minus.
    Neg(Box<Arith>),
    /// A binary operation.
    Binary(ArithOp, Box<Arith>, Box<Arith>),
}

/// `left OP right`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Relation {
    /// The left expression.
    pub left: Arith,
    /// The comparison (unsigned).
    pub op: CmpOp,
    /// The right expression.
    pub right: Arith,
}

/// Why a packet is rejected whatever the rest of the filter says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Abort {
    /// A load past the captured bytes, or a division by zero: BPF rejects.
    Reject,
    /// A load past the kept bytes of bytes that were captured: unknown.
    PastKept,
    /// A layer past a link header whose layout these offsets do not follow:
    /// unknown.
    Unsupported,
}

/// What evaluating an expression over one packet can end in.
type Eval<T> = Result<T, Abort>;

/// How a link type's header says which protocol follows it.
#[derive(Clone, Copy, Debug)]
enum Next {
    /// An ethertype, 16 bits at this offset.
    Ethertype(usize),
    /// A PPP protocol number, 16 bits at this offset (`0x0021` IPv4,
    /// `0x0057` IPv6, other ethertypes as themselves).
    Ppp(usize),
    /// A BSD address family, 32 bits at the start: in the writer's byte
    /// order (DLT_NULL, read either way as the decoder does) or in network
    /// byte order (DLT_LOOP).
    Family { network_order: bool },
    /// Solaris ipnet's address family byte at 1 (2 IPv4, 26 IPv6).
    Ipnet,
    /// No header: the IP version nibble.
    Version,
}

/// The link header of the link types whose byte offsets are defined, as
/// libpcap 1.10's code generator reads them (`init_linktype`,
/// `gen_linktype`): where the network header starts, and what says which
/// protocol it is. VLAN tags are not skipped (tcpdump's `vlan` does that).
fn link(link_type: LinkType) -> Option<(usize, Next)> {
    Some(match link_type.0 {
        1 => (14, Next::Ethertype(12)),
        113 => (16, Next::Ethertype(14)),
        276 => (20, Next::Ethertype(0)),
        12 | 14 | 101 | 228 | 229 => (0, Next::Version),
        0 => (
            4,
            Next::Family {
                network_order: false,
            },
        ),
        108 => (
            4,
            Next::Family {
                network_order: true,
            },
        ),
        // PPP, PPP_PPPD and PPP_SERIAL after `ff 03`; Cisco HDLC's
        // address and control, then an ethertype.
        9 | 50 | 166 => (4, Next::Ppp(2)),
        51 => (8, Next::Ppp(6)),
        104 | 112 => (4, Next::Ethertype(2)),
        226 => (24, Next::Ipnet),
        _ => return None,
    })
}

/// Where a layer starts in the frame without checking that the packet has it,
/// as libpcap computes it for the right operand of an arithmetic operator
/// (whose protocol check its code generator drops).
fn unchecked_start(
    layer: Layer,
    link_type: LinkType,
    frame: &[u8],
    cap_len: u32,
) -> Eval<Option<usize>> {
    if layer == Layer::Link {
        return Ok(Some(0));
    }
    let Some((ip, _)) = link(link_type) else {
        return Err(Abort::Unsupported);
    };
    Ok(Some(match layer {
        Layer::Transport(_) => ip + 4 * (load(frame, cap_len, ip, 1)? as usize & 0xf),
        Layer::Icmp6 => ip + 40,
        _ => ip,
    }))
}

/// Where a layer starts in the frame, if the packet has it.
fn layer_start(
    layer: Layer,
    link_type: LinkType,
    frame: &[u8],
    cap_len: u32,
) -> Eval<Option<usize>> {
    let byte = |at: usize, size: usize| load(frame, cap_len, at, size);
    if layer == Layer::Link {
        return Ok(Some(0));
    }
    // A layer past a link header whose layout is not followed here (802.11,
    // radiotap, ...): the answer is not known, and says so.
    let Some((start, next)) = link(link_type) else {
        return Err(Abort::Unsupported);
    };
    // The network header's start, if the link header says it is `ethertype`
    // (of IP `version`).
    let network = |ethertype: u32, version: u32| -> Eval<Option<usize>> {
        let is = match next {
            Next::Ethertype(at) => byte(at, 2)? == ethertype,
            Next::Ppp(at) => {
                let protocol = match ethertype {
                    0x0800 => 0x0021,
                    0x86dd => 0x0057,
                    other => other,
                };
                byte(at, 2)? == protocol
            }
            Next::Family { network_order } => {
                let word = byte(0, 4)?;
                let family = if network_order || word.swap_bytes() > 0xffff {
                    word
                } else {
                    word.swap_bytes()
                };
                match ethertype {
                    0x0800 => family == 2,
                    // NetBSD and OpenBSD, FreeBSD, Darwin.
                    0x86dd => matches!(family, 24 | 28 | 30),
                    _ => false,
                }
            }
            Next::Ipnet => match ethertype {
                0x0800 => byte(1, 1)? == 2,
                0x86dd => byte(1, 1)? == 26,
                _ => false,
            },
            Next::Version => version != 0 && byte(0, 1)? & 0xf0 == version << 4,
        };
        Ok(is.then_some(start))
    };
    match layer {
        Layer::Link => Ok(Some(0)),
        Layer::Ip => network(0x0800, 4),
        Layer::Ip6 => network(0x86dd, 6),
        Layer::Arp => network(0x0806, 0),
        Layer::Rarp => network(0x8035, 0),
        Layer::Icmp6 => {
            let Some(ip) = network(0x86dd, 6)? else {
                return Ok(None);
            };
            Ok((byte(ip + 6, 1)? == 58).then_some(ip + 40))
        }
        Layer::Transport(proto) => {
            let Some(ip) = network(0x0800, 4)? else {
                return Ok(None);
            };
            if byte(ip + 9, 1)? != u32::from(proto) || byte(ip + 6, 2)? & 0x1fff != 0 {
                return Ok(None);
            }
            Ok(Some(ip + 4 * (byte(ip, 1)? as usize & 0xf)))
        }
    }
}

/// The `size` bytes at `at`, big-endian; past the frame, a rejection (or
/// "unknown" where the source captured them and the archive did not keep them).
fn load(frame: &[u8], cap_len: u32, at: usize, size: usize) -> Eval<u32> {
    match frame.get(at..at.saturating_add(size)) {
        Some(bytes) => Ok(bytes
            .iter()
            .fold(0, |value, &b| (value << 8) | u32::from(b))),
        None if at.saturating_add(size) <= cap_len as usize => Err(Abort::PastKept),
        None => Err(Abort::Reject),
    }
}

impl Arith {
    /// The value over a packet; `None` where a layer it reads (and checks,
    /// `checked`) is not in the packet. libpcap checks the layers of a
    /// relation's two sides and of a load's offset, but of an arithmetic
    /// operator's left operand only.
    fn eval(&self, record: &PacketRecord, frame: &[u8], checked: bool) -> Eval<Option<u32>> {
        Ok(Some(match self {
            Arith::Const(value) => *value,
            Arith::Len => record.wire_len,
            Arith::Load {
                layer,
                offset,
                size,
            } => {
                let start = if checked {
                    layer_start(*layer, record.link_type, frame, record.cap_len)?
                } else {
                    unchecked_start(*layer, record.link_type, frame, record.cap_len)?
                };
                let Some(start) = start else {
                    return Ok(None);
                };
                let Some(offset) = offset.eval(record, frame, checked)? else {
                    return Ok(None);
                };
                let at = start.saturating_add(offset as usize);
                load(frame, record.cap_len, at, usize::from(*size))?
            }
            Arith::Neg(inner) => match inner.eval(record, frame, checked)? {
                Some(value) => value.wrapping_neg(),
                None => return Ok(None),
            },
            Arith::Binary(op, left, right) => {
                let (Some(a), Some(b)) = (
                    left.eval(record, frame, checked)?,
                    right.eval(record, frame, false)?,
                ) else {
                    return Ok(None);
                };
                match op {
                    ArithOp::Or => a | b,
                    ArithOp::And => a & b,
                    ArithOp::Xor => a ^ b,
                    ArithOp::Shl => a.checked_shl(b).unwrap_or(0),
                    ArithOp::Shr => a.checked_shr(b).unwrap_or(0),
                    ArithOp::Add => a.wrapping_add(b),
                    ArithOp::Sub => a.wrapping_sub(b),
                    ArithOp::Mul => a.wrapping_mul(b),
                    ArithOp::Div => a.checked_div(b).ok_or(Abort::Reject)?,
                    ArithOp::Mod => a.checked_rem(b).ok_or(Abort::Reject)?,
                }
            }
        }))
    }

    /// The depth of the expression's tree (a number is 1).
    fn depth(&self) -> usize {
        match self {
            Arith::Const(_) | Arith::Len => 1,
            Arith::Load { offset, .. } => 1 + offset.depth(),
            Arith::Neg(inner) => 1 + inner.depth(),
            Arith::Binary(_, left, right) => 1 + left.depth().max(right.depth()),
        }
    }

    /// Returns true if the expression reads the packet's bytes.
    fn reads_bytes(&self) -> bool {
        match self {
            Arith::Const(_) | Arith::Len => false,
            Arith::Load { .. } => true,
            Arith::Neg(inner) => inner.reads_bytes(),
            Arith::Binary(_, left, right) => left.reads_bytes() || right.reads_bytes(),
        }
    }
}

impl Relation {
    /// Evaluates the relation over a packet's bytes: false where a layer it
    /// reads is not in the packet.
    pub fn eval(&self, record: &PacketRecord, frame: &[u8]) -> Result<bool, Abort> {
        let (Some(a), Some(b)) = (
            self.left.eval(record, frame, true)?,
            self.right.eval(record, frame, true)?,
        ) else {
            return Ok(false);
        };
        Ok(self.op.holds(a, b))
    }

    /// Returns true if the relation reads the packet's bytes (not only `len`).
    pub fn reads_bytes(&self) -> bool {
        self.left.reads_bytes() || self.right.reads_bytes()
    }
}

impl fmt::Display for Arith {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Arith::Const(value) if *value < 10 => write!(f, "{value}"),
            Arith::Const(value) => write!(f, "0x{value:x}"),
            Arith::Len => f.write_str("len"),
            Arith::Load {
                layer,
                offset,
                size,
            } => match size {
                1 => write!(f, "{}[{offset}]", layer.name()),
                _ => write!(f, "{}[{offset}:{size}]", layer.name()),
            },
            Arith::Neg(inner) => write!(f, "-({inner})"),
            Arith::Binary(op, left, right) => {
                let operand = |f: &mut fmt::Formatter<'_>, side: &Arith| match side {
                    Arith::Binary(..) | Arith::Neg(_) => write!(f, "({side})"),
                    _ => write!(f, "{side}"),
                };
                operand(f, left)?;
                write!(f, " {} ", op.symbol())?;
                operand(f, right)
            }
        }
    }
}

impl fmt::Display for Relation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} {}", self.left, self.op.symbol(), self.right)
    }
}

/// libpcap's named constants (`pcap-filter(7)`).
const CONSTANTS: &[(&str, u32)] = &[
    ("icmptype", 0),
    ("icmpcode", 1),
    ("icmp-echoreply", 0),
    ("icmp-unreach", 3),
    ("icmp-sourcequench", 4),
    ("icmp-redirect", 5),
    ("icmp-echo", 8),
    ("icmp-routeradvert", 9),
    ("icmp-routersolicit", 10),
    ("icmp-timxceed", 11),
    ("icmp-paramprob", 12),
    ("icmp-tstamp", 13),
    ("icmp-tstampreply", 14),
    ("icmp-ireq", 15),
    ("icmp-ireqreply", 16),
    ("icmp-maskreq", 17),
    ("icmp-maskreply", 18),
    ("icmp6type", 0),
    ("icmp6code", 1),
    ("icmp6-destinationunreach", 1),
    ("icmp6-packettoobig", 2),
    ("icmp6-timeexceeded", 3),
    ("icmp6-parameterproblem", 4),
    ("icmp6-echo", 128),
    ("icmp6-echoreply", 129),
    ("icmp6-multicastlistenerquery", 130),
    ("icmp6-multicastlistenerreportv1", 131),
    ("icmp6-multicastlistenerdone", 132),
    ("icmp6-routersolicit", 133),
    ("icmp6-routeradvert", 134),
    ("icmp6-neighborsolicit", 135),
    ("icmp6-neighboradvert", 136),
    ("icmp6-redirect", 137),
    ("icmp6-routerrenum", 138),
    ("icmp6-nodeinformationquery", 139),
    ("icmp6-nodeinformationresponse", 140),
    ("icmp6-ineighbordiscoverysolicit", 141),
    ("icmp6-ineighbordiscoveryadvert", 142),
    ("icmp6-multicastlistenerreportv2", 143),
    ("icmp6-homeagentdiscoveryrequest", 144),
    ("icmp6-homeagentdiscoveryreply", 145),
    ("icmp6-mobileprefixsolicit", 146),
    ("icmp6-mobileprefixadvert", 147),
    ("icmp6-certpathsolicit", 148),
    ("icmp6-certpathadvert", 149),
    ("icmp6-multicastrouteradvert", 151),
    ("icmp6-multicastroutersolicit", 152),
    ("icmp6-multicastrouterterm", 153),
    ("tcpflags", 13),
    ("tcp-fin", 0x01),
    ("tcp-syn", 0x02),
    ("tcp-rst", 0x04),
    ("tcp-push", 0x08),
    ("tcp-ack", 0x10),
    ("tcp-urg", 0x20),
    ("tcp-ece", 0x40),
    ("tcp-cwr", 0x80),
];

/// One piece of an arithmetic relation's text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Piece<'a> {
    Number(&'a str),
    Name(&'a str),
    Op(&'a str),
}

/// Reads a relation from `text` at byte `start`: returns it and the byte where
/// it ends, or a message and the byte it concerns.
pub fn parse_relation(text: &str, start: usize) -> Result<(Relation, usize), (String, usize)> {
    let mut scanner = Scanner {
        text,
        at: start,
        depth: 0,
    };
    let left = scanner.arith(0)?;
    let op = match scanner.peek() {
        Some((Piece::Op(op), at)) => match op {
            "==" | "=" => CmpOp::Eq,
            "!=" => CmpOp::Ne,
            "<" => CmpOp::Lt,
            "<=" => CmpOp::Le,
            ">" => CmpOp::Gt,
            ">=" => CmpOp::Ge,
            _ => {
                return Err((
                    format!(
                        "\"{op}\" was unexpected here; expected a comparison (==, !=, <, <=, >, >=)"
                    ),
                    at,
                ));
            }
        },
        other => {
            let at = other.map_or(text.len(), |(_, at)| at);
            return Err((
                "expected a comparison (==, !=, <, <=, >, >=) after the expression".to_owned(),
                at,
            ));
        }
    };
    scanner.next();
    let right = scanner.arith(0)?;
    if left.depth().max(right.depth()) > MAX_ARITH_DEPTH {
        return Err((
            format!("the expression nests deeper than {MAX_ARITH_DEPTH} levels"),
            start,
        ));
    }
    Ok((Relation { left, op, right }, scanner.at))
}

struct Scanner<'a> {
    text: &'a str,
    at: usize,
    depth: usize,
}

impl<'a> Scanner<'a> {
    /// The next piece and where it starts, without taking it.
    fn peek(&self) -> Option<(Piece<'a>, usize)> {
        let rest = self.text.get(self.at..)?;
        let skipped = rest.len() - rest.trim_start().len();
        let start = self.at + skipped;
        let rest = &self.text[start..];
        let first = rest.chars().next()?;
        let len = if first.is_ascii_digit() {
            rest.find(|c: char| !c.is_ascii_alphanumeric())
                .unwrap_or(rest.len())
        } else if first.is_ascii_alphabetic() {
            rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.'))
                .unwrap_or(rest.len())
        } else {
            let two = rest.get(..2).unwrap_or("");
            if matches!(two, "<<" | ">>" | "<=" | ">=" | "==" | "!=" | "&&" | "||") {
                2
            } else {
                first.len_utf8()
            }
        };
        let piece = &rest[..len];
        Some((
            if first.is_ascii_digit() {
                Piece::Number(piece)
            } else if first.is_ascii_alphabetic() {
                Piece::Name(piece)
            } else {
                Piece::Op(piece)
            },
            start,
        ))
    }

    fn next(&mut self) -> Option<(Piece<'a>, usize)> {
        let piece = self.peek()?;
        let len = match piece.0 {
            Piece::Number(text) | Piece::Name(text) | Piece::Op(text) => text.len(),
        };
        self.at = piece.1 + len;
        Some(piece)
    }

    fn binary_op(&self) -> Option<ArithOp> {
        match self.peek()?.0 {
            Piece::Op("|") => Some(ArithOp::Or),
            Piece::Op("&") => Some(ArithOp::And),
            Piece::Op("<<") => Some(ArithOp::Shl),
            Piece::Op(">>") => Some(ArithOp::Shr),
            Piece::Op("+") => Some(ArithOp::Add),
            Piece::Op("-") => Some(ArithOp::Sub),
            Piece::Op("*") => Some(ArithOp::Mul),
            Piece::Op("/") => Some(ArithOp::Div),
            Piece::Op("%") => Some(ArithOp::Mod),
            Piece::Op("^") => Some(ArithOp::Xor),
            _ => None,
        }
    }

    fn deeper(&mut self) -> Result<(), (String, usize)> {
        self.depth += 1;
        if self.depth > MAX_TEXT_NESTING {
            return Err((
                format!("the expression nests deeper than {MAX_ARITH_DEPTH} levels"),
                self.at,
            ));
        }
        Ok(())
    }

    /// Precedence climbing over the declared operators.
    fn arith(&mut self, min: u8) -> Result<Arith, (String, usize)> {
        self.deeper()?;
        let mut left = self.operand()?;
        while let Some(op) = self.binary_op() {
            let Some(precedence) = op.precedence() else {
                break;
            };
            if precedence < min {
                break;
            }
            self.next();
            let right = self.arith(precedence + 1)?;
            left = Arith::Binary(op, Box::new(left), Box::new(right));
        }
        self.depth -= 1;
        Ok(left)
    }

    /// An operand, and with it a `%` or `^` that follows it: libpcap's grammar
    /// gives them no precedence, so everything to their right is theirs.
    fn operand(&mut self) -> Result<Arith, (String, usize)> {
        let primary = self.primary()?;
        match self.binary_op() {
            Some(op @ (ArithOp::Mod | ArithOp::Xor)) => {
                self.next();
                let right = self.arith(0)?;
                Ok(Arith::Binary(op, Box::new(primary), Box::new(right)))
            }
            _ => Ok(primary),
        }
    }

    fn primary(&mut self) -> Result<Arith, (String, usize)> {
        let Some((piece, at)) = self.next() else {
            return Err((
                "expected a number, len or proto[offset]".to_owned(),
                self.text.len(),
            ));
        };
        match piece {
            Piece::Number(text) => parse_number(text)
                .map(Arith::Const)
                .ok_or_else(|| (format!("\"{text}\" is not a number"), at)),
            Piece::Op("-") => {
                self.deeper()?;
                let inner = self.operand()?;
                self.depth -= 1;
                Ok(Arith::Neg(Box::new(inner)))
            }
            Piece::Op("(") => {
                let inner = self.arith(0)?;
                match self.next() {
                    Some((Piece::Op(")"), _)) => Ok(inner),
                    other => Err((
                        "expected \")\" to close the expression".to_owned(),
                        other.map_or(self.text.len(), |(_, at)| at),
                    )),
                }
            }
            Piece::Name("len") => Ok(Arith::Len),
            Piece::Name(name) => {
                if let Some(layer) = Layer::from_name(name)
                    && let Some((Piece::Op("["), _)) = self.peek()
                {
                    self.next();
                    return self.load(layer);
                }
                CONSTANTS
                    .iter()
                    .find(|(known, _)| *known == name)
                    .map(|(_, value)| Arith::Const(*value))
                    .ok_or_else(|| {
                        (
                            format!(
                                "\"{name}\" is not a number, len, a named constant or proto[offset]"
                            ),
                            at,
                        )
                    })
            }
            Piece::Op(op) => Err((
                format!("\"{op}\" was unexpected here; expected a number, len or proto[offset]"),
                at,
            )),
        }
    }

    /// The rest of `proto[offset]` or `proto[offset:size]`.
    fn load(&mut self, layer: Layer) -> Result<Arith, (String, usize)> {
        let offset = self.arith(0)?;
        let size = match self.next() {
            Some((Piece::Op("]"), _)) => 1,
            Some((Piece::Op(":"), _)) => {
                let size = match self.next() {
                    Some((Piece::Number(text), at)) => match parse_number(text) {
                        Some(size @ (1 | 2 | 4)) => size as u8,
                        _ => {
                            return Err((
                                format!("the size of a load is 1, 2 or 4 bytes, not \"{text}\""),
                                at,
                            ));
                        }
                    },
                    other => {
                        return Err((
                            "expected a size of 1, 2 or 4 bytes after \":\"".to_owned(),
                            other.map_or(self.text.len(), |(_, at)| at),
                        ));
                    }
                };
                match self.next() {
                    Some((Piece::Op("]"), _)) => size,
                    other => {
                        return Err((
                            "expected \"]\"".to_owned(),
                            other.map_or(self.text.len(), |(_, at)| at),
                        ));
                    }
                }
            }
            other => {
                return Err((
                    "expected \"]\" or \":size]\"".to_owned(),
                    other.map_or(self.text.len(), |(_, at)| at),
                ));
            }
        };
        Ok(Arith::Load {
            layer,
            offset: Box::new(offset),
            size,
        })
    }
}

/// A number as libpcap reads one: decimal, `0x` hexadecimal, `0` octal.
fn parse_number(text: &str) -> Option<u32> {
    if let Some(hex) = text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        u32::from_str_radix(hex, 16).ok()
    } else if text.len() > 1 && text.starts_with('0') {
        u32::from_str_radix(&text[1..], 8).ok()
    } else {
        text.parse().ok()
    }
}
