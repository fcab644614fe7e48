"""``sqlext bench recursion`` at a tiny size: both sides run, agree, and report medians and
ratios (timings are printed, never asserted)."""

from sqlext.bench_recursion import bench_recursion


def test_bench_recursion_runs_all_three_cases_and_reports_ratios(spark, capsys):
    results = bench_recursion(spark, nodes=2000, depth=12, runs=1)
    out = capsys.readouterr().out
    assert set(results) == {"chain", "forest", "dag"}
    assert out.count("ratio sqlext/native") == 3 and "cteRecursionRowLimit" in out
    for mine, theirs in results.values():
        assert len(mine.seconds) == 1 and len(theirs.seconds) == 1
    # the bench leaves Spark's own limits as it found them
    assert spark.conf.get("spark.sql.cteRecursionLevelLimit") == "100"
