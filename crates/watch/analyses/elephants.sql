-- elephants: the window's top :k outside sources by bytes sent into the home
-- network that were not among the top :k at the same time of day on any of
-- the past seven days (fastbit-telegraphcq, section 6.1).
--
-- :k = 10       how many sources a window reports at most
--
-- Reads live_flows (connections by the time they ended) and the archive's
-- flows (by the time they started, so the catalog skips other days).

-- Live: the window's top k outside sources.
CREATE TEMPORARY TABLE now_top AS
SELECT src_addr, sum(bytes_out) AS bytes, count(*) AS connections
FROM live_flows
WHERE NOT ip_home(src_addr) AND ip_home(dst_addr)
GROUP BY src_addr
ORDER BY bytes DESC, src_addr
LIMIT :k;

-- History: bytes per outside source in the same span of each past day.
CREATE TEMPORARY TABLE past AS
SELECT day, src_addr, sum(bytes_out) AS bytes
FROM (
  SELECT 1 AS day, src_addr, dst_addr, bytes_out FROM flows
  WHERE ts >= :window_start - INTERVAL '1 day' AND ts < :window_end - INTERVAL '1 day'
  UNION ALL
  SELECT 2, src_addr, dst_addr, bytes_out FROM flows
  WHERE ts >= :window_start - INTERVAL '2 days' AND ts < :window_end - INTERVAL '2 days'
  UNION ALL
  SELECT 3, src_addr, dst_addr, bytes_out FROM flows
  WHERE ts >= :window_start - INTERVAL '3 days' AND ts < :window_end - INTERVAL '3 days'
  UNION ALL
  SELECT 4, src_addr, dst_addr, bytes_out FROM flows
  WHERE ts >= :window_start - INTERVAL '4 days' AND ts < :window_end - INTERVAL '4 days'
  UNION ALL
  SELECT 5, src_addr, dst_addr, bytes_out FROM flows
  WHERE ts >= :window_start - INTERVAL '5 days' AND ts < :window_end - INTERVAL '5 days'
  UNION ALL
  SELECT 6, src_addr, dst_addr, bytes_out FROM flows
  WHERE ts >= :window_start - INTERVAL '6 days' AND ts < :window_end - INTERVAL '6 days'
  UNION ALL
  SELECT 7, src_addr, dst_addr, bytes_out FROM flows
  WHERE ts >= :window_start - INTERVAL '7 days' AND ts < :window_end - INTERVAL '7 days'
) AS days
WHERE NOT ip_home(src_addr) AND ip_home(dst_addr)
GROUP BY day, src_addr;

-- The top k of each past day.
CREATE TEMPORARY TABLE past_top AS
SELECT src_addr
FROM (
  SELECT src_addr,
         row_number() OVER (PARTITION BY day ORDER BY bytes DESC, src_addr) AS place
  FROM past
) AS ranked
WHERE place <= :k;

-- The join: today's elephants that were never elephants at this time of day.
SELECT ip_str(n.src_addr) AS src, n.bytes, n.connections,
       coalesce(p.days, 0) AS days_seen, coalesce(p.bytes, 0) AS bytes_before
FROM now_top AS n
LEFT JOIN (SELECT src_addr, count(*) AS days, sum(bytes) AS bytes FROM past GROUP BY src_addr) AS p
  ON p.src_addr = n.src_addr
WHERE n.src_addr NOT IN (SELECT src_addr FROM past_top)
ORDER BY n.bytes DESC, src
