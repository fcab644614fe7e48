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


def test_bench_forest_reports_the_run_the_memory_and_the_jump_round_floor(spark, capsys):
    from sqlext.bench.recursion import bench_forest

    seconds, peaks = bench_forest(spark, nodes=3000, runs=1, path="jump", floor=True)
    out = capsys.readouterr().out
    assert len(seconds) == 1 and seconds[0] > 0 and peaks[0] > 0
    assert "path 'jump': jump (" in out and "floor: one pointer-jumping round" in out and "median" in out
    assert spark.conf.get("spark.sqlext.recursion.rowLimit", "unset") == "unset"
