//! Many recorders, one question (issue 22): three `hindsight serve` nodes on
//! 127.0.0.1, each with its own archive holding a share of lan-hour (split by
//! time and by address), one of them the index node. Federated answers equal
//! the answers of one archive holding the whole capture; a question for an
//! address one node holds reaches that node alone; a node killed makes the
//! answer partial and named, and its restart makes it whole again; a node with
//! the wrong token is refused and named.

mod common;

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::browser::Browser;
use common::{hindsight, ingest, lan_hour, ok, require_tool};

const TOKEN: &str = "cluster-test-token-0123456789";
/// The address whose packets of 2012-11-23 node b alone holds.
const HOST: &str = "10.64.94.199";

/// A child killed when dropped, so a failed test leaves no server behind.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct Node {
    name: &'static str,
    archive: PathBuf,
    port: u16,
    config: PathBuf,
    server: Option<Reaped>,
    log: Option<std::thread::JoinHandle<String>>,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port()
}

/// Node `name`'s own token.
fn node_token(name: &str) -> String {
    format!("{name}-node-token-0123456789")
}

fn cluster_toml(nodes: &[(&str, u16)], name: Option<&str>, token: &str) -> String {
    let mut text = String::from("[cluster]\n");
    if let Some(name) = name {
        text.push_str(&format!(
            "name = \"{name}\"\nnode_token = \"{}\"\n",
            node_token(name)
        ));
    }
    text.push_str(&format!(
        "token = \"{token}\"\nindex = [\"a\"]\nsync_secs = 1\ndeadline_secs = 20\n"
    ));
    for (node, port) in nodes {
        text.push_str(&format!(
            "[[cluster.node]]\nname = \"{node}\"\nurl = \"http://127.0.0.1:{port}\"\ntoken_sha256 = \"{}\"\n",
            hindsight_cluster::config::token_sha256(&node_token(node))
        ));
    }
    text
}

impl Node {
    fn start(&mut self) {
        let mut child = Command::new(env!("CARGO_BIN_EXE_hindsight"))
            .args(["serve", "--config"])
            .arg(&self.config)
            .args(["--archive"])
            .arg(&self.archive)
            .args(["--listen", &format!("127.0.0.1:{}", self.port)])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (ready, is_ready) = std::sync::mpsc::channel();
        self.log = Some(std::thread::spawn(move || {
            let mut all = String::new();
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains("listening on") {
                    let _ = ready.send(());
                }
                all.push_str(&line);
                all.push('\n');
            }
            all
        }));
        is_ready
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("node {} did not start", self.name));
        self.server = Some(Reaped(child));
    }

    fn kill(&mut self) -> String {
        if let Some(mut server) = self.server.take() {
            let _ = server.0.kill();
            let _ = server.0.wait();
        }
        self.log
            .take()
            .map(|log| log.join().unwrap())
            .unwrap_or_default()
    }

    fn get(&self, path: &str) -> String {
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        use std::io::Write;
        write!(
            stream,
            "GET {path} HTTP/1.0\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n\r\n"
        )
        .unwrap();
        let mut text = String::new();
        stream.read_to_string(&mut text).unwrap();
        text
    }

    fn post(&self, path: &str, body: &str) -> String {
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        use std::io::Write;
        write!(
            stream,
            "POST {path} HTTP/1.0\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut text = String::new();
        stream.read_to_string(&mut text).unwrap();
        text
    }

    /// Requests the node answered on `route`, from its metrics.
    fn requests(&self, route: &str) -> u64 {
        let metrics = self.get("/metrics");
        let wanted = format!("hindsight_api_requests_total{{route=\"{route}\"}} ");
        metrics
            .lines()
            .find_map(|line| line.strip_prefix(&wanted))
            .map_or(0, |v| v.trim().parse().unwrap())
    }
}

