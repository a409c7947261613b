//! Table tests of the filter language: valid filters with their printed tree,
//! invalid filters with the column and message of the error, evaluation on
//! hand-built records, and property tests of printing and pruning.

use std::net::IpAddr;

use hindsight_model::{Addr16, DecodeStatus, LinkType, PacketHeaders, PacketRecord, tcp_flags};

use super::*;

/// Parses `text` or fails the test with the error as it would be shown.
fn parse(text: &str) -> Filter {
    Filter::parse(text).unwrap_or_else(|error| panic!("{text:?} does not parse:\n{error}"))
}

fn printed(text: &str) -> String {
    parse(text).to_string()
}

#[test]
fn valid_wireshark_filters_print_their_tree() {
    let cases: &[(&str, &str)] = &[
        ("", ""),
        ("  \t\n", ""),
        ("tcp", "tcp"),
        ("frame", "frame"),
        ("ip.src", "ip.src"),
        ("ip.addr == 10.0.0.1", "ip.addr == 10.0.0.1"),
        ("ip.addr eq 10.0.0.1", "ip.addr == 10.0.0.1"),
        ("ip.addr any_eq 10.0.0.1", "ip.addr == 10.0.0.1"),
        ("ip.addr != 10.0.0.1", "ip.addr != 10.0.0.1"),
        ("ip.addr ne 10.0.0.1", "ip.addr != 10.0.0.1"),
        ("ip.addr all_ne 10.0.0.1", "ip.addr != 10.0.0.1"),
        ("ip.addr !== 10.0.0.1", "ip.addr !== 10.0.0.1"),
        ("ip.addr ~= 10.0.0.1", "ip.addr !== 10.0.0.1"),
        ("ip.addr any_ne 10.0.0.1", "ip.addr !== 10.0.0.1"),
        ("ip.addr === 10.0.0.1", "ip.addr === 10.0.0.1"),
        ("ip.addr all_eq 10.0.0.1", "ip.addr === 10.0.0.1"),
        ("any ip.addr != 10.0.0.1", "ip.addr !== 10.0.0.1"),
        ("all ip.addr == 10.0.0.1", "ip.addr === 10.0.0.1"),
        ("all tcp.port > 1024", "all tcp.port > 1024"),
        ("any tcp.port > 1024", "tcp.port > 1024"),
        ("tcp.port >= 0x400", "tcp.port >= 1024"),
        ("frame.len lt 010", "frame.len < 8"),
        ("frame.len le 0b11", "frame.len <= 3"),
        ("frame.len gt 0X10", "frame.len > 16"),
        ("frame.len ge 4294967295", "frame.len >= 4294967295"),
        (
            "ip.src==10.0.0.1&&tcp.port==80",
            "(ip.src == 10.0.0.1 && tcp.port == 80)",
        ),
        // Precedence: not, and, xor, or.
        ("tcp and udp or icmp", "((tcp && udp) || icmp)"),
        ("tcp or udp and icmp", "(tcp || (udp && icmp))"),
        ("not tcp and udp", "(!tcp && udp)"),
        ("!tcp.port == 80", "!(tcp.port == 80)"),
        ("not ip.dst eq 224.1.2.3", "!(ip.dst == 224.1.2.3)"),
        ("tcp ^^ udp or arp", "((tcp ^^ udp) || arp)"),
        ("tcp || udp ^^ arp && ip", "(tcp || (udp ^^ (arp && ip)))"),
        ("tcp xor udp xor arp", "(tcp ^^ udp ^^ arp)"),
        ("tcp && udp && arp || ip", "((tcp && udp && arp) || ip)"),
        // The example of wireshark-filter(4): "(A and B) or (not C) or (D and (not E)) or F".
        (
            "tcp and udp or not icmp or arp and not ip or ipv6",
            "((tcp && udp) || !icmp || (arp && !ip) || ipv6)",
        ),
        ("not not tcp", "!!tcp"),
        ("!(tcp || udp)", "!(tcp || udp)"),
        ("((tcp))", "tcp"),
        ("(tcp && udp) && arp", "((tcp && udp) && arp)"),
        (
            "tcp.port in {80 443 8000..8004}",
            "tcp.port in {80, 443, 8000..8004}",
        ),
        ("tcp.port in {80, 443}", "tcp.port in {80, 443}"),
        (
            "tcp.port in {80 .. 90,100.. 110}",
            "tcp.port in {80..90, 100..110}",
        ),
        ("tcp.port not in {80}", "!(tcp.port in {80})"),
        ("all udp.port in {53, 5353}", "all udp.port in {53, 5353}"),
        (
            "ip.addr in {10.0.0.5 .. 10.0.0.9, 192.168.0.0/16}",
            "ip.addr in {10.0.0.5..10.0.0.9, 192.168.0.0/16}",
        ),
        ("ip.addr == 10.64.88.105/24", "ip.addr == 10.64.88.0/24"),
        ("ip.addr == 10.64.88.105/32", "ip.addr == 10.64.88.105"),
        ("ip.addr != 0.0.0.0/0", "ip.addr != 0.0.0.0/0"),
        ("ipv6.addr == 2001:DB8::/32", "ipv6.addr == 2001:db8::/32"),
        ("ipv6.src == ::1", "ipv6.src == ::1"),
        ("ipv6.dst == ::ffff:10.0.0.1", "ipv6.dst == ::ffff:10.0.0.1"),
        (
            "eth.addr == AA-BB-CC-DD-EE-FF",
            "eth.addr == aa:bb:cc:dd:ee:ff",
        ),
        ("eth.src == aabb.ccdd.eeff", "eth.src == aa:bb:cc:dd:ee:ff"),
        ("eth.dst == ffffffffffff", "eth.dst == ff:ff:ff:ff:ff:ff"),
        ("eth.type == 0x0806", "eth.type == 2054"),
        ("tcp.flags.syn == True", "tcp.flags.syn == 1"),
        ("tcp.flags.syn == false", "tcp.flags.syn == 0"),
        ("tcp.flags.syn == 2", "tcp.flags.syn == 1"),
        ("tcp.flags.ns", "tcp.flags.ae"),
        ("tcp.flags & 0x12 == 0x12", "tcp.flags & 0x12 == 18"),
        ("tcp.flags bitwise_and 2", "tcp.flags & 0x2"),
        (
            "tcp.flags & 0x02 && !tcp.flags.ack",
            "(tcp.flags & 0x2 && !tcp.flags.ack)",
        ),
        ("vlan.id in {100, 200}", "vlan.id in {100, 200}"),
        (
            "ip.frag_offset > 0 or ip.flags.mf",
            "(ip.frag_offset > 0 || ip.flags.mf)",
        ),
        (
            "icmp.type == 3 && icmp.code == 3",
            "(icmp.type == 3 && icmp.code == 3)",
        ),
    ];
    for (input, expected) in cases {
        assert_eq!(printed(input), *expected, "input {input:?}");
        let reparsed = Filter::parse_with(expected, FilterSyntax::Wireshark)
            .unwrap_or_else(|error| panic!("printed form of {input:?} does not parse:\n{error}"));
        assert_eq!(reparsed.to_string(), *expected, "round trip of {input:?}");
    }
}

