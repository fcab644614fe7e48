-- Self-joins that sqlext rewrites into one pass over the table (see `sqlext explain` on
-- this file for the rewritten SQL and both plans as topologies).

-- A click stream: user, time, page, and how long the page was shown (seconds).
CREATE OR REPLACE TEMPORARY VIEW clicks AS
SELECT * FROM VALUES
  (1, 'ann', TIMESTAMP '2026-11-22 09:00:00', 'home',  12),
  (2, 'ann', TIMESTAMP '2026-11-22 09:04:00', 'shoes', 40),
  (3, 'ann', TIMESTAMP '2026-11-22 09:13:00', 'cart',  25),
  (4, 'ann', TIMESTAMP '2026-11-22 11:00:00', 'home',   8),
  (5, 'bob', TIMESTAMP '2026-11-22 09:01:00', 'home',  30),
  (6, 'bob', TIMESTAMP '2026-11-22 09:02:30', 'socks', 15),
  (7, NULL,  TIMESTAMP '2026-11-22 09:03:00', 'home',   5)
AS t(id, user_name, ts, page, seconds);

-- Session neighbours: every click with every click of the same user within 10 minutes,
-- itself included (a NULL user joins nobody, as in the join).
SELECT a.id, a.page, b.id AS near_id, b.page AS near_page
FROM clicks a JOIN clicks b
  ON a.user_name = b.user_name
 AND b.ts BETWEEN a.ts - INTERVAL 10 MINUTES AND a.ts + INTERVAL 10 MINUTES
ORDER BY a.id, near_id;

-- Running total of time on site per user, written as a triangular self-join.
SELECT a.id, a.user_name, a.ts, SUM(b.seconds) AS seconds_so_far, COUNT(*) AS clicks_so_far
FROM clicks a JOIN clicks b
  ON a.user_name = b.user_name AND b.ts <= a.ts
GROUP BY a.id, a.user_name, a.ts
ORDER BY a.id;
