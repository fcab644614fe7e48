"""``sqlext bench recursion`` at a tiny size: both sides run, agree, and report medians and
ratios (timings are printed, never asserted)."""

from sqlext.bench.recursion import bench_recursion


def test_bench_recursion_runs_all_three_cases_and_reports_ratios(spark, capsys):
    results = bench_recursion(spark, nodes=2000, depth=12, runs=1, levels=8)
    out = capsys.readouterr().out
    assert set(results) == {"chain", "forest", "dag", "levels"}
    assert out.count("ratio sqlext/native") == 3 and "cteRecursionRowLimit" in out
    for mine, theirs in (results[name][:2] for name in ("chain", "forest", "dag", "levels")):
        assert len(mine.seconds) == 1 and len(theirs.seconds) == 1
    # the level path's cost per level, against native, and USING KEY at two depths
    assert "level path, a counter to 8" in out and "ms a level at 2 levels" in out
    assert sorted(results["levels"][2]) == [2, 8]
    # the bench leaves Spark's own limits as it found them
    assert spark.conf.get("spark.sql.cteRecursionLevelLimit") == "100"