#[test]
fn valid_tcpdump_filters_print_their_translation() {
    let host = |addr: &str| {
        format!(
            "(ip.addr == {addr} || arp.src.proto_ipv4 == {addr} || arp.dst.proto_ipv4 == {addr})"
        )
    };
    let port = |n: u16| format!("(tcp.port == {n} || udp.port == {n} || sctp.port == {n})");
    let cases: Vec<(&str, String)> = vec![
        ("host 10.0.0.1", host("10.0.0.1")),
        ("10.0.0.1", host("10.0.0.1")),
        (
            "src host 10.0.0.1",
            "(ip.src == 10.0.0.1 || arp.src.proto_ipv4 == 10.0.0.1)".into(),
        ),
        (
            "dst 10.0.0.1",
            "(ip.dst == 10.0.0.1 || arp.dst.proto_ipv4 == 10.0.0.1)".into(),
        ),
        ("src or dst host 10.0.0.1", host("10.0.0.1")),
        (
            "src and dst host 10.0.0.1",
            "((ip.src == 10.0.0.1 && ip.dst == 10.0.0.1) || (arp.src.proto_ipv4 == 10.0.0.1 && arp.dst.proto_ipv4 == 10.0.0.1))".into(),
        ),
        ("ip host 10.0.0.1", "ip.addr == 10.0.0.1".into()),
        (
            "arp host 10.0.0.1",
            "(arp.src.proto_ipv4 == 10.0.0.1 || arp.dst.proto_ipv4 == 10.0.0.1)".into(),
        ),
        ("host 2001:db8::1", "ipv6.addr == 2001:db8::1".into()),
        ("ip6 src host 2001:db8::1", "ipv6.src == 2001:db8::1".into()),
        (
            "host 10.0.0.1 or 10.0.0.2",
            format!("({} || {})", host("10.0.0.1"), host("10.0.0.2")),
        ),
        (
            "host 10.0.0.1 and not 10.0.0.2",
            format!("({} && !{})", host("10.0.0.1"), host("10.0.0.2")),
        ),
        ("net 10.64", host("10.64.0.0/16")),
        ("net 10", host("10.0.0.0/8")),
        ("net 10.64.88", host("10.64.88.0/24")),
        ("net 10.64.88.0/24", host("10.64.88.0/24")),
        ("net 10.0.0.0 mask 255.0.0.0", host("10.0.0.0/8")),
        ("dst net 2001:db8::/32", "ipv6.dst == 2001:db8::/32".into()),
        ("port 80", port(80)),
        ("port 53 or 67", format!("({} || {})", port(53), port(67))),
        ("tcp port 80 or 443", "(tcp.port == 80 || tcp.port == 443)".into()),
        ("udp dst port 53", "udp.dstport == 53".into()),
        (
            "src port 10050",
            "(tcp.srcport == 10050 || udp.srcport == 10050 || sctp.srcport == 10050)".into(),
        ),
        (
            "tcp src and dst port 80",
            "(tcp.srcport == 80 && tcp.dstport == 80)".into(),
        ),
        (
            "portrange 1000-1010",
            "(tcp.port in {1000..1010} || udp.port in {1000..1010} || sctp.port in {1000..1010})".into(),
        ),
        ("tcp portrange 20-10", "tcp.port in {10..20}".into()),
        ("ip port 80", format!("(ip && {})", port(80))),
        (
            "tcp and not port 22",
            format!("((ip.proto == 6 || ipv6.nxt == 6) && !{})", port(22)),
        ),
        ("icmp6", "ipv6.nxt == 58".into()),
        ("ip6", "ipv6".into()),
        ("ip6 or arp", "(ipv6 || arp)".into()),
        ("ip6 or igmp", "(ipv6 || ip.proto == 2)".into()),
        ("vlan 100", "vlan.id == 100".into()),
        ("less 128", "frame.len <= 128".into()),
        ("greater 1000", "frame.len >= 1000".into()),
        ("ether host aa:bb:cc:dd:ee:ff", "eth.addr == aa:bb:cc:dd:ee:ff".into()),
        ("ether src aa:bb:cc:dd:ee:ff", "eth.src == aa:bb:cc:dd:ee:ff".into()),
        ("ether dst aa-bb-cc-dd-ee-ff", "eth.dst == aa:bb:cc:dd:ee:ff".into()),
        ("ether proto 0x0806", "eth.type == 2054".into()),
        ("ether proto \\arp", "eth.type == 2054".into()),
        ("ether broadcast", "eth.dst == ff:ff:ff:ff:ff:ff".into()),
        ("broadcast", "eth.dst == ff:ff:ff:ff:ff:ff".into()),
        ("ether multicast", "eth.dst.ig == 1".into()),
        ("multicast and udp", "(eth.dst.ig == 1 && (ip.proto == 17 || ipv6.nxt == 17))".into()),
        ("ip proto \\tcp", "ip.proto == 6".into()),
        ("ip proto 17 or 6", "(ip.proto == 17 || ip.proto == 6)".into()),
        ("proto 132", "(ip.proto == 132 || ipv6.nxt == 132)".into()),
        ("ip6 proto 58", "ipv6.nxt == 58".into()),
        // libpcap: "and" and "or" have equal precedence and group left to right.
        (
            "udp or arp and host 10.0.0.1",
            format!("(((ip.proto == 17 || ipv6.nxt == 17) || arp) && {})", host("10.0.0.1")),
        ),
        (
            "not host 10.0.0.1 && ! port 80",
            format!("(!{} && !{})", host("10.0.0.1"), port(80)),
        ),
        ("(tcp port 80)", "tcp.port == 80".into()),
    ];
    for (input, expected) in &cases {
        let filter = parse(input);
        assert_eq!(filter.syntax(), FilterSyntax::Bpf, "syntax of {input:?}");
        assert_eq!(filter.to_string(), *expected, "input {input:?}");
        let reparsed = Filter::parse_with(expected, FilterSyntax::Wireshark)
            .unwrap_or_else(|error| panic!("printed form of {input:?} does not parse:\n{error}"));
        assert_eq!(reparsed.to_string(), *expected, "round trip of {input:?}");
        assert_eq!(reparsed, filter, "tree of {input:?}");
    }
}

#[test]
fn ambiguous_text_reads_as_wireshark_unless_forced() {
    let filter = parse("tcp or udp");
    assert_eq!(filter.syntax(), FilterSyntax::Wireshark);
    assert_eq!(filter.to_string(), "(tcp || udp)");
    let bpf = Filter::parse_with("tcp or udp", FilterSyntax::Bpf)
        .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(
        bpf.to_string(),
        "((ip.proto == 6 || ipv6.nxt == 6) || (ip.proto == 17 || ipv6.nxt == 17))"
    );
    // Precedence differs between the syntaxes; ambiguous text follows Wireshark.
    assert_eq!(printed("tcp or udp and arp"), "(tcp || (udp && arp))");
    let bpf = Filter::parse_with("ip or ip6 and arp", FilterSyntax::Bpf)
        .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(bpf.to_string(), "((ip || ipv6) && arp)");
}

/// Asserts that `text` fails in `syntax` at `column` (unchecked if 0) with a
/// message containing `message`.
fn assert_error(syntax: FilterSyntax, text: &str, column: usize, message: &str) {
    match Filter::parse_with(text, syntax) {
        Ok(filter) => panic!("{text:?} parsed as {filter}, expected an error"),
        Err(error) => {
            assert!(
                error.message.contains(message),
                "{text:?}: message {:?} lacks {message:?}",
                error.message
            );
            if column > 0 {
                assert_eq!(error.column, column, "{text:?}: column of\n{error}");
            }
        }
    }
}

