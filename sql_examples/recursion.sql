-- KIP-857's example: count the descendants of every node of a tree.
-- The node rows (one current parent per node, like KIP-857's `parents` table) are
-- written in a scrambled order; the answer is the fixpoint over the table, whatever the order.
CREATE OR REPLACE TEMP VIEW parents AS
SELECT * FROM VALUES
  (5, 2), (9, 7), (1, NULL), (7, 3), (3, 1), (8, 3), (2, 1), (10, 9), (4, 2), (6, 2)
AS parents(node, parent);

-- every (node, ancestor) pair, then the number of descendants of each node (leaves: 0)
WITH RECURSIVE anc(node, ancestor) AS (
  SELECT node, parent FROM parents WHERE parent IS NOT NULL
  UNION ALL
  SELECT a.node, p.parent
  FROM anc AS a JOIN parents AS p ON a.ancestor = p.node
  WHERE p.parent IS NOT NULL)
SELECT p.node, count(a.node) AS descendants
FROM parents AS p LEFT JOIN anc AS a ON a.ancestor = p.node
GROUP BY p.node
ORDER BY p.node;

-- every node's way up to the root, with its depth and path
WITH RECURSIVE up(node, ancestor, depth, path) MAX RECURSION LEVEL 50 AS (
  SELECT node, node, 0, CAST(node AS STRING) FROM parents
  UNION ALL
  SELECT u.node, p.parent, u.depth + 1, u.path || ' > ' || CAST(p.parent AS STRING)
  FROM up AS u JOIN parents AS p ON u.ancestor = p.node
  WHERE p.parent IS NOT NULL)
SELECT node, depth, path FROM up WHERE ancestor = 1 ORDER BY node;
