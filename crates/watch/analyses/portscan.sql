-- portscan: outside sources with the largest fan-out of distinct destination
-- and port pairs in the home network in the window, with the hosts each
-- talked to before (fastbit-telegraphcq, section 6.3).
--
-- :k = 10             how many sources a window reports at most
-- :min_fanout = 100   fewest destination and port pairs that make a scan
-- :history = 7d       how far back its usual peers are counted
--
-- Counts connection attempts in live_packets (TCP SYN without ACK, and UDP),
-- not connection records: a window is answered as soon as it closes, not a
-- flow timeout later.

-- Live: the sources that reached the most (host, port) pairs inside.
CREATE TEMPORARY TABLE scanners AS
SELECT src_addr, count(*) AS fanout,
       count(DISTINCT dst_addr) AS hosts, count(DISTINCT dst_port) AS ports
FROM (
  SELECT DISTINCT src_addr, dst_addr, dst_port
  FROM live_packets
  WHERE NOT ip_home(src_addr) AND ip_home(dst_addr)
    AND ((ip_proto = 6 AND tcp_flags & 18 = 2) OR ip_proto = 17)
) AS attempts
GROUP BY src_addr
HAVING count(*) >= :min_fanout
ORDER BY fanout DESC, src_addr
LIMIT :k;

-- History: the connections of those sources before the window (the list of
-- scanners is bound into the condition, so the scan of flows is pruned by it).
SELECT ip_str(s.src_addr) AS src, s.fanout, s.hosts, s.ports,
       coalesce(h.peers, 0) AS usual_peers, coalesce(h.connections, 0) AS connections_before
FROM scanners AS s
LEFT JOIN (
  SELECT src_addr, count(DISTINCT dst_addr) AS peers, count(*) AS connections
  FROM flows
  WHERE src_addr IN (SELECT src_addr FROM scanners)
    AND ts >= :window_start - :history AND ts < :window_start
  GROUP BY src_addr
) AS h ON h.src_addr = s.src_addr
ORDER BY s.fanout DESC, src