#[test]
fn invalid_filters_report_column_and_reason() {
    use FilterSyntax::{Auto, Bpf, Wireshark};
    let cases: &[(FilterSyntax, &str, usize, &str)] = &[
        (
            Auto,
            "ip.adr == 1.2.3.4",
            1,
            "unknown field \"ip.adr\"; did you mean \"ip.addr\"?",
        ),
        (
            Auto,
            "tcp.dstprot == 80",
            1,
            "did you mean \"tcp.dstport\"?",
        ),
        (Auto, "dns.qry.nam", 1, "unknown field \"dns.qry.nam\""),
        (
            Auto,
            "tcp &&",
            7,
            "unexpected end of filter; expected a field",
        ),
        (Auto, "tcp and and udp", 9, "\"and\" was unexpected here"),
        (Auto, "(tcp", 1, "unclosed \"(\""),
        (Auto, "tcp)", 4, "unmatched \")\""),
        (Auto, "tcp udp", 5, "\"udp\" was unexpected here"),
        (Auto, "NOT tcp", 1, "keywords are lowercase: \"not\""),
        (Auto, "tcp AND udp", 5, "\"AND\" was unexpected here"),
        (
            Auto,
            "ip.addr == ::1",
            12,
            "is an IPv6 address but ip.addr holds IPv4 addresses; use ipv6.addr",
        ),
        (Auto, "ipv6.src == 10.0.0.1", 13, "use ip.src"),
        (
            Auto,
            "arp.src.proto_ipv4 == ::1",
            23,
            "holds IPv4 addresses",
        ),
        (Auto, "ip.addr == 10.0.0", 12, "not a valid IP address"),
        (
            Auto,
            "ip.addr == example.com",
            12,
            "host names are not resolved",
        ),
        (Auto, "ip.addr == 10.0.0.0/33", 12, "prefix length 33"),
        (
            Auto,
            "ip.addr > 10.0.0.0/8",
            11,
            "a network can only be compared with == or !=",
        ),
        (
            Auto,
            "tcp.port == 70000",
            13,
            "70000 is too large for tcp.port (maximum 65535)",
        ),
        (Auto, "tcp.port == -1", 13, "negative"),
        (Auto, "tcp.port == 080", 13, "not a valid octal number"),
        (Auto, "frame.len == 1.5", 14, "not a valid decimal number"),
        (
            Auto,
            "tcp.port ==",
            12,
            "unexpected end of filter; expected a value",
        ),
        (
            Auto,
            "tcp == 1",
            1,
            "protocol \"tcp\" can only be tested for presence",
        ),
        (Auto, "tcp.flags.syn == yes", 18, "not a flag value"),
        (Auto, "eth.addr == ff:ff:ff:ff:ff", 13, "not a MAC address"),
        (
            Auto,
            "tcp.srcport == tcp.dstport",
            16,
            "comparing two fields is not supported",
        ),
        (
            Auto,
            "tcp.port == 80 == 80",
            16,
            "chained comparisons are not supported",
        ),
        (
            Auto,
            "tcp.port in {}",
            14,
            "a set needs at least one element",
        ),
        (Auto, "tcp.port in {80", 13, "unclosed \"{\""),
        (
            Auto,
            "tcp.port in {80,}",
            17,
            "expected a value after \",\"",
        ),
        (Auto, "tcp.port in 80", 13, "expected \"{\" to open a set"),
        (
            Auto,
            "tcp.port in {80..}",
            18,
            "expected the high value of the range",
        ),
        (
            Auto,
            "ip.addr in {10.0.0.0/8..11.0.0.0}",
            13,
            "a range cannot have a network",
        ),
        (Auto, "all tcp.port", 1, "\"all\" needs a comparison"),
        (Auto, "ip.flags.mf & 1", 13, "\"&\" needs an integer field"),
        (
            Auto,
            "ip.addr contains \"x\"",
            9,
            "\"contains\" searches bytes",
        ),
        (Auto, "frame[0:2] == 1x", 15, "is not a byte string"),
        (Auto, "frame[0:0] == 01", 6, "is not a slice length"),
        (Auto, "frame[a] == 01", 6, "is not a byte offset"),
        (Auto, "frame[0:2 == 01", 6, "unclosed \"[\""),
        (Auto, "frame[0:2] > 01", 12, "bytes are compared with"),
        (
            Auto,
            "tcp.payload matches \"(\"",
            21,
            "not a regular expression",
        ),
        (
            Auto,
            "tcp.payload matches abc",
            21,
            "a quoted regular expression",
        ),
        (Auto, "ip.ttl[0] == 01", 1, "slices apply to"),
        (Auto, "ip.addr = 10.0.0.1", 9, "\"=\" was unexpected here"),
        (
            Auto,
            "ip.addr == \"10.0.0.1\"",
            12,
            "quoted strings are not supported",
        ),
        (
            Auto,
            "tcp.port == 80 && host 10.0.0.1",
            19,
            "is tcpdump syntax, which cannot be mixed",
        ),
        (
            Auto,
            "1.2.3.4 == ip.src",
            1,
            "expected a field before the value \"1.2.3.4\"",
        ),
        (
            Wireshark,
            "host 10.0.0.1",
            1,
            "is tcpdump syntax, which cannot be mixed",
        ),
        (
            Wireshark,
            "10.0.0.1",
            1,
            "expected a field before the value \"10.0.0.1\"",
        ),
        (
            Auto,
            "host",
            5,
            "unexpected end of filter; expected an address",
        ),
        (
            Auto,
            "host 10.0.0.0/8",
            6,
            "is a network; use net 10.0.0.0/8",
        ),
        (
            Auto,
            "host 10.0.0.1/32",
            6,
            "is a network; use net 10.0.0.1/32",
        ),
        (Auto, "ip 10.0.0.1", 4, "\"10.0.0.1\" was unexpected here"),
        (Auto, "host 80", 6, "did you mean port 80?"),
        (
            Auto,
            "port http",
            6,
            "port names such as \"http\" are not resolved",
        ),
        (Auto, "port 70000", 6, "port 70000 is larger than 65535"),
        (Auto, "portrange 80", 11, "a port range is written LOW-HIGH"),
        (
            Auto,
            "net 10.64.88.1/24",
            5,
            "non-network bits set in \"10.64.88.1/24\"",
        ),
        (
            Auto,
            "net 10.0.0.0 mask 255.0.255.0",
            19,
            "only contiguous netmasks",
        ),
        (Auto, "ether host 10.0.0.1", 12, "is not a MAC address"),
        (
            Auto,
            "ip6 host 10.0.0.1",
            10,
            "is an IPv4 address; it goes with ip or arp",
        ),
        (
            Bpf,
            "tcp[13:3] == 1",
            8,
            "the size of a load is 1, 2 or 4 bytes",
        ),
        (
            Bpf,
            "tcp[tcp-bogus] == 1",
            5,
            "\"tcp-bogus\" is not a number",
        ),
        (
            Bpf,
            "tcp[13] == ",
            12,
            "expected a number, len or proto[offset]",
        ),
        (Bpf, "tcp[13] & 2", 12, "expected a comparison"),
        (Bpf, "tcp[13 == 2", 8, "expected \"]\""),
        (
            Auto,
            "gateway snup",
            1,
            "the tcpdump primitive \"gateway\" is not supported",
        ),
        (
            Auto,
            "tcp port 80 and",
            16,
            "unexpected end of filter; expected a tcpdump primitive",
        ),
        (Auto, "host 10.0.0.1 or (port 80", 18, "unclosed \"(\""),
        (
            Bpf,
            "ip.src == 10.0.0.1",
            1,
            "\"ip.src\" is not a tcpdump primitive",
        ),
        (
            Bpf,
            "ether",
            1,
            "\"ether\" needs host, src, dst, proto, broadcast or multicast",
        ),
        (Bpf, "vlan 5000", 6, "5000 is too large (maximum 4095)"),
    ];
    for (syntax, text, column, message) in cases {
        assert_error(*syntax, text, *column, message);
    }
}

