-- mice: the window's traffic from sources outside the top :k senders of the
-- past :history, by source and destination (fastbit-telegraphcq, section 6.2).
--
-- :k = 10           how many usual senders, and how many rows a window reports
-- :history = 7d     how far back the usual senders are counted
--
-- Reads the archive's flows (by the time they started) and live_flows.

-- History: the top k senders by bytes before the window.
CREATE TEMPORARY TABLE usual AS
SELECT src_addr
FROM flows
WHERE ts >= :window_start - :history AND ts < :window_start
GROUP BY src_addr
ORDER BY sum(bytes_out) DESC, src_addr
LIMIT :k;

-- Live: everything else, largest first.
SELECT ip_str(src_addr) AS src, ip_str(dst_addr) AS dst,
       sum(bytes_out) AS bytes, count(*) AS connections
FROM live_flows
WHERE src_addr NOT IN (SELECT src_addr FROM usual)
GROUP BY src_addr, dst_addr
ORDER BY bytes DESC, src, dst
LIMIT :k
