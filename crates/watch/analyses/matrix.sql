-- matrix: the window's traffic matrix (inside host x outside host, bytes in
-- both directions) against the same span :lag earlier, by cosine similarity;
-- a window whose similarity is below :threshold is reported
-- (fastbit-telegraphcq, section 6.4).
--
-- :lag = 1d            how far back the window compared with lies
-- :threshold = 0.5     report windows less similar than this (0 to 1)
--
-- Reads live_flows and the archive's flows (by the time they started).

-- Live: the window's matrix.
CREATE TEMPORARY TABLE now_matrix AS
SELECT CASE WHEN ip_home(src_addr) THEN src_addr ELSE dst_addr END AS inside,
       CASE WHEN ip_home(src_addr) THEN dst_addr ELSE src_addr END AS outside,
       CAST(sum(bytes_out + bytes_in) AS DOUBLE) AS bytes
FROM live_flows
WHERE ip_home(src_addr) <> ip_home(dst_addr)
GROUP BY 1, 2;

-- History: the matrix of the same span :lag earlier.
CREATE TEMPORARY TABLE past_matrix AS
SELECT CASE WHEN ip_home(src_addr) THEN src_addr ELSE dst_addr END AS inside,
       CASE WHEN ip_home(src_addr) THEN dst_addr ELSE src_addr END AS outside,
       CAST(sum(bytes_out + bytes_in) AS DOUBLE) AS bytes
FROM flows
WHERE ts >= :window_start - :lag AND ts < :window_end - :lag
  AND ip_home(src_addr) <> ip_home(dst_addr)
GROUP BY 1, 2;

-- The comparison: cosine similarity of the two matrices as vectors.
SELECT round(similarity, 6) AS similarity, pairs_now, pairs_before, pairs_both,
       bytes_now, bytes_before
FROM (
  SELECT coalesce(sum(n.bytes * p.bytes)
                  / nullif(sqrt(sum(n.bytes * n.bytes)) * sqrt(sum(p.bytes * p.bytes)), 0), 0)
           AS similarity,
         count(n.inside) AS pairs_now, count(p.inside) AS pairs_before,
         count(CASE WHEN n.inside IS NOT NULL AND p.inside IS NOT NULL THEN 1 END) AS pairs_both,
         CAST(coalesce(sum(n.bytes), 0) AS BIGINT) AS bytes_now,
         CAST(coalesce(sum(p.bytes), 0) AS BIGINT) AS bytes_before
  FROM now_matrix AS n
  FULL OUTER JOIN past_matrix AS p ON p.inside = n.inside AND p.outside = n.outside
) AS compared
WHERE pairs_now > 0 AND similarity < :threshold