#[test]
fn resource_limits_are_errors_not_crashes() {
    let long = format!("tcp{}", " ".repeat(MAX_FILTER_LEN_BYTES));
    assert_error(
        FilterSyntax::Auto,
        &long,
        MAX_FILTER_LEN_BYTES + 1,
        "the limit is 65536",
    );

    let nested_ok = format!(
        "{}tcp{}",
        "(".repeat(MAX_NESTING_DEPTH),
        ")".repeat(MAX_NESTING_DEPTH)
    );
    assert_eq!(printed(&nested_ok), "tcp");
    let nested_deep = format!(
        "{}tcp{}",
        "(".repeat(MAX_NESTING_DEPTH + 1),
        ")".repeat(MAX_NESTING_DEPTH + 1)
    );
    assert_error(
        FilterSyntax::Auto,
        &nested_deep,
        MAX_NESTING_DEPTH + 1,
        "nests deeper than 256",
    );
    let negations = format!("{}tcp", "!".repeat(MAX_NESTING_DEPTH + 1));
    assert_error(
        FilterSyntax::Auto,
        &negations,
        MAX_NESTING_DEPTH + 1,
        "nests deeper than 256",
    );
    let bpf_negations = format!("{}port 80", "not ".repeat(MAX_NESTING_DEPTH + 1));
    assert_error(
        FilterSyntax::Auto,
        &bpf_negations,
        4 * MAX_NESTING_DEPTH + 1,
        "nests deeper",
    );

    // At the limit, the printed form (which adds `!(...)` around comparisons)
    // still parses back.
    for text in [
        format!("{}tcp.port == 80", "!".repeat(MAX_NESTING_DEPTH)),
        format!("{}(tcp.port in {{80}})", "not ".repeat(MAX_NESTING_DEPTH)),
        format!(
            "{}tcp.port not in {{80}}",
            "!".repeat(MAX_NESTING_DEPTH - 1)
        ),
        format!(
            "{}tcp{}",
            "(tcp && ".repeat(MAX_NESTING_DEPTH - 1),
            ")".repeat(MAX_NESTING_DEPTH - 1)
        ),
    ] {
        let filter = parse(&text);
        let reparsed = Filter::parse(&filter.to_string())
            .unwrap_or_else(|error| panic!("printed form fails:\n{error}"));
        assert_eq!(reparsed, filter);
    }
    // Operators nest deeper than parentheses: three levels per `(` here.
    let layered = format!(
        "{}tcp{}",
        "(udp || arp ^^ ip && ".repeat(100),
        ")".repeat(100)
    );
    assert_error(FilterSyntax::Auto, &layered, 0, "nests deeper than 256");
    let bpf_parens = format!(
        "{}port 80{}",
        "(".repeat(MAX_NESTING_DEPTH),
        ")".repeat(MAX_NESTING_DEPTH)
    );
    assert_eq!(parse(&bpf_parens).syntax(), FilterSyntax::Bpf);

    // A long flat chain is one node, whatever its length.
    let chain = vec!["tcp"; 10_000].join("&&");
    assert!(chain.len() < MAX_FILTER_LEN_BYTES);
    assert_eq!(parse(&chain).root().map(Expr::depth), Some(2));
    // tcpdump's alternating and/or nest left to right; past the limit they are refused.
    let alternating = format!("port 1{}", " and port 2 or port 3".repeat(200));
    assert_error(FilterSyntax::Auto, &alternating, 0, "nests deeper than 256");

    let set_ok = format!(
        "tcp.port in {{{}}}",
        (0..MAX_SET_ELEMENTS)
            .map(|n| (n % 65536).to_string())
            .collect::<Vec<_>>()
            .join(",")
    );
    assert!(set_ok.len() < MAX_FILTER_LEN_BYTES);
    assert!(Filter::parse(&set_ok).is_ok());
    let set_big = format!("frame.len in {{{}}}", "1 ".repeat(MAX_SET_ELEMENTS + 1));
    assert_error(
        FilterSyntax::Auto,
        &set_big,
        0,
        "a set holds at most 10000 elements",
    );
}

// ---------------------------------------------------------------------------
// Evaluation on hand-built records.

fn addr(text: &str) -> Addr16 {
    Addr16::from(
        text.parse::<IpAddr>()
            .unwrap_or_else(|error| panic!("{text}: {error}")),
    )
}

const MAC_A: [u8; 6] = [0x00, 0x01, 0x02, 0x03, 0x04, 0x05];
const MAC_B: [u8; 6] = [0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff];

fn ethernet(headers: PacketHeaders) -> PacketRecord {
    PacketRecord {
        ts_nanos: 1_000,
        wire_len: 60,
        cap_len: 60,
        link_type: LinkType::ETHERNET,
        iface: 0,
        headers: PacketHeaders {
            src_mac: Some(MAC_A),
            dst_mac: Some(MAC_B),
            ..headers
        },
    }
}

fn tcp_v4(src: &str, dst: &str, src_port: u16, dst_port: u16, flags: u16) -> PacketRecord {
    ethernet(PacketHeaders {
        eth_type: Some(0x0800),
        ip_version: Some(4),
        src_addr: Some(addr(src)),
        dst_addr: Some(addr(dst)),
        ip_proto: Some(6),
        ip_ttl: Some(64),
        ip_id: Some(0x1234),
        frag_offset: Some(0),
        more_fragments: Some(false),
        dont_fragment: Some(true),
        src_port: Some(src_port),
        dst_port: Some(dst_port),
        tcp_flags: Some(flags),
        ..PacketHeaders::default()
    })
}

fn udp_v6(src: &str, dst: &str, src_port: u16, dst_port: u16) -> PacketRecord {
    ethernet(PacketHeaders {
        eth_type: Some(0x86dd),
        ip_version: Some(6),
        src_addr: Some(addr(src)),
        dst_addr: Some(addr(dst)),
        ip_proto: Some(17),
        ip_ttl: Some(255),
        src_port: Some(src_port),
        dst_port: Some(dst_port),
        ..PacketHeaders::default()
    })
}

fn arp(sender: &str, target: &str) -> PacketRecord {
    ethernet(PacketHeaders {
        status: DecodeStatus::NonIp,
        eth_type: Some(0x0806),
        src_addr: Some(addr(sender)),
        dst_addr: Some(addr(target)),
        ..PacketHeaders::default()
    })
}

/// A non-first fragment of a UDP datagram: protocol known, no ports.
fn fragment_v4(src: &str, dst: &str) -> PacketRecord {
    ethernet(PacketHeaders {
        status: DecodeStatus::Fragment,
        eth_type: Some(0x0800),
        ip_version: Some(4),
        src_addr: Some(addr(src)),
        dst_addr: Some(addr(dst)),
        ip_proto: Some(17),
        ip_ttl: Some(64),
        ip_id: Some(7),
        frag_offset: Some(185),
        more_fragments: Some(false),
        dont_fragment: Some(false),
        ..PacketHeaders::default()
    })
}

