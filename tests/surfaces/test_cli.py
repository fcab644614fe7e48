"""The sqlext command as a user runs it: results as tables, rewrites explained, errors with
file, position and class (never a JVM stack trace)."""

import textwrap
from pathlib import Path

from sqlext.cli import main

EXAMPLE = Path(__file__).resolve().parents[2] / "sql_examples" / "changelog_filter.sql"


def test_run_prints_results_as_tables(spark, capsys):
    assert main(["run", str(EXAMPLE)]) == 0
    out = capsys.readouterr().out
    assert "| id | owner | balance | _change_type     | _commit_version |" in out
    assert "| 1  | alice | 120     | update_preimage  | 2               |" in out
    assert "(1 row)" in out  # the final table holds alice alone


def test_explain_shows_before_after_and_rules(spark, capsys):
    assert main(["explain", str(EXAMPLE)]) == 0
    out = capsys.readouterr().out
    assert "-- before" in out and "-- after" in out
    assert "fired  changelog_filter_to_sql: CHANGELOG_FILTER (emit => 'changes')" in out
    assert "LAG(" in out
    # the CREATE VIEW statement has nothing to rewrite: its rules are named on one line
    assert "(unchanged)" in out and "not fired: changelog_filter_to_sql, fk_join_to_sql" in out
    assert main(["explain", "--verbose", str(EXAMPLE)]) == 0
    assert "nothing in this statement for it to rewrite" in capsys.readouterr().out


def test_explain_without_spark_keeps_calls_for_the_registered_function(capsys, tmp_path):
    sql = tmp_path / "q.sql"
    sql.write_text("SELECT * FROM CHANGELOG_FILTER(input => TABLE(t), key => 'id', predicate => 'v > 0')")
    assert main(["explain", "--no-spark", "--verbose", str(sql)]) == 0
    out = capsys.readouterr().out
    assert "skipped  changelog_filter_to_sql" in out and "columns are unknown" in out


def test_bad_statement_reports_file_position_and_class(spark, capsys, tmp_path):
    sql = tmp_path / "bad.sql"
    sql.write_text(textwrap.dedent("""\
        CREATE OR REPLACE TEMP VIEW t AS SELECT 1 AS id, 5 AS v, 1L AS _commit_version;

          SELECT * FROM CHANGELOG_FILTER(input => TABLE(t), key => 'id', predicate => 'v >', emit => 'changes');
        SELECT 'never reached';
        """))
    assert main(["run", str(sql)]) == 1
    captured = capsys.readouterr()
    assert f"{sql}:3:3: [INVALID_SQL_EXPRESSION] CHANGELOG_FILTER: predicate => 'v >'" in captured.err
    assert "never reached" not in captured.out
    assert "Traceback" not in captured.err and "\tat org.apache" not in captured.err


def test_spark_errors_are_one_line_with_their_class(spark, capsys, tmp_path):
    sql = tmp_path / "missing.sql"
    sql.write_text("SELECT * FROM no_such_table")
    assert main(["run", str(sql)]) == 1
    err = capsys.readouterr().err
    assert f"{sql}:1:15: [TABLE_OR_VIEW_NOT_FOUND]" in err  # at the name, where Spark places it
    assert "\tat org.apache" not in err and "Traceback" not in err


def test_runtime_data_errors_are_reported_by_class(spark, capsys, tmp_path):
    sql = tmp_path / "tie.sql"
    sql.write_text(
        "CREATE OR REPLACE TEMP VIEW tie AS SELECT * FROM VALUES (1, 5, 1L), (1, 6, 1L) AS tie(id, v, _commit_version);\n"
        "SELECT * FROM CHANGELOG_FILTER(input => TABLE(tie), key => 'id', predicate => 'v > 0')")
    assert main(["run", str(sql)]) == 1
    err = capsys.readouterr().err
    assert f"{sql}:2:1: [AMBIGUOUS_ORDER] CHANGELOG_FILTER: two changes of key id=1" in err
    assert "\tat org.apache" not in err


