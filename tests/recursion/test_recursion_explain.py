"""What ``sqlext explain`` says about a recursion: the path it will take (graph walk, path
doubling, level by level) and why, decided by the code that runs it, so the path explained is
the path that runs; and the rules that did not fire on one line unless asked why."""

import pytest

import sqlext
from sqlext.cli import main
from sqlext.rewrites.pipeline import rewrite_statement
from sqlext.recursion.paths import choose_path, last_path

ANCESTORS = """WITH RECURSIVE r(node, ancestor) AS (
  SELECT id, parent FROM xp_nodes WHERE parent IS NOT NULL
  UNION ALL
  SELECT a.node, n.parent FROM r AS a JOIN xp_nodes AS n ON a.ancestor = n.id WHERE n.parent IS NOT NULL)
SELECT * FROM r"""
CASE_STEP = ("WITH RECURSIVE r(n, label) AS (SELECT 1, 'a' UNION ALL "
             "SELECT n + 1, CASE WHEN n > 1 THEN 'x' ELSE 'y' END FROM r WHERE n < 3) SELECT * FROM r")
REACH = ("WITH RECURSIVE r(n) AS (SELECT 1 UNION SELECT x.id FROM r JOIN xp_nodes AS x ON x.parent = r.n) "
         "SELECT * FROM r")
KEYED = ("WITH RECURSIVE r(k, v) USING KEY (k) AS (VALUES (1, 0) UNION ALL SELECT n.k, c.v + 1 "
         "FROM r AS n JOIN recurring.r AS c ON c.k = n.k WHERE n.v < 2) SELECT k, v FROM r")
SEMI = ("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT x.id FROM xp_nodes AS x LEFT SEMI JOIN r "
        "ON x.parent = r.n) SELECT * FROM r")


@pytest.fixture
def nodes(view):
    return view("xp_nodes", [(1, None), (2, 1), (3, 1), (4, 2), (5, 4)], "id int, parent int")


@pytest.mark.parametrize("query, setting, expected", [
    (ANCESTORS, "auto", "walk"),
    (ANCESTORS, "levels", "levels"),
    (ANCESTORS, "jump", "jump"),
    (CASE_STEP, "auto", "levels"),  # CASE is outside the walk's vocabulary
    (REACH, "auto", "walk"),
    (KEYED, "auto", "levels"),  # recurring.r is no relation to collect
    (SEMI, "auto", "levels"),  # the CTE on the right of a semi join: not a walk
], ids=["walk", "levels on request", "jump on request", "case", "union", "keyed", "semi join"])
def test_the_path_explained_is_the_path_that_runs(spark, nodes, path, query, setting, expected):
    path(setting)
    [recursion] = rewrite_statement(query).recursions
    choice = choose_path(spark, recursion.spec, recursion.scoped)
    assert choice.path == expected
    [explained] = sqlext.explain(query, spark=spark)
    assert explained.paths == [choice.describe()] and explained.paths[0].startswith("recursion r runs ")
    last_path.clear()
    sqlext.sql(spark, query).collect()
    assert last_path["path"] == expected


def test_explain_of_a_recursion_that_reads_another_one(spark, nodes):
    query = ("WITH RECURSIVE a(n) AS (SELECT 1 UNION ALL SELECT x.id FROM a JOIN xp_nodes AS x ON x.parent = a.n), "
             "b(n, d) AS (SELECT n, 0 FROM a UNION ALL SELECT b.n, b.d + 1 FROM b WHERE b.d < 2) SELECT * FROM b")
    [explained] = sqlext.explain(query, spark=spark)
    assert len(explained.paths) == 2
    assert explained.paths[0].startswith("recursion a runs as a graph walk")
    assert explained.paths[1].startswith("recursion b:") and "after a" in explained.paths[1]
    assert len(sqlext.sql(spark, query).collect()) == 5 * 3


def test_cli_explain_names_the_path_and_lists_idle_rules_on_one_line(spark, nodes, capsys, tmp_path):
    sql = tmp_path / "recursion.sql"
    sql.write_text(f"{ANCESTORS};\n{CASE_STEP};\n")
    assert main(["explain", str(sql)]) == 0
    out = capsys.readouterr().out
    statements = out.split("\n== ")
    assert len(statements) == 2
    assert "runs as a graph walk" in statements[0] and "runs level by level" in statements[1]
    assert "UNRESOLVABLE_TABLE_VALUED_FUNCTION" not in out and "Spark cannot plan it" not in out
    for statement in statements:
        assert statement.count("not fired: ") == 1 and "skipped " not in statement
    assert main(["explain", "--verbose", str(sql)]) == 0
    verbose = capsys.readouterr().out
    assert "not fired: " not in verbose
    assert verbose.count("skipped  changelog_filter_to_sql: nothing in this statement") == 2
    assert "runs as a graph walk" in verbose