fn icmp_v4(src: &str, dst: &str, icmp_type: u8, icmp_code: u8) -> PacketRecord {
    ethernet(PacketHeaders {
        eth_type: Some(0x0800),
        ip_version: Some(4),
        src_addr: Some(addr(src)),
        dst_addr: Some(addr(dst)),
        ip_proto: Some(1),
        ip_ttl: Some(64),
        icmp_type: Some(icmp_type),
        icmp_code: Some(icmp_code),
        ..PacketHeaders::default()
    })
}

fn vlan_tagged(mut record: PacketRecord, outer: u16, inner: Option<u16>) -> PacketRecord {
    record.headers.vlan_outer = Some(outer);
    record.headers.vlan_inner = inner;
    record
}

#[test]
fn evaluation_follows_wireshark_semantics() {
    let syn = tcp_v4("10.0.0.1", "10.0.0.2", 40000, 80, tcp_flags::SYN);
    let syn_ack = tcp_v4(
        "10.0.0.2",
        "10.0.0.1",
        80,
        40000,
        tcp_flags::SYN | tcp_flags::ACK,
    );
    let v6 = udp_v6("2001:db8::1", "2001:db8::2", 5353, 53);
    let who_has = arp("10.0.0.1", "10.0.0.9");
    let fragment = fragment_v4("10.0.0.1", "10.0.0.2");
    let unreachable = icmp_v4("10.0.0.9", "10.0.0.1", 3, 3);
    let tagged = vlan_tagged(
        tcp_v4("10.0.0.3", "10.0.0.4", 1, 2, tcp_flags::ACK),
        100,
        Some(200),
    );

    let cases: &[(&str, &PacketRecord, bool)] = &[
        ("tcp", &syn, true),
        ("tcp", &fragment, false),
        ("udp", &fragment, false),
        ("ip.proto == 17", &fragment, true),
        ("ip.frag_offset == 185", &fragment, true),
        ("udp.port", &fragment, false),
        ("udp", &v6, true),
        ("ip", &v6, false),
        ("ipv6", &v6, true),
        ("ip.version == 6", &v6, true),
        ("ip.version == 4", &syn, true),
        ("ip.version", &who_has, false),
        ("ip.src", &v6, false),
        ("ipv6.hlim == 255", &v6, true),
        ("ipv6.nxt == 17", &v6, true),
        ("ip.ttl == 64", &syn, true),
        ("ip.id == 0x1234", &syn, true),
        ("ip.flags.df", &syn, true),
        ("ip.flags.df == 1", &syn, true),
        ("ip.flags.mf == 0", &syn, true),
        ("ip.addr == 10.0.0.2", &syn, true),
        ("ip.addr == 10.0.0.0/24", &syn, true),
        ("ip.addr == 10.0.1.0/24", &syn, false),
        // `!=` is "all differ", and false when the field is absent.
        ("ip.addr != 10.0.0.2", &syn, false),
        ("ip.addr != 10.9.9.9", &syn, true),
        ("ip.addr != 10.0.0.2", &who_has, false),
        ("!(ip.addr == 10.0.0.2)", &who_has, true),
        ("ip.addr !== 10.0.0.2", &syn, true),
        ("ip.addr === 10.0.0.2", &syn, false),
        ("ip.src == 10.0.0.1 && ip.dst == 10.0.0.2", &syn, true),
        ("ip.src > 10.0.0.0 && ip.src < 10.0.0.2", &syn, true),
        ("ip.src >= 10.0.0.2", &syn, false),
        ("tcp.port == 80", &syn, true),
        ("tcp.port == 80", &syn_ack, true),
        ("tcp.srcport == 80", &syn, false),
        ("tcp.dstport == 80", &syn, true),
        ("tcp.port != 80", &syn, false),
        ("all tcp.port > 1000", &syn, false),
        ("tcp.port > 1000", &syn, true),
        ("tcp.port in {443, 8000..40000}", &syn, true),
        ("all tcp.port in {80, 40000}", &syn, true),
        ("tcp.port not in {80}", &syn, false),
        ("tcp.port not in {80}", &v6, true),
        ("tcp.flags.syn", &syn, true),
        ("tcp.flags.syn", &v6, false),
        ("tcp.flags.ack", &syn, true),
        ("tcp.flags.ack == 1", &syn, false),
        ("tcp.flags.ack == 1", &syn_ack, true),
        ("tcp.flags.syn == 1 && tcp.flags.ack == 0", &syn, true),
        ("tcp.flags.syn == 1 && tcp.flags.ack == 0", &syn_ack, false),
        ("tcp.flags == 0x012", &syn_ack, true),
        ("tcp.flags & 0x02", &syn_ack, true),
        ("tcp.flags & 0x04", &syn_ack, false),
        ("tcp.flags & 0x12 == 0x12", &syn_ack, true),
        ("tcp.flags.syn > 0", &syn, true),
        ("udp.srcport == 5353 && udp.dstport == 53", &v6, true),
        ("ipv6.addr == 2001:db8::/32", &v6, true),
        ("ipv6.src == 2001:db8::2", &v6, false),
        ("eth.src == 00:01:02:03:04:05", &syn, true),
        ("eth.addr == aa:bb:cc:dd:ee:ff", &syn, true),
        ("eth.dst == 00:01:02:03:04:05", &syn, false),
        ("eth.type == 0x0806", &who_has, true),
        ("eth", &who_has, true),
        ("arp", &who_has, true),
        ("arp.src.proto_ipv4 == 10.0.0.1", &who_has, true),
        ("arp.dst.proto_ipv4 == 10.0.0.1", &who_has, false),
        ("arp.src.proto_ipv4 == 10.0.0.1", &syn, false),
        ("ip.addr == 10.0.0.1", &who_has, false),
        ("icmp", &unreachable, true),
        ("icmp.type == 3 && icmp.code == 3", &unreachable, true),
        ("icmpv6", &unreachable, false),
        ("vlan", &tagged, true),
        ("vlan", &syn, false),
        ("vlan.id == 200", &tagged, true),
        ("vlan.id != 100", &tagged, false),
        ("frame.len == 60 && frame.cap_len <= 60", &syn, true),
        ("frame.interface_id == 0", &syn, true),
        ("frame", &syn, true),
        ("tcp ^^ udp", &syn, true),
        ("tcp ^^ ip", &syn, false),
        ("tcp ^^ ip ^^ eth", &syn, true),
        ("", &syn, true),
        // tcpdump primitives.
        ("host 10.0.0.1", &syn, true),
        ("host 10.0.0.1", &who_has, true),
        ("src host 10.0.0.9", &who_has, false),
        ("dst host 10.0.0.9", &who_has, true),
        ("net 10.0.0.0/24", &who_has, true),
        ("port 80", &syn, true),
        ("port 53", &v6, true),
        ("port 80", &fragment, false),
        ("tcp and port 80", &syn, true),
        ("less 60", &syn, true),
        ("less 59", &syn, false),
        ("greater 60", &syn, true),
        ("vlan 200", &tagged, true),
        ("ether src 00:01:02:03:04:05", &syn, true),
        ("icmp6", &v6, false),
        ("ip6 and udp dst port 53", &v6, true),
    ];
    for (text, record, expected) in cases {
        assert_eq!(
            parse(text).matches(record),
            *expected,
            "{text:?} on {record:?}"
        );
    }
    // tcpdump's `tcp`/`udp` test the IP protocol, so they match non-first fragments.
    let bpf_cases: &[(&str, &PacketRecord, bool)] = &[
        ("udp", &fragment, true),
        ("tcp", &fragment, false),
        ("tcp", &syn, true),
        ("udp", &v6, true),
        ("icmp", &unreachable, true),
    ];
    for (text, record, expected) in bpf_cases {
        let filter =
            Filter::parse_with(text, FilterSyntax::Bpf).unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(
            filter.matches(record),
            *expected,
            "tcpdump {text:?} on {record:?}"
        );
    }
}

