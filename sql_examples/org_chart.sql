-- An org chart: each employee names a manager. sqlext runs the recursive queries below as
-- RECURSIVE_EXPAND (`sqlext explain` shows it): one pass over the reporting lines, not a
-- Spark job per level.
CREATE OR REPLACE TEMP VIEW employees AS
SELECT * FROM VALUES
  (1, 'Ada',    'CEO',        NULL),
  (2, 'Brian',  'CTO',        1),
  (3, 'Chen',   'CFO',        1),
  (4, 'Dana',   'Engineer',   2),
  (5, 'Emeka',  'Engineer',   2),
  (6, 'Farah',  'Analyst',    3),
  (7, 'Gus',    'Intern',     4),
  (8, 'Hana',   'Contractor', NULL)
AS employees(id, name, title, manager_id);

-- everyone's chain of command up to the top, with its length
WITH RECURSIVE chain(id, boss_id, levels, path) AS (
  SELECT id, id, 0, name FROM employees
  UNION ALL
  SELECT c.id, e.manager_id, c.levels + 1, c.path || ' -> ' || m.name
  FROM chain AS c
  JOIN employees AS e ON c.boss_id = e.id
  JOIN employees AS m ON e.manager_id = m.id)
SELECT e.name, c.levels AS levels_below_top, c.path AS reports_up_to
FROM chain AS c JOIN employees AS e ON c.id = e.id
WHERE c.boss_id IN (SELECT id FROM employees WHERE manager_id IS NULL)
ORDER BY e.id;

-- headcount under each manager (direct and indirect reports)
WITH RECURSIVE under(manager_id, report_id) AS (
  SELECT manager_id, id FROM employees WHERE manager_id IS NOT NULL
  UNION ALL
  SELECT u.manager_id, e.id FROM under AS u JOIN employees AS e ON e.manager_id = u.report_id)
SELECT m.name AS manager, count(u.report_id) AS headcount
FROM employees AS m LEFT JOIN under AS u ON u.manager_id = m.id
GROUP BY m.id, m.name
HAVING count(u.report_id) > 0
ORDER BY headcount DESC, manager;