def test_bench_filter_runs_both_sides_and_reports_a_ratio(spark, capsys):
    from sqlext.bench.changes import bench_filter

    mine, theirs = bench_filter(spark, rows=5000, runs=1)
    out = capsys.readouterr().out
    assert "ratio sqlext/native" in out and "CPU ratio sqlext/native" in out
    assert len(mine.seconds) == 1 and len(theirs.seconds) == 1
    # each run's CPU time of Spark's JVM (local mode: driver and executors) is recorded too
    assert len(mine.cpu) == 1 and len(theirs.cpu) == 1 and mine.cpu[0] > 0 and theirs.cpu[0] > 0


def test_bench_fk_checks_final_rows_and_reports_both_ratios(spark, capsys):
    assert main(["bench", "fk", "--left", "3000", "--right", "300", "--runs", "1"]) == 0
    out = capsys.readouterr().out
    assert "FK_JOIN emit => 'changes' (3,000 left and 300 right changes" in out
    sqlext_line = next(line for line in out.splitlines() if line.strip().startswith("sqlext"))
    assert "median" in sqlext_line and "CPU median" in sqlext_line
    assert "ratio sqlext/native:" in out and "CPU ratio sqlext/native:" in out
    assert "floor: the left change stream alone" in out and "the snapshot join's)" in out


SELF_JOIN = EXAMPLE.parent / "self_join.sql"


def test_explain_shows_rules_and_both_plans_as_topologies(spark, capsys):
    assert main(["explain", "--verbose", str(SELF_JOIN)]) == 0
    out = capsys.readouterr().out
    statements = out.split("\n== ")
    band = next(s for s in statements if "b.ts BETWEEN a.ts - INTERVAL 10 MINUTES" in s.split("-- after")[0])
    assert "fired  band_self_join_to_window" in band
    assert "skipped  self_join_aggregate_to_window: nothing in this statement" in band
    written = band[band.index("-- plan as written"):band.index("-- plan as rewritten")]
    rewritten = band[band.index("-- plan as rewritten"):]
    for plan in (written, rewritten):
        assert plan.count("Topologies:") == 1 and "Sub-topology: 0" in plan and "      --> " in plan
    # the join reads the view on both sides; the rewrite reads it once and holds no join store
    assert written.count("(relations: [") == 2 and rewritten.count("(relations: [") == 1
    assert "JOIN-" in written and "JOIN-" not in rewritten and "WINDOW-" in rewritten
    running = next(s for s in statements if "b.ts <= a.ts" in s.split("-- after")[0])
    assert "fired  self_join_aggregate_to_window" in running


def test_bench_selfjoin_runs_both_sides_and_checks_rows(spark, capsys):
    assert main(["bench", "selfjoin", "--rows", "2000", "--runs", "1"]) == 0
    out = capsys.readouterr().out
    assert out.count("ratio sqlext/native:") == 4
    assert "rules: band_self_join_to_window" in out and "rules: self_join_aggregate_to_window" in out


def test_bench_scale_prints_time_and_memory_per_size_and_draws_them(spark, capsys, tmp_path):
    import xml.etree.ElementTree as ET

    chart = tmp_path / "scale.svg"
    assert main(["bench", "scale", "--sizes", "1000,3000", "--runs", "1", "--plot", str(chart)]) == 0
    lines = [l for l in capsys.readouterr().out.splitlines() if " rows " in l]
    assert len(lines) == 8  # four functions, two sizes
    assert all(" s " in l and "driver" in l and "JVM" in l for l in lines)
    svg = ET.parse(chart).getroot()
    lines_drawn = svg.findall("{http://www.w3.org/2000/svg}polyline")
    assert len(lines_drawn) == 4 * 3  # time, driver memory and JVM memory of each function
