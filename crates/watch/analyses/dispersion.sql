-- dispersion: outside prefixes seen in the newest slide of the window and in
-- an earlier slide of it, with the lag between the two, and each prefix's
-- traffic before the window (fastbit-telegraphcq, section 6.5). The window
-- is the period: ten slides long, by default, as in the paper.
--
-- :prefix_len = 24    bits of a prefix (of the IPv4 address for IPv4)
-- :history = 7d       how far back each prefix's traffic is counted
--
-- Reads live_flows (connections by the time they ended) and the archive's
-- flows (by the time they started).

-- Live: the slides of the window each outside prefix was seen in.
CREATE TEMPORARY TABLE slots AS
SELECT DISTINCT ip_prefix(src_addr, :prefix_len) AS prefix,
       date_bin(:window_slide, last_ts, :window_start) AS slot
FROM live_flows
WHERE NOT ip_home(src_addr);

-- The prefixes of the newest slide seen before in the window, and the lags.
CREATE TEMPORARY TABLE seen AS
SELECT n.prefix,
       (CAST(n.slot AS BIGINT) - CAST(e.slot AS BIGINT)) / 1000000000 AS lag_secs
FROM slots AS n
JOIN slots AS e ON e.prefix = n.prefix AND e.slot < n.slot
WHERE n.slot = :window_end - :window_slide;

-- History: each such prefix's sources and bytes before the window (the
-- prefixes are bound into the condition).
SELECT ip_str(s.prefix) AS prefix, s.lag_secs,
       coalesce(h.sources, 0) AS sources_before, coalesce(h.bytes, 0) AS bytes_before
FROM seen AS s
LEFT JOIN (
  SELECT ip_prefix(src_addr, :prefix_len) AS prefix,
         count(DISTINCT src_addr) AS sources, sum(bytes_out) AS bytes
  FROM flows
  WHERE ip_prefix(src_addr, :prefix_len) IN (SELECT prefix FROM seen)
    AND ts >= :window_start - :history AND ts < :window_start
    AND NOT ip_home(src_addr)
  GROUP BY 1
) AS h ON h.prefix = s.prefix
ORDER BY prefix, s.lag_secs