#[test]
fn tunnel_fields_read_the_encapsulation_and_the_outer_addresses() {
    use hindsight_model::{TunnelId, tunnel};
    let mut vxlan = tcp_v4("192.168.7.1", "192.168.7.2", 40000, 443, 0x02);
    vxlan.headers.tunnel = Some(tunnel::VXLAN | tunnel::GRE);
    vxlan.headers.tunnel_src = Some(addr("10.0.0.1"));
    vxlan.headers.tunnel_dst = Some(addr("2001:db8::2"));
    vxlan.headers.tunnel_id = Some(TunnelId {
        kind: tunnel::VXLAN,
        id: 4096,
    });
    vxlan.headers.mpls_label = Some(16);
    let plain = tcp_v4("192.168.7.1", "192.168.7.2", 40000, 443, 0x02);
    for (text, on_vxlan) in [
        ("tunnel", true),
        ("vxlan && gre", true),
        ("geneve || gtp || cfp || pppoes || erspan", false),
        ("tunnel.type == \"vxlan\"", true),
        ("tunnel.type == gre", true),
        ("tunnel.type != \"ipip\"", true),
        ("tunnel.type == \"ipip\"", false),
        ("tunnel.src == 10.0.0.1", true),
        ("tunnel.src == 10.0.0.0/8", true),
        ("tunnel.dst == 2001:db8::/32", true),
        ("tunnel.addr == 2001:db8::2", true),
        ("tunnel.addr == 10.0.0.2", false),
        ("vxlan.vni == 4096", true),
        ("gre.key == 4096", false),
        ("mpls.label == 16", true),
        ("ip.addr == 192.168.7.1 && tcp.port == 443", true),
    ] {
        let filter = parse(text);
        assert_eq!(
            filter.matches(&vxlan),
            on_vxlan,
            "{text} on the tunnelled packet"
        );
        assert_eq!(
            parse(&filter.to_string()),
            filter,
            "{text} prints as {filter}"
        );
        if !text.contains("!=") && !text.contains("ip.addr") {
            assert!(!filter.matches(&plain), "{text} on a plain packet");
        }
    }
    assert_eq!(printed("tunnel.type == gre"), "tunnel.type == \"gre\"");
    assert_eq!(
        printed("tunnel.src == 10.0.0.1"),
        "tunnel.src == ::ffff:10.0.0.1"
    );
    let error = Filter::parse("tunnel.type == vxlan2").unwrap_err();
    assert!(error.to_string().contains("unknown tunnel type"), "{error}");
}

#[test]
fn community_id_compares_the_hash_of_the_innermost_five_tuple() {
    // The spec's baseline: TCP 128.232.110.120:34855 -> 66.35.250.204:80.
    let request = tcp_v4("128.232.110.120", "66.35.250.204", 34855, 80, 0x02);
    let answer = tcp_v4("66.35.250.204", "128.232.110.120", 80, 34855, 0x12);
    let other = tcp_v4("128.232.110.120", "66.35.250.204", 34856, 80, 0x02);
    let filter = parse("community_id == \"1:LQU9qZlK+B5F3KDmev6m5PMibrg=\"");
    assert!(filter.matches(&request) && filter.matches(&answer));
    assert!(!filter.matches(&other));
    assert!(parse("community_id != \"1:LQU9qZlK+B5F3KDmev6m5PMibrg=\"").matches(&other));
    assert_eq!(parse(&filter.to_string()), filter);
    assert_eq!(
        filter.to_string(),
        "community_id == \"1:LQU9qZlK+B5F3KDmev6m5PMibrg=\""
    );
    for (text, message) in [
        ("community_id == \"1:abc\"", "is not a Community ID"),
        (
            "community_id > \"1:LQU9qZlK+B5F3KDmev6m5PMibrg=\"",
            "== or != only",
        ),
    ] {
        let error = Filter::parse(text).unwrap_err();
        assert!(error.to_string().contains(message), "{text}: {error}");
    }
}

#[test]
fn byte_offsets_parse_with_libpcaps_precedence_and_print_back() {
    for (text, printed_as) in [
        (
            "tcp[tcpflags] & tcp-syn != 0",
            "pcap_filter(\"tcp[0xd] & 2 != 0\")",
        ),
        (
            "tcp[13] & (tcp-syn|tcp-ack) == tcp-syn",
            "pcap_filter(\"tcp[0xd] & (2 | 0x10) == 2\")",
        ),
        (
            "ip[2:2] - ((ip[0] & 0xf) << 2) > 40",
            "pcap_filter(\"ip[2:2] - ((ip[0] & 0xf) << 2) > 0x28\")",
        ),
        (
            "ip[0] % 7 + 2 == 1",
            "pcap_filter(\"ip[0] % (7 + 2) == 1\")",
        ),
        (
            "ip[0] & 7 % 2 == 1",
            "pcap_filter(\"ip[0] & (7 % 2) == 1\")",
        ),
        (
            "ip[0] | 1 ^ 3 & 4 == 1",
            "pcap_filter(\"ip[0] | (1 ^ (3 & 4)) == 1\")",
        ),
        (
            "ip[0] - 1 - 2 == 1",
            "pcap_filter(\"(ip[0] - 1) - 2 == 1\")",
        ),
        ("(tcp[13] & 2) != 0 and port 80", ""),
        ("icmp[icmptype] != icmp-echo and len > 100", ""),
        (
            "ether[12:2] = 0x0800",
            "pcap_filter(\"ether[0xc:2] == 0x800\")",
        ),
    ] {
        let filter = Filter::parse_with(text, FilterSyntax::Bpf).unwrap();
        if !printed_as.is_empty() {
            assert_eq!(filter.to_string(), printed_as, "{text}");
        }
        assert_eq!(
            parse(&filter.to_string()),
            filter,
            "{text} prints as {filter}"
        );
        assert_eq!(
            Filter::parse(text).unwrap(),
            filter,
            "{text} in auto syntax"
        );
    }
    // `tcp[13] & 2 != 0` on a SYN, an ACK, a UDP packet, and a frame cut short.
    let syn = tcp_v4("10.0.0.1", "10.0.0.2", 1000, 80, 0x02);
    let frame = |flags: u8| {
        let mut frame = vec![0u8; 54];
        frame[12..14].copy_from_slice(&[0x08, 0x00]);
        frame[14] = 0x45;
        frame[23] = 6;
        frame[14 + 20 + 13] = flags;
        frame
    };
    let filter = Filter::parse_with("tcp[13] & 2 != 0", FilterSyntax::Bpf).unwrap();
    assert!(filter.reads_bytes());
    assert_eq!(filter.test(&syn, &frame(0x02)), Verdict::Match);
    assert_eq!(filter.test(&syn, &frame(0x10)), Verdict::NoMatch);
    assert!(
        !filter.matches(&syn),
        "without the bytes, a byte test is false"
    );
    let mut udp = frame(0x02);
    udp[23] = 17;
    assert_eq!(filter.test(&syn, &udp), Verdict::NoMatch);
    let negated = Filter::parse_with("not tcp[13] & 2 != 0", FilterSyntax::Bpf).unwrap();
    assert_eq!(
        negated.test(&syn, &udp),
        Verdict::Match,
        "no TCP layer: the relation is false"
    );
    // Cut short: captured with 40 bytes, rejected even under `not`.
    let cut = PacketRecord { cap_len: 40, ..syn };
    assert_eq!(negated.test(&cut, &frame(0x02)[..40]), Verdict::NoMatch);
    // Captured whole but kept only 40 bytes: not known.
    let kept = PacketRecord { cap_len: 54, ..syn };
    assert_eq!(negated.test(&kept, &frame(0x02)[..40]), Verdict::Unknown);
    // `len` needs no bytes.
    assert!(Filter::parse("len >= 60").unwrap().matches(&syn));
    // Read by both syntaxes: tcpdump's (decimal 18) first; Wireshark's bytes
    // print quoted so that they cannot.
    assert_eq!(
        Filter::parse("tcp[13] == 18").unwrap().syntax(),
        FilterSyntax::Bpf
    );
    assert_eq!(
        Filter::parse("tcp[2:2] == 00:50").unwrap().syntax(),
        FilterSyntax::Wireshark
    );
    assert_eq!(
        Filter::parse("frame[12:2] == 81:00").unwrap().syntax(),
        FilterSyntax::Wireshark
    );
    let slice = Filter::parse_with("tcp[13] == 12", FilterSyntax::Wireshark).unwrap();
    assert_eq!(slice.to_string(), "tcp[13] == \"\\x12\"");
    assert_eq!(Filter::parse(&slice.to_string()).unwrap(), slice);
}

