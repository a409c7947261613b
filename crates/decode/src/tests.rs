//! Table-driven tests of the decoder on hand-built frames.

use hindsight_model::{Addr16, DecodeStatus, LinkType, PacketHeaders};

use super::decode;

const MAC_A: [u8; 6] = [0x00, 0x11, 0x22, 0x33, 0x44, 0x55];
const MAC_B: [u8; 6] = [0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb];

fn eth(kind: u16, tags: &[(u16, u16)], payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend(MAC_B);
    out.extend(MAC_A);
    for &(tpid, vid) in tags {
        out.extend(tpid.to_be_bytes());
        out.extend(vid.to_be_bytes());
    }
    out.extend(kind.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

fn ipv4(proto: u8, flags_offset: u16, options: &[u8], payload: &[u8]) -> Vec<u8> {
    let header_len = 20 + options.len();
    // DSCP 46 (expedited forwarding), ECN 1.
    let mut out = vec![0x40 | (header_len / 4) as u8, 0xb9];
    out.extend(((header_len + payload.len()) as u16).to_be_bytes());
    out.extend(0x1234u16.to_be_bytes());
    out.extend(flags_offset.to_be_bytes());
    out.extend([64, proto, 0, 0, 10, 0, 0, 1, 192, 168, 1, 2]);
    out.extend_from_slice(options);
    out.extend_from_slice(payload);
    out
}

fn ipv6(next: u8, extensions: &[u8], payload: &[u8]) -> Vec<u8> {
    // Traffic class 0xb8: DSCP 46.
    let mut out = vec![0x6b, 0x80, 0, 0];
    out.extend(((extensions.len() + payload.len()) as u16).to_be_bytes());
    out.extend([next, 33]);
    out.extend(
        "2001:db8::1"
            .parse::<std::net::Ipv6Addr>()
            .unwrap()
            .octets(),
    );
    out.extend(
        "2001:db8::2"
            .parse::<std::net::Ipv6Addr>()
            .unwrap()
            .octets(),
    );
    out.extend_from_slice(extensions);
    out.extend_from_slice(payload);
    out
}

fn tcp(src: u16, dst: u16, flags: u16) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend(src.to_be_bytes());
    out.extend(dst.to_be_bytes());
    out.extend([0; 8]);
    out.extend((0x5000 | flags).to_be_bytes());
    out.extend([0; 6]);
    out
}

fn udp(src: u16, dst: u16) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend(src.to_be_bytes());
    out.extend(dst.to_be_bytes());
    out.extend([0, 8, 0, 0]);
    out
}

fn v4(a: u8, b: u8, c: u8, d: u8) -> Option<Addr16> {
    Some(Addr16::from_v4_bytes([a, b, c, d]))
}

fn v6(text: &str) -> Option<Addr16> {
    Some(Addr16::from(text.parse::<std::net::IpAddr>().unwrap()))
}

#[test]
fn ethernet_ipv4_tcp() {
    let frame = eth(0x0800, &[], &ipv4(6, 0x4000, &[], &tcp(443, 51000, 0x012)));
    let h = decode(LinkType::ETHERNET, &frame);
    assert_eq!(
        h,
        PacketHeaders {
            status: DecodeStatus::Complete,
            src_mac: Some(MAC_A),
            dst_mac: Some(MAC_B),
            eth_type: Some(0x0800),
            ip_version: Some(4),
            src_addr: v4(10, 0, 0, 1),
            dst_addr: v4(192, 168, 1, 2),
            ip_proto: Some(6),
            ip_ttl: Some(64),
            ip_dscp: Some(46),
            ip_len: Some(40),
            ip_id: Some(0x1234),
            frag_offset: Some(0),
            more_fragments: Some(false),
            dont_fragment: Some(true),
            src_port: Some(443),
            dst_port: Some(51000),
            tcp_flags: Some(0x012),
            ..PacketHeaders::default()
        }
    );
}