/// Splits two days of lan-hour by time and by address: a holds the day
/// before (lan-hour shifted back 24 hours), b lan-hour's packets to or from
/// HOST, c the rest of lan-hour. (A time split inside lan-hour would cut its
/// long connections in two records, where one archive holds one.)
fn shares(dir: &Path) -> [PathBuf; 3] {
    let lan = lan_hour();
    let (before, after) = (dir.join("before.pcap"), lan.clone());
    let status = Command::new("editcap")
        .args(["-t", "-86400"])
        .arg(&lan)
        .arg(&before)
        .status()
        .unwrap();
    assert!(status.success());
    let (b, c) = (dir.join("b.pcap"), dir.join("c.pcap"));
    for (filter, out) in [
        (format!("host {HOST}"), &b),
        (format!("not host {HOST}"), &c),
    ] {
        let status = Command::new("tcpdump")
            .args(["-r"])
            .arg(&after)
            .arg("-w")
            .arg(out)
            .arg(&filter)
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success());
    }
    [before, b, c]
}

fn query(args: &[&str]) -> Output {
    hindsight(&[&["query"], args].concat())
}

/// The bytes of a pcap answer of the single archive and of the cluster.
fn both(
    single: &Path,
    cluster: &Path,
    filter: &str,
    extra: &[&str],
    dir: &Path,
) -> (Vec<u8>, Vec<u8>, String) {
    let (one, fed) = (dir.join("one.pcap"), dir.join("fed.pcap"));
    ok(&query(
        &[
            &[
                filter,
                "--archive",
                single.to_str().unwrap(),
                "-o",
                one.to_str().unwrap(),
            ],
            extra,
        ]
        .concat(),
    ));
    let output = query(
        &[
            &[
                filter,
                "--cluster",
                cluster.to_str().unwrap(),
                "-o",
                fed.to_str().unwrap(),
            ],
            extra,
        ]
        .concat(),
    );
    ok(&output);
    (
        std::fs::read(&one).unwrap(),
        std::fs::read(&fed).unwrap(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn wait_for_index(nodes: &[Node], healthy: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let status = nodes[0].get("/api/v1/cluster/status");
        let ok_nodes = status.matches("\"health\":\"ok\"").count();
        if ok_nodes >= healthy {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the index did not fill: {status}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn three_nodes_answer_as_one_archive_and_say_who_is_missing() {
    require_tool("editcap");
    require_tool("tcpdump");
    require_tool("chromedriver");
    let dir = tempfile::tempdir().unwrap();
    let single = dir.path().join("single");
    let parts = shares(dir.path());
    ingest(&parts[0], &single);
    ingest(&lan_hour(), &single);
    let names = ["a", "b", "c"];
    let ports: Vec<u16> = names.iter().map(|_| free_port()).collect();
    let layout: Vec<(&str, u16)> = names.iter().copied().zip(ports.iter().copied()).collect();
    let client_file = dir.path().join("cluster.toml");
    std::fs::write(&client_file, cluster_toml(&layout, None, TOKEN)).unwrap();
    let mut nodes: Vec<Node> = Vec::new();
    for ((name, port), share) in layout.iter().zip(parts) {
        let archive = dir.path().join(format!("node-{name}"));
        ingest(&share, &archive);
        let config = dir.path().join(format!("{name}.toml"));
        std::fs::write(&config, cluster_toml(&layout, Some(name), TOKEN)).unwrap();
        let mut node = Node {
            name,
            archive,
            port: *port,
            config,
            server: None,
            log: None,
        };
        node.start();
        nodes.push(node);
    }
    wait_for_index(&nodes, 3);
    let cluster = client_file.as_path();

    // Packets: the federated answer is the single archive's, byte for byte.
    let filters = [
        "",
        "tcp",
        "udp",
        "icmp",
        "arp",
        "ip6",
        "port 53",
        "tcp.port == 10050",
        "tcp.flags.syn == 1 && tcp.flags.ack == 0",
        &format!("host {HOST}"),
        &format!("ip.src == {HOST} && tcp"),
        "net 10.64.88.0/24",
        "ip.addr == 10.64.0.0/16 && udp",
        "frame.len > 500",
        "ip.ttl < 64",
        "not tcp",
        "tcp.dstport in {139 10051 8080}",
        "udp.port == 137 || udp.port == 138",
        "vlan",
        "host 10.64.88.7 or host 10.64.93.4",
    ];
    for filter in filters {
        let (one, fed, _) = both(&single, cluster, filter, &[], dir.path());
        assert!(
            one.len() > 24 || filter == "vlan" || filter == "ip6",
            "{filter}: the single archive found nothing"
        );
        assert_eq!(
            one, fed,
            "{filter}: the cluster's pcap differs from one archive's"
        );
    }
    // With a window, a limit, counts, and JSON lines tagged by node.
    let (one, fed, _) = both(
        &single,
        cluster,
        "tcp",
        &[
            "--since",
            "2012-11-22T17:50:00Z",
            "--until",
            "2012-11-23T17:30:00Z",
        ],
        dir.path(),
    );
    assert_eq!(one, fed);
    let (one, fed, _) = both(&single, cluster, "udp", &["--limit", "25"], dir.path());
    assert_eq!(one, fed);
    let count_one = ok(&query(&[
        "tcp",
        "--archive",
        single.to_str().unwrap(),
        "--count",
    ]));
    let count_fed = ok(&query(&[
        "tcp",
        "--cluster",
        cluster.to_str().unwrap(),
        "--count",
    ]));
    assert_eq!(count_one, count_fed);
    let lines = ok(&query(&[
        &format!("host {HOST}"),
        "--cluster",
        cluster.to_str().unwrap(),
        "-F",
        "jsonl",
    ]));
    let tagged: Vec<serde_json::Value> = lines
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(tagged.iter().any(|v| v["node"] == "a") && tagged.iter().any(|v| v["node"] == "b"));
    assert!(
        tagged.iter().all(|v| v["node"] != "c"),
        "c holds none of {HOST}'s packets"
    );

    // A question for an address only b holds in the window reaches b alone.
    let before: Vec<u64> = nodes.iter().map(|n| n.requests("/api/v1/query")).collect();
    let (one, fed, stderr) = both(
        &single,
        cluster,
        &format!("host {HOST}"),
        &["--since", "2012-11-23T00:00:00Z"],
        dir.path(),
    );
    assert_eq!(one, fed);
    assert!(one.len() > 24);
    let after: Vec<u64> = nodes.iter().map(|n| n.requests("/api/v1/query")).collect();
    assert_eq!(
        after
            .iter()
            .zip(&before)
            .map(|(a, b)| a - b)
            .collect::<Vec<_>>(),
        vec![0, 1, 0],
        "only b is asked: {stderr}"
    );
    assert!(stderr.contains("asked b ("), "{stderr}");

    // Connections: the same lookups, and pages that follow each other across
    // the nodes, give the single archive's connections.
    let untag = |line: &str| {
        let mut v: serde_json::Value = serde_json::from_str(line).unwrap();
        v.as_object_mut().unwrap().remove("node");
        v.to_string()
    };
    let flows = |args: &[&str]| -> (Vec<String>, Vec<String>) {
        let from = |place: [&str; 2]| {
            let common = [
                "flows", place[0], place[1], "-F", "jsonl", "--limit", "100000",
            ];
            ok(&hindsight(&[&common[..], args].concat()))
        };
        let one = from(["--archive", single.to_str().unwrap()]);
        let fed = from(["--cluster", cluster.to_str().unwrap()]);
        (
            one.lines().map(untag).collect(),
            fed.lines().map(untag).collect(),
        )
    };
    for args in [
        vec!["--ip", HOST],
        vec!["--ip", "10.64.88.0/24"],
        vec!["--ip", "10.64.94.141", "--since", "2012-11-23T00:00:00Z"],
        vec!["host 10.64.93.4 and port 139"],
        vec!["--ip", "10.0.0.0/8", "tcp.flags.syn == 1"],
        // By name: each node's name keys, merged in their order.
        vec!["dns.qry.name == \"router.bittorrent.com\""],
        vec!["dns.qry.name matches \"(^|\\\\.)com$\""],
    ] {
        let (one, fed) = flows(&args);
        assert!(
            !one.is_empty(),
            "{args:?}: the single archive found no connection"
        );
        assert_eq!(one, fed, "{args:?}");
    }
    // Every page of a lookup across the nodes, each asked with the cursor
    // the one before ended with.
    let pages = |select: &[&str], limit: &str| -> Vec<String> {
        let mut paged = Vec::new();
        let mut after: Option<String> = None;
        for _ in 0..1000 {
            let mut args = vec!["flows", "--cluster", cluster.to_str().unwrap()];
            args.extend(select);
            args.extend(["-F", "jsonl", "--limit", limit]);
            if let Some(cursor) = &after {
                args.extend(["--after", cursor.as_str()]);
            }
            let output = hindsight(&args);
            paged.extend(ok(&output).lines().map(untag));
            let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
            after = stderr
                .lines()
                .find_map(|l| l.strip_prefix("more connections: add --after "))
                .map(|rest| rest.split_whitespace().next().unwrap().to_owned());
            if after.is_none() {
                break;
            }
        }
        paged
    };
    let paged = pages(&["--ip", "10.64.88.0/24"], "700");
    let (one, _) = flows(&["--ip", "10.64.88.0/24"]);
    assert!(one.len() > 700, "{} connections: no second page", one.len());
    assert_eq!(paged, one, "pages of 700 across the nodes");
    // Pages of a lookup by name, across the nodes.
    let by_name = "dns.qry.name matches \"(^|\\\\.)com$\"";
    let paged = pages(&[by_name], "17");
    let (one, _) = flows(&[by_name]);
    assert!(one.len() > 100, "{} connections by name", one.len());
    assert_eq!(paged, one, "pages of 17 by name across the nodes");

    // SQL: each node filters and partly aggregates its rows, the rest runs
    // where the statement was asked; the answer is the single archive's.
    let sql = |statement: &str, place: [&str; 2]| {
        hindsight(&["sql", statement, place[0], place[1], "-F", "csv"])
    };
    let statements = [
        "SELECT count(*) AS n, sum(wire_len) AS bytes FROM packets",
        "SELECT ip_proto, count(*) AS n, sum(wire_len) AS bytes, min(ts) AS first, max(ts) AS last \
         FROM packets GROUP BY ip_proto ORDER BY ip_proto NULLS FIRST",
        "SELECT ip_str(src_addr) AS src, count(*) AS n FROM packets WHERE ip_version IS NOT NULL \
         GROUP BY src_addr ORDER BY n DESC, src LIMIT 10",
        "SELECT count(DISTINCT src_addr) AS sources, count(DISTINCT dst_port) AS ports FROM packets",
        "SELECT ip_proto, count(DISTINCT dst_addr) AS n FROM packets GROUP BY ip_proto \
         ORDER BY ip_proto NULLS FIRST",
        "SELECT ip_str(src_addr) AS src, ip_str(dst_addr) AS dst, dst_port, bytes_out + bytes_in AS bytes \
         FROM flows ORDER BY bytes DESC, src, dst, dst_port LIMIT 10",
        "SELECT state, count(*) AS n, sum(packets_out + packets_in) AS packets FROM flows \
         GROUP BY state ORDER BY state",
        "SELECT time_bucket(INTERVAL '10 minutes', ts) AS t, count(*) AS n FROM packets \
         WHERE ts >= '2012-11-23T00:00:00Z' GROUP BY t ORDER BY t",
        "SELECT count(*) AS n, avg(wire_len) AS mean FROM packets \
         WHERE src_addr = ip('10.64.94.199') OR dst_addr = ip('10.64.94.199')",
        "SELECT dst_port, count(*) AS n FROM flows WHERE ip_proto = 17 GROUP BY dst_port \
         ORDER BY n DESC, dst_port LIMIT 5",
        "SELECT count(*) AS n FROM packets p JOIN flows f ON p.src_addr = f.src_addr \
         AND p.dst_addr = f.dst_addr AND p.src_port = f.src_port AND p.dst_port = f.dst_port \
         WHERE f.dst_port = 53 AND p.dst_port = 53",
        "SELECT count(DISTINCT uid) AS n FROM flows WHERE dst_port = 445",
        "SELECT ip_str(dst_addr) AS dst, count(DISTINCT src_addr) AS sources FROM packets \
         WHERE tcp_flags = 2 GROUP BY dst_addr HAVING count(DISTINCT src_addr) > 1 \
         ORDER BY sources DESC, dst LIMIT 10",
        // One partition above the cut stays one (a global limit, the left
        // side of a nested loop join), however many nodes answer.
        "SELECT count(*) AS n FROM (SELECT 1 AS c FROM packets LIMIT 749) AS t",
        "SELECT count(*) AS n FROM (SELECT src_port FROM packets \
         WHERE EXISTS (SELECT 1 FROM flows WHERE dst_port = 53) GROUP BY src_port) AS t",
    ];
    for statement in statements {
        let one = ok(&sql(statement, ["--archive", single.to_str().unwrap()]));
        let fed = ok(&sql(statement, ["--cluster", cluster.to_str().unwrap()]));
        assert!(one.lines().count() > 1, "{statement}: no rows\n{one}");
        assert_eq!(one, fed, "{statement}");
    }
    // The plan shows the cut: a partial aggregation on the nodes.
    let plan = ok(&hindsight(&[
        "sql",
        statements[1],
        "--cluster",
        cluster.to_str().unwrap(),
        "--explain",
    ]));
    assert!(
        plan.contains("NodesExec: nodes=[a, b, c], on each: AggregateExec: mode=Partial"),
        "{plan}"
    );
    // A statement on an address only b holds in its window reaches b alone.
    let before: Vec<u64> = nodes
        .iter()
        .map(|n| n.requests("/api/v1/cluster/fragment"))
        .collect();
    let rare = "SELECT count(*) AS n FROM packets WHERE ts >= '2012-11-23T00:00:00Z' \
                AND (src_addr = ip('10.64.94.199') OR dst_addr = ip('10.64.94.199'))";
    let one = ok(&sql(rare, ["--archive", single.to_str().unwrap()]));
    let output = sql(rare, ["--cluster", cluster.to_str().unwrap()]);
    assert_eq!(one, ok(&output));
    let after: Vec<u64> = nodes
        .iter()
        .map(|n| n.requests("/api/v1/cluster/fragment"))
        .collect();
    assert_eq!(
        after
            .iter()
            .zip(&before)
            .map(|(a, b)| a - b)
            .collect::<Vec<_>>(),
        vec![0, 1, 0],
        "only b is asked: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    // A fragment that is not a cut (here: not a plan at all) is refused.
    let refused = nodes[1].post("/api/v1/cluster/fragment", "SELECT 1");
    assert!(
        refused.starts_with("HTTP/1.0 400") || refused.starts_with("HTTP/1.1 400"),
        "{refused}"
    );

    // The same through the API of any node, with cluster=true.
    let answer = nodes[1].post(
        "/api/v1/sql",
        &serde_json::json!({"sql": statements[0], "cluster": true, "format": "csv"}).to_string(),
    );
    let one_csv = ok(&sql(statements[0], ["--archive", single.to_str().unwrap()]));
    assert!(answer.ends_with(&one_csv), "{answer}");
    let answer = nodes[2].get(&format!(
        "/api/v1/query?cluster=true&format=jsonl&filter=host%20{HOST}"
    ));
    assert!(
        answer.starts_with("HTTP/1.0 200") || answer.starts_with("HTTP/1.1 200"),
        "{answer}"
    );
    assert!(answer.contains("hindsight-nodes: "), "{answer}");
    assert!(!answer.contains("hindsight-partial"), "{answer}");

    // The web UI of a node searches all nodes: a node column, the nodes'
    // health.
    let browser = Browser::start(&dir.path().join("downloads"), &dir.path().join("profile"));
    browser.open(&format!("http://127.0.0.1:{}/", nodes[0].port));
    browser.wait_for("return document.title === 'hindsight'");
    browser.wait_for("return !document.getElementById('scope-label').hidden");
    browser.type_into("#filter", &format!("host {HOST}"));
    // The day before (a) and the day (b): 1,263 packets each.
    browser.script("document.getElementById('limit').value = '2000'");
    browser.click("#search");
    browser.wait_for("return document.getElementById('token-row').style.display === 'flex'");
    browser.type_into("#token", TOKEN);
    browser.click("#token-save");
    let status = browser.wait_for(
        "const s = document.getElementById('status').textContent; return s.includes('asked') ? s : ''",
    );
    assert!(status.as_str().unwrap().contains("asked: a,b)"), "{status}");
    let tagged = browser.script(
        "return [...document.querySelectorAll('#results td.node')].map(td => td.textContent)",
    );
    let tagged: Vec<&str> = tagged
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(tagged.len(), 2000, "the first 2000 of {HOST}'s packets");
    assert!(tagged.contains(&"a") && tagged.contains(&"b") && !tagged.contains(&"c"));
    let health = browser.wait_for(
        "const cells = [...document.querySelectorAll('#nodes td.health-ok')]; \
         return cells.length === 3 ? cells.length : 0",
    );
    assert_eq!(health, 3);
    assert_eq!(
        browser.script("return document.getElementById('partial').textContent"),
        ""
    );

    // Node c killed: answers come from a and b, partial, naming c.
    nodes[2].kill();
    browser.type_into("#filter", "tcp");
    browser.click("#search");
    let banner = browser.wait_for("return document.getElementById('partial').textContent");
    assert!(banner.as_str().unwrap().contains("node c: "), "{banner}");
    drop(browser);
    let output = query(&["tcp", "--cluster", cluster.to_str().unwrap(), "--count"]);
    assert_eq!(output.status.code(), Some(3), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("node c: ") && stderr.contains("partial"),
        "{stderr}"
    );
    let sql_output = sql(statements[0], ["--cluster", cluster.to_str().unwrap()]);
    assert_eq!(sql_output.status.code(), Some(3), "{sql_output:?}");
    assert!(
        String::from_utf8_lossy(&sql_output.stderr).contains("node c: "),
        "{sql_output:?}"
    );
    let answer = nodes[0].post(
        "/api/v1/sql",
        &serde_json::json!({"sql": statements[0], "cluster": true}).to_string(),
    );
    assert!(
        answer
            .to_ascii_lowercase()
            .contains("hindsight-partial: node c: "),
        "{answer}"
    );
    let partial: u64 = String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .unwrap();
    assert!(partial < count_one.trim().parse::<u64>().unwrap());
    let answer = nodes[0].get("/api/v1/query?cluster=true&format=jsonl&filter=tcp&limit=10");
    assert!(
        answer
            .to_ascii_lowercase()
            .contains("hindsight-partial: node c: "),
        "{answer}"
    );
    // ... and whole again once it is back.
    nodes[2].start();
    wait_for_index(&nodes, 3);
    let count_back = ok(&query(&[
        "tcp",
        "--cluster",
        cluster.to_str().unwrap(),
        "--count",
    ]));
    assert_eq!(count_back, count_one);
    assert_eq!(
        ok(&sql(
            statements[3],
            ["--cluster", cluster.to_str().unwrap()]
        )),
        ok(&sql(statements[3], ["--archive", single.to_str().unwrap()]))
    );

    // A node with the wrong token is refused and named.
    let log_c = nodes[2].kill();
    assert!(!log_c.contains("refused"), "{log_c}");
    // Its own token is wrong too: its file says the digest of the wrong
    // one, the index node's the right one.
    let wrong_node_token = "c-wrong-node-token-0123456789";
    std::fs::write(
        &nodes[2].config,
        cluster_toml(&layout, Some("c"), "a-wrong-token-0123456789")
            .replace(&node_token("c"), wrong_node_token)
            .replace(
                &hindsight_cluster::config::token_sha256(&node_token("c")),
                &hindsight_cluster::config::token_sha256(wrong_node_token),
            ),
    )
    .unwrap();
    nodes[2].start();
    let output = query(&["tcp", "--cluster", cluster.to_str().unwrap(), "--count"]);
    assert_eq!(output.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("node c: it refused the cluster's token (401)"),
        "{stderr}"
    );
    let status = ok(&hindsight(&[
        "cluster",
        "status",
        "--cluster",
        cluster.to_str().unwrap(),
    ]));
    assert!(status.contains("a ") && status.contains("ok"), "{status}");
    let log_c = nodes[2].kill();
    assert!(
        log_c.contains("sync with index node a: it refused this node's own token (401)"),
        "{log_c}"
    );
    for node in &mut nodes {
        node.kill();
    }
}