#[test]
fn match_all_matches_everything_and_prints_nothing() {
    let filter = Filter::match_all();
    assert!(filter.is_match_all());
    assert_eq!(filter.to_string(), "");
    assert!(filter.matches(&PacketRecord::default()));
    assert_eq!(filter, parse("   "));
    assert_eq!(filter.address_ranges(), None);
}

// ---------------------------------------------------------------------------
// Property tests with a small deterministic generator (xorshift), no dependencies.

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    fn below(&mut self, n: usize) -> usize {
        usize::try_from(self.next() % u64::try_from(n).unwrap_or(1)).unwrap_or(0)
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
}

/// A few addresses and ports, so that random filters and records meet often.
const V4_POOL: &[&str] = &[
    "10.0.0.1",
    "10.0.0.2",
    "10.0.1.7",
    "192.168.1.1",
    "0.0.0.0",
    "255.255.255.255",
];
const V6_POOL: &[&str] = &["2001:db8::1", "2001:db8::2", "fe80::1", "::1"];
const PORT_POOL: &[u16] = &[0, 22, 53, 80, 443, 8080, 65535];

fn random_leaf(rng: &mut Rng, bpf: bool) -> String {
    let v4 = *rng.pick(V4_POOL);
    let v6 = *rng.pick(V6_POOL);
    let port = *rng.pick(PORT_POOL);
    let op = *rng.pick(&["==", "!=", "===", "!==", "<", "<=", ">", ">="]);
    let eq_op = *rng.pick(&["==", "!=", "===", "!=="]);
    let prefix = *rng.pick(&[0u8, 8, 16, 24, 31, 32]);
    let v6_prefix = *rng.pick(&[0u8, 16, 32, 64, 127, 128]);
    let port2 = *rng.pick(PORT_POOL);
    let choice = if bpf {
        *rng.pick(&[11, 12, 13, 14, 15, 19, 20, 22])
    } else {
        *rng.pick(&[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 16, 17, 18, 21, 23, 24, 25])
    };
    match choice {
        0 => rng
            .pick(&[
                "tcp", "udp", "ip", "ipv6", "arp", "icmp", "vlan", "eth", "sctp", "icmpv6",
            ])
            .to_string(),
        1 => format!(
            "{} {op} {v4}",
            rng.pick(&[
                "ip.src",
                "ip.dst",
                "ip.addr",
                "arp.src.proto_ipv4",
                "arp.dst.proto_ipv4"
            ])
        ),
        2 => format!(
            "{} {eq_op} {v4}/{prefix}",
            rng.pick(&["ip.src", "ip.dst", "ip.addr"])
        ),
        3 => format!(
            "{} {op} {v6}",
            rng.pick(&["ipv6.src", "ipv6.dst", "ipv6.addr"])
        ),
        4 => format!(
            "{} {eq_op} {v6}/{v6_prefix}",
            rng.pick(&["ipv6.src", "ipv6.addr"])
        ),
        5 => format!(
            "{} {op} {port}",
            rng.pick(&[
                "tcp.port",
                "udp.port",
                "tcp.srcport",
                "udp.dstport",
                "sctp.port"
            ])
        ),
        6 => format!(
            "{} in {{{port}, {}..{}}}",
            rng.pick(&["tcp.port", "udp.port"]),
            port.min(port2) % 256,
            port.max(port2)
        ),
        7 => format!("ip.addr in {{{v4}, 10.0.0.0/{prefix}}}"),
        8 => format!(
            "tcp.flags.{} == {}",
            rng.pick(&["syn", "ack", "fin", "reset", "ae"]),
            rng.below(2)
        ),
        9 => format!("tcp.flags & 0x{:x}", rng.below(0x200) + 1),
        10 => format!("frame.len {op} {}", rng.below(2000)),
        11 => format!("host {v4}"),
        12 => format!(
            "{} port {port}",
            rng.pick(&["src", "dst", "tcp", "udp dst", "src or dst"])
        ),
        13 => {
            let network = value::ipv4_network(
                v4.parse().unwrap_or(std::net::Ipv4Addr::UNSPECIFIED),
                prefix,
            );
            format!("net {network}/{prefix}")
        }
        14 => format!("host {v6}"),
        15 => format!("portrange {port}-{port2}"),
        16 => format!(
            "{} {op} {}",
            rng.pick(&["ip.proto", "ipv6.nxt", "ip.ttl", "icmp.type"]),
            rng.below(256)
        ),
        17 => format!("vlan.id {op} {}", rng.below(300)),
        18 => format!(
            "eth.addr {eq_op} {}",
            rng.pick(&["00:01:02:03:04:05", "aa:bb:cc:dd:ee:ff"])
        ),
        19 => format!("less {}", rng.below(2000)),
        20 => rng
            .pick(&[
                "ip6",
                "icmp6",
                "broadcast",
                "vlan 100",
                "tcp",
                "udp",
                "arp",
                "ip",
            ])
            .to_string(),
        22 => format!(
            "ether {} aa:bb:cc:dd:ee:ff",
            rng.pick(&["src", "dst", "host"])
        ),
        23 => format!(
            "{} {eq_op} {}",
            rng.pick(&["tunnel.src", "tunnel.dst", "tunnel.addr"]),
            rng.pick(&[v4, v6])
        ),
        24 => rng
            .pick(&[
                "tunnel",
                "gre",
                "vxlan",
                "mpls",
                "tunnel.type == \"gtp\"",
                "tunnel.type != ipip",
            ])
            .to_string(),
        25 => rng
            .pick(&[
                "frame contains \"GET \"",
                "tcp.payload[0:3] == 16:03:01",
                "tcp.payload",
                "udp.payload matches \"^\\\\x00[a-z]+\"",
                "eth.addr[0:3] == 00:1b:21",
                "frame[-4:] != 00:00:00:00",
                "ip[12-15] == 0a:00:00:01",
                "tcp contains 00",
                "frame[12:2] == \"\\x81\\0\"",
                "pcap_filter(\"tcp[13] & 2 != 0\")",
            ])
            .to_string(),
        _ => format!("all {} {op} {port}", rng.pick(&["tcp.port", "udp.port"])),
    }
}