/// A named frame of a link type and what its decoded headers must satisfy.
type Case = (&'static str, LinkType, Vec<u8>, fn(&PacketHeaders) -> bool);

#[test]
fn table_of_frames() {
    let ip_udp = ipv4(17, 0, &[], &udp(53, 5353));
    let ipnet = |family: u8, payload: &[u8]| {
        let mut frame = vec![1, family];
        frame.extend_from_slice(&[0; 22]);
        frame.extend_from_slice(payload);
        frame
    };
    let cases: Vec<Case> = vec![
        ("ipnet ipv4", LinkType::IPNET, ipnet(2, &ip_udp), |h| {
            h.ip_version == Some(4) && h.dst_port == Some(5353)
        }),
        (
            "ipnet ipv6",
            LinkType::IPNET,
            ipnet(26, &ipv6(17, &[], &udp(547, 546))),
            |h| h.ip_version == Some(6) && h.src_port == Some(547),
        ),
        (
            "ipnet other family",
            LinkType::IPNET,
            ipnet(7, &ip_udp),
            |h| h.status == DecodeStatus::NonIp,
        ),
        (
            "vlan",
            LinkType::ETHERNET,
            eth(0x0800, &[(0x8100, 0x2064)], &ip_udp),
            |h| h.vlan_outer == Some(100) && h.vlan_inner.is_none() && h.dst_port == Some(5353),
        ),
        (
            "qinq",
            LinkType::ETHERNET,
            eth(0x0800, &[(0x88a8, 10), (0x8100, 20)], &ip_udp),
            |h| h.vlan_outer == Some(10) && h.vlan_inner == Some(20) && h.src_port == Some(53),
        ),
        (
            "ipv4 options",
            LinkType::ETHERNET,
            eth(
                0x0800,
                &[],
                &ipv4(6, 0, &[1, 1, 1, 1, 1, 1, 1, 0], &tcp(1, 2, 0x10)),
            ),
            |h| {
                h.src_port == Some(1)
                    && h.tcp_flags == Some(0x10)
                    && h.status == DecodeStatus::Complete
            },
        ),
        (
            "first fragment",
            LinkType::ETHERNET,
            eth(0x0800, &[], &ipv4(17, 0x2000, &[], &udp(7, 9))),
            |h| {
                h.more_fragments == Some(true)
                    && h.dst_port == Some(9)
                    && h.status == DecodeStatus::Complete
            },
        ),
        (
            "later fragment",
            LinkType::ETHERNET,
            eth(0x0800, &[], &ipv4(17, 185, &[], &udp(7, 9))),
            |h| {
                h.frag_offset == Some(185)
                    && h.dst_port.is_none()
                    && h.status == DecodeStatus::Fragment
            },
        ),
        (
            "arp",
            LinkType::ETHERNET,
            eth(
                0x0806,
                &[],
                &[
                    0, 1, 8, 0, 6, 4, 0, 1, 1, 2, 3, 4, 5, 6, 10, 9, 8, 7, 0, 0, 0, 0, 0, 0, 10, 9,
                    8, 1,
                ],
            ),
            |h| {
                h.status == DecodeStatus::NonIp
                    && h.src_addr == v4(10, 9, 8, 7)
                    && h.dst_addr == v4(10, 9, 8, 1)
                    && h.ip_version.is_none()
            },
        ),
        (
            "llc",
            LinkType::ETHERNET,
            eth(0x0026, &[], &[0x42, 0x42, 3]),
            |h| h.status == DecodeStatus::NonIp && h.eth_type.is_none() && h.src_mac == Some(MAC_A),
        ),
        (
            "lldp",
            LinkType::ETHERNET,
            eth(0x88cc, &[], &[0; 10]),
            |h| h.status == DecodeStatus::NonIp && h.eth_type == Some(0x88cc),
        ),
        ("raw ipv4", LinkType::RAW, ip_udp.clone(), |h| {
            h.eth_type == Some(0x0800) && h.src_port == Some(53)
        }),
        ("raw ipv6", LinkType(229), ipv6(17, &[], &udp(1, 2)), |h| {
            h.ip_version == Some(6) && h.ip_dscp == Some(46) && h.dst_port == Some(2)
        }),
        ("raw garbage", LinkType::RAW, vec![0x95, 0, 0], |h| {
            h.status == DecodeStatus::Malformed
        }),
        (
            "null le",
            LinkType::NULL,
            [&2u32.to_le_bytes()[..], &ip_udp].concat(),
            |h| h.ip_version == Some(4),
        ),
        (
            "null be ipv6",
            LinkType::NULL,
            [&30u32.to_be_bytes()[..], &ipv6(6, &[], &tcp(1, 2, 2))].concat(),
            |h| h.ip_version == Some(6) && h.tcp_flags == Some(2),
        ),
        (
            "loop",
            LinkType::LOOP,
            [&24u32.to_be_bytes()[..], &ipv6(58, &[], &[128, 0, 0, 0])].concat(),
            |h| h.icmp_type == Some(128) && h.icmp_code == Some(0),
        ),
        (
            "sll",
            LinkType::LINUX_SLL,
            [&[0, 0, 0, 1, 0, 6][..], &MAC_A, &[0, 0, 8, 0], &ip_udp].concat(),
            |h| h.src_mac == Some(MAC_A) && h.src_port == Some(53),
        ),
        (
            "sll2",
            LinkType::LINUX_SLL2,
            [
                &[0x86, 0xdd, 0, 0, 0, 0, 0, 2, 0, 1, 0, 6][..],
                &MAC_B,
                &[0, 0],
                &ipv6(17, &[], &udp(3, 4)),
            ]
            .concat(),
            |h| {
                h.src_mac == Some(MAC_B) && h.dst_port == Some(4) && h.dst_addr == v6("2001:db8::2")
            },
        ),
        (
            "ipv6 extension chain",
            LinkType::ETHERNET,
            eth(
                0x86dd,
                &[],
                &ipv6(
                    0,
                    &[
                        43, 0, 0, 0, 0, 0, 0, 0, 44, 0, 0, 0, 0, 0, 0, 0, 60, 0, 0, 1, 0, 0, 0, 5,
                        6, 0, 0, 0, 0, 0, 0, 0,
                    ],
                    &tcp(22, 2222, 0x18),
                ),
            ),
            |h| {
                h.ip_proto == Some(6)
                    && h.src_port == Some(22)
                    && h.ip_id == Some(5)
                    && h.frag_offset == Some(0)
                    && h.more_fragments == Some(true)
            },
        ),
        (
            "ipv6 later fragment",
            LinkType::ETHERNET,
            eth(
                0x86dd,
                &[],
                &ipv6(44, &[17, 0, 0x05, 0x00, 0, 0, 0, 9], &[1, 2, 3]),
            ),
            |h| {
                h.status == DecodeStatus::Fragment
                    && h.ip_proto == Some(17)
                    && h.frag_offset == Some(160)
                    && h.src_port.is_none()
            },
        ),
        (
            "ipv6 ah",
            LinkType::ETHERNET,
            eth(
                0x86dd,
                &[],
                &ipv6(51, &[17, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], &udp(500, 4500)),
            ),
            |h| h.ip_proto == Some(17) && h.dst_port == Some(4500),
        ),
        (
            "ipv6 esp stops",
            LinkType::ETHERNET,
            eth(0x86dd, &[], &ipv6(50, &[], &[0; 16])),
            |h| {
                h.ip_proto == Some(50) && h.src_port.is_none() && h.status == DecodeStatus::Complete
            },
        ),
        (
            "icmp",
            LinkType::ETHERNET,
            eth(0x0800, &[], &ipv4(1, 0, &[], &[3, 3, 0, 0])),
            |h| h.icmp_type == Some(3) && h.icmp_code == Some(3),
        ),
        (
            "sctp",
            LinkType::ETHERNET,
            eth(
                0x0800,
                &[],
                &ipv4(132, 0, &[], &[0, 80, 0, 81, 0, 0, 0, 0, 0, 0, 0, 0]),
            ),
            |h| h.src_port == Some(80) && h.dst_port == Some(81) && h.tcp_flags.is_none(),
        ),
        (
            "gre not followed",
            LinkType::ETHERNET,
            eth(0x0800, &[], &ipv4(47, 0, &[], &[0; 8])),
            |h| h.ip_proto == Some(47) && h.src_port.is_none(),
        ),
        (
            "bad ipv4 version",
            LinkType::ETHERNET,
            eth(0x0800, &[], &[0x55; 20]),
            |h| h.status == DecodeStatus::Malformed,
        ),
        (
            "bad ihl",
            LinkType::ETHERNET,
            eth(0x0800, &[], &{
                let mut p = ipv4(6, 0, &[], &tcp(1, 2, 2));
                p[0] = 0x43;
                p
            }),
            |h| {
                h.status == DecodeStatus::Malformed
                    && h.src_addr == v4(10, 0, 0, 1)
                    && h.src_port.is_none()
            },
        ),
        ("unknown link", LinkType(147), vec![1, 2, 3], |h| {
            h.status == DecodeStatus::UnsupportedLinkType
        }),
    ];
    for (name, link, frame, check) in cases {
        let h = decode(link, &frame);
        assert!(check(&h), "{name}: {h:?}");
    }
}

#[test]
fn ethernet_padding_is_not_transport_data() {
    // A 40-byte IPv4/TCP... cut to total length 24: only 4 bytes of TCP belong to it.
    let mut packet = ipv4(6, 0, &[], &tcp(1, 2, 0x10));
    packet[2..4].copy_from_slice(&24u16.to_be_bytes());
    let h = decode(LinkType::ETHERNET, &eth(0x0800, &[], &packet));
    assert_eq!(
        (h.src_port, h.tcp_flags, h.status),
        (Some(1), None, DecodeStatus::Truncated)
    );
}

fn filled(h: &PacketHeaders) -> usize {
    [
        h.src_mac.is_some(),
        h.dst_mac.is_some(),
        h.eth_type.is_some(),
        h.vlan_outer.is_some(),
        h.ip_version.is_some(),
        h.src_addr.is_some(),
        h.dst_addr.is_some(),
        h.ip_proto.is_some(),
        h.ip_ttl.is_some(),
        h.ip_id.is_some(),
        h.frag_offset.is_some(),
        h.src_port.is_some(),
        h.dst_port.is_some(),
        h.tcp_flags.is_some(),
        h.icmp_type.is_some(),
    ]
    .iter()
    .filter(|&&b| b)
    .count()
}

#[test]
fn longer_prefixes_never_know_less() {
    let frames = [
        eth(
            0x0800,
            &[(0x8100, 5)],
            &ipv4(6, 0, &[], &tcp(80, 8080, 0x011)),
        ),
        eth(
            0x86dd,
            &[],
            &ipv6(0, &[6, 0, 0, 0, 0, 0, 0, 0], &tcp(80, 8080, 0x011)),
        ),
        eth(0x0800, &[], &ipv4(1, 0, &[], &[8, 0, 0, 0])),
    ];
    for frame in frames {
        let mut previous = 0;
        for cut in 0..=frame.len() {
            let h = decode(LinkType::ETHERNET, &frame[..cut]);
            let now = filled(&h);
            assert!(now >= previous, "cut {cut}: {h:?}");
            previous = now;
            if cut < frame.len() && h.status == DecodeStatus::Complete {
                // Only the tail of a transport header may be missing while complete.
                assert!(
                    h.src_port.is_some() || h.icmp_type.is_some(),
                    "cut {cut}: {h:?}"
                );
            }
        }
        assert_eq!(
            decode(LinkType::ETHERNET, &frame).status,
            DecodeStatus::Complete
        );
    }
}