/// Returns a random filter text in one syntax: Wireshark leaves, or tcpdump
/// leaves (`bpf`), joined with the logical operators both syntaxes share.
fn random_filter(rng: &mut Rng, depth: usize, bpf: bool) -> String {
    if depth == 0 || rng.chance(30) {
        return random_leaf(rng, bpf);
    }
    let left = random_filter(rng, depth - 1, bpf);
    match rng.below(5) {
        0 => format!("not ({left})"),
        1 => format!("({left}) and ({})", random_filter(rng, depth - 1, bpf)),
        2 => format!("({left}) or ({})", random_filter(rng, depth - 1, bpf)),
        3 => format!(
            "({left}) && ({}) || ({})",
            random_filter(rng, depth - 1, bpf),
            random_filter(rng, depth - 1, bpf)
        ),
        _ => format!("!({left}) and ({})", random_filter(rng, depth - 1, bpf)),
    }
}

fn random_record(rng: &mut Rng) -> PacketRecord {
    let v4 = |rng: &mut Rng| *rng.pick(V4_POOL);
    let v6 = |rng: &mut Rng| *rng.pick(V6_POOL);
    let port = |rng: &mut Rng| *rng.pick(PORT_POOL);
    let mut record = match rng.below(6) {
        0 => tcp_v4(
            v4(rng),
            v4(rng),
            port(rng),
            port(rng),
            u16::try_from(rng.below(0x200)).unwrap_or(0),
        ),
        1 => udp_v6(v6(rng), v6(rng), port(rng), port(rng)),
        2 => arp(v4(rng), v4(rng)),
        3 => fragment_v4(v4(rng), v4(rng)),
        4 => icmp_v4(v4(rng), v4(rng), 3, 1),
        _ => {
            let mut record = udp_v6(v6(rng), v6(rng), port(rng), port(rng));
            record.headers.ip_version = Some(4);
            record.headers.src_addr = Some(addr(v4(rng)));
            record.headers.dst_addr = Some(addr(v4(rng)));
            record
        }
    };
    if rng.chance(20) {
        record.headers.tunnel = Some(1 << rng.below(9));
        record.headers.tunnel_src = Some(addr(v4(rng)));
        record.headers.tunnel_dst = Some(addr(v6(rng)));
    }
    if rng.chance(20) {
        record = vlan_tagged(record, 100, rng.chance(50).then_some(200));
    }
    record.wire_len = u32::try_from(rng.below(2000)).unwrap_or(0);
    record
}

#[test]
fn printed_filters_parse_back_to_the_same_tree() {
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    let mut parsed = 0;
    for _ in 0..3000 {
        let bpf = rng.chance(40);
        let text = random_filter(&mut rng, 4, bpf);
        let syntax = if bpf {
            FilterSyntax::Bpf
        } else {
            FilterSyntax::Wireshark
        };
        let filter = Filter::parse_with(&text, syntax)
            .unwrap_or_else(|error| panic!("random filter does not parse:\n{error}"));
        parsed += 1;
        let printed = filter.to_string();
        let reparsed = Filter::parse(&printed).unwrap_or_else(|error| {
            panic!("{text:?} printed as {printed:?}, which fails:\n{error}")
        });
        assert_eq!(reparsed.to_string(), printed, "{text:?}");
        assert_eq!(reparsed.root(), filter.root(), "{text:?}");
    }
    assert_eq!(parsed, 3000);
}

#[test]
fn matching_records_fall_inside_the_pruning_ranges() {
    let mut rng = Rng(0x0dd_ba11_cafe_f00d);
    let records: Vec<PacketRecord> = (0..300).map(|_| random_record(&mut rng)).collect();
    let mut constrained = 0;
    let mut checked_matches = 0;
    for _ in 0..3000 {
        let bpf = rng.chance(40);
        let text = random_filter(&mut rng, 3, bpf);
        let syntax = if bpf {
            FilterSyntax::Bpf
        } else {
            FilterSyntax::Wireshark
        };
        let filter = Filter::parse_with(&text, syntax)
            .unwrap_or_else(|error| panic!("random filter does not parse:\n{error}"));
        let addresses = filter.address_ranges();
        let ports = filter.port_ranges();
        constrained += usize::from(addresses.is_some()) + usize::from(ports.is_some());
        for record in &records {
            if !filter.matches(record) {
                continue;
            }
            checked_matches += 1;
            if let Some(ranges) = &addresses {
                let inside = |addr: Option<Addr16>| {
                    addr.is_some_and(|addr| {
                        ranges
                            .iter()
                            .any(|(low, high)| *low <= addr && addr <= *high)
                    })
                };
                assert!(
                    inside(record.headers.src_addr) || inside(record.headers.dst_addr),
                    "{text:?} matches {record:?} outside {ranges:?}"
                );
            }
            if let Some(ranges) = &ports {
                let inside = |port: Option<u16>| {
                    port.is_some_and(|port| {
                        ranges
                            .iter()
                            .any(|(low, high)| *low <= port && port <= *high)
                    })
                };
                assert!(
                    inside(record.headers.src_port) || inside(record.headers.dst_port),
                    "{text:?} matches {record:?} outside ports {ranges:?}"
                );
            }
        }
    }
    assert!(constrained > 500, "only {constrained} constrained filters");
    assert!(
        checked_matches > 10_000,
        "only {checked_matches} matches checked"
    );
}

#[test]
fn arbitrary_text_never_panics() {
    let mut rng = Rng(0xfeed_beef_0000_0007);
    let alphabet: Vec<char> = "ip.addrtcpuort0123456789abcdef:/-.,{}()[]!=<>&|^~\" \\andornotinxorhostnetsrcdst\u{e9}\u{1f600}"
        .chars()
        .collect();
    for _ in 0..10_000 {
        let len = rng.below(40);
        let text: String = (0..len).map(|_| *rng.pick(&alphabet)).collect();
        for syntax in [
            FilterSyntax::Auto,
            FilterSyntax::Wireshark,
            FilterSyntax::Bpf,
        ] {
            if let Ok(filter) = Filter::parse_with(&text, syntax) {
                let printed = filter.to_string();
                let reparsed = Filter::parse(&printed)
                    .unwrap_or_else(|error| panic!("{text:?} printed as {printed:?}:\n{error}"));
                assert_eq!(reparsed.to_string(), printed);
                let _ = filter.matches(&PacketRecord::default());
            } else if let Err(error) = Filter::parse_with(&text, syntax) {
                let _ = error.to_string();
                assert!(
                    error.column >= 1 && error.column <= text.chars().count() + 1,
                    "{text:?}: {error:?}"
                );
            }
        }
    }
}
