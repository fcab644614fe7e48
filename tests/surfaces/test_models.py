"""sqlext build: dbt-style models over change feeds (staging, FK_JOIN, recursion) built in
dependency order; failures located in their file; dependents skipped; built tables intact."""

import shutil
import textwrap
from pathlib import Path

import pytest

from rows import ordered
from sqlext.cli import main
from sqlext.errors import SqlextError
from sqlext.models import ModelError, build, build_order, discover, select

MODELS = Path(__file__).resolve().parents[2] / "sql_examples" / "models"
DBT_PROJECT = Path(__file__).resolve().parents[1] / "dbt_project"


@pytest.fixture(scope="module")
def built(spark, tmp_path_factory):
    """The test models built once: (warehouse, results, printed lines)."""
    warehouse = tmp_path_factory.mktemp("warehouse")
    lines = []
    results = build(spark, MODELS, warehouse, out=lines.append)
    return warehouse, {r.name: r for r in results}, lines


def test_models_build_in_dependency_order(built):
    _, results, lines = built
    assert all(r.status == "OK" for r in results.values()), results
    order = list(results)
    assert order.index("stg_orders") < order.index("orders_with_customer") < order.index("customer_order_counts")
    assert order.index("stg_customers") < order.index("orders_with_customer")
    # a status line per model, with its rows and time
    ok = [line for line in lines if " OK " in line]
    assert len(ok) == len(results)
    assert any("OK table model orders_with_customer" in line and "[1 row in " in line for line in ok)  # one row
    assert lines[-1].startswith("Done in ") and "OK=8 ERROR=0 SKIP=0" in lines[-1]


def test_table_models_are_parquet_in_the_warehouse_and_views_are_not(spark, built):
    warehouse, results, _ = built
    for name, result in results.items():
        assert (warehouse / name).exists() == (result.materialized == "table"), name
    assert spark.read.parquet(str(warehouse / "stg_customers")).count() == results["stg_customers"].rows
    assert not list((warehouse / ".tmp").iterdir())  # nothing half-written left behind


def test_fk_join_model_joins_the_final_tables(spark, built):
    rows = spark.table("orders_with_customer").collect()
    # order 100 was deleted, 102 fails the staging filter, 101 moved to Ada, who moved to Paris
    assert ordered(rows) == [(101, 1, 40.0, "Ada", "Paris")]
    assert ordered(spark.table("customer_order_counts").collect()) == [("Ada", 1)]


def test_staging_model_reads_vars_and_forwards_minimal_changes(spark, built):
    changes = spark.table("stg_orders").orderBy("_commit_version", "order_id", "_change_type").collect()
    # order 102 (amount -1) never passes; order 101's move is a pre/post pair; 100 is deleted
    assert {r.order_id for r in changes} == {100, 101}
    assert [r._change_type for r in changes if r.order_id == 101] == ["insert", "update_postimage", "update_preimage"]
    assert [r._change_type for r in changes if r.order_id == 100] == ["insert", "delete"]


def test_recursive_model(spark, built):
    levels = {r.title: r.level for r in spark.table("org_levels").collect()}
    assert levels == {"ceo": 0, "cto": 1, "cfo": 1, "engineer": 2}


def test_failing_model_is_located_its_dependents_skipped_and_built_tables_kept(spark, built, tmp_path, capsys):
    warehouse, _, _ = built
    models = tmp_path / "models"
    shutil.copytree(MODELS, models)
    broken = models / "staging" / "stg_orders.sql"
    # fails while the table is written (ANSI division by zero), not while it is planned
    broken.write_text(broken.read_text().replace("amount > {{", "amount / 0 > {{"))
    before = sorted(p.name for p in (warehouse / "stg_orders").iterdir())
    old_rows = spark.read.parquet(str(warehouse / "orders_with_customer")).count()
    for name in ("stg_orders", "stg_customers", "raw_orders_changes", "orders_with_customer"):
        spark.catalog.dropTempView(name)  # upstream models come from the warehouse / their files

    assert main(["build", str(models), "--warehouse", str(warehouse), "--select", "stg_orders+"]) == 1
    captured = capsys.readouterr()
    assert f"{broken}:3:1: [DIVIDE_BY_ZERO]" in captured.err
    assert "Traceback" not in captured.err and "\tat org.apache" not in captured.err
    assert "ERROR table model stg_orders" in captured.out
    assert "SKIP table model orders_with_customer" in captured.out
    assert "SKIP view model customer_order_counts" in captured.out
    assert "OK=0 ERROR=1 SKIP=2" in captured.out
    # the tables of the earlier build are intact, and no half-written table is left
    assert sorted(p.name for p in (warehouse / "stg_orders").iterdir()) == before
    assert spark.read.parquet(str(warehouse / "orders_with_customer")).count() == old_rows
    assert not list((warehouse / ".tmp").iterdir())


def test_select_builds_a_model_and_its_dependents_reading_upstream_tables(spark, built, capsys):
    warehouse, _, _ = built
    spark.catalog.dropTempView("stg_customers")
    assert main(["build", str(MODELS), "--warehouse", str(warehouse), "--select", "orders_with_customer+"]) == 0
    out = capsys.readouterr().out
    assert "2 of 8 models" in out
    assert "OK table model orders_with_customer" in out and "OK view model customer_order_counts" in out
    assert "stg_orders" not in out.replace(str(warehouse), "")


def test_select_operators():
    graph = {"raw": set(), "stg": {"raw"}, "mart": {"stg"}, "other": {"raw"}}
    assert select(graph, ["stg+"]) == {"stg", "mart"}
    assert select(graph, ["+stg"]) == {"raw", "stg"}
    assert select(graph, ["raw+"]) == set(graph)
    with pytest.raises(SqlextError) as error:
        select(graph, ["nope+"])
    assert error.value.error_class == "MODEL_NOT_FOUND"


def write(folder: Path, files: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(textwrap.dedent(text))
    return folder


def test_cycle_is_an_error_naming_it(tmp_path):
    folder = write(tmp_path, {
        "a.sql": "SELECT * FROM {{ ref('c') }}",
        "b.sql": "SELECT * FROM {{ ref('a') }}",
        "c.sql": "SELECT * FROM {{ ref('b') }}",
        "d.sql": "SELECT 1 AS x",
    })
    graph = {name: set(m.refs) for name, m in discover(folder).items()}
    with pytest.raises(SqlextError) as error:
        build_order(graph)
    assert error.value.error_class == "MODEL_CYCLE"
    assert "a -> c -> b -> a" in str(error.value)


def test_unknown_ref_names_file_and_line(tmp_path):
    folder = write(tmp_path, {"a.sql": "SELECT *\nFROM {{ ref('missing') }}"})
    with pytest.raises(ModelError) as error:
        discover(folder)
    assert error.value.error_class == "MODEL_NOT_FOUND"
    assert (error.value.path.name, error.value.line) == ("a.sql", 2)


@pytest.mark.parametrize("text, error_class, line", [
    ("SELECT 1\n{{ config(materialized='table' }}", "MODEL_TEMPLATE_ERROR", 2),
    ("SELECT 1\n\n{{ unknown_macro() }}", "MODEL_TEMPLATE_ERROR", 3),
    ("{{ config(materialized='incremental') }}\nSELECT 1", "INVALID_MODEL_CONFIG", 1),
])
def test_template_errors(tmp_path, text, error_class, line):
    folder = write(tmp_path, {"m.sql": text})
    with pytest.raises(ModelError) as error:
        discover(folder)
    assert (error.value.error_class, error.value.line) == (error_class, line)


def test_two_files_one_name_is_an_error(tmp_path):
    write(tmp_path / "x", {"m.sql": "SELECT 1"})
    write(tmp_path / "y", {"m.sql": "SELECT 2"})
    with pytest.raises(SqlextError) as error:
        discover(tmp_path)
    assert error.value.error_class == "DUPLICATE_MODEL"


def test_a_dbt_project_is_handed_to_dbt_with_the_sqlext_adapter(spark, tmp_path):
    """``sqlext build`` on a dbt project (it has dbt_project.yml) runs ``dbt build`` through the
    sqlext adapter; with no profiles.yml anywhere dbt looks, it makes one for the project's
    profile, writing tables under --warehouse. CHANGELOG_FILTER in a model is rewritten."""
    import json
    import os
    import subprocess
    import sys

    project, warehouse = tmp_path / "project", tmp_path / "warehouse"
    shutil.copytree(DBT_PROJECT, project, ignore=shutil.ignore_patterns("profiles.yml", "target", "logs"))
    env = {k: v for k, v in os.environ.items() if k != "DBT_PROFILES_DIR"}
    env.update(HOME=str(tmp_path), PYSPARK_PYTHON=sys.executable, DBT_SEND_ANONYMOUS_USAGE_STATS="false")
    done = subprocess.run([str(Path(sys.executable).with_name("sqlext")), "build", str(project),
                           "--warehouse", str(warehouse)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "no profiles.yml found" in done.stdout
    results = json.loads((project / "target" / "run_results.json").read_text())["results"]
    assert {r["unique_id"].split(".")[-1]: r["status"] for r in results} == {
        "accounts_changes": "success", "accounts_in_credit": "success"}
    rows = spark.read.parquet(str(warehouse / "accounts_in_credit")).orderBy("_commit_version", "id").collect()
    assert [(r.id, r._change_type, r._commit_version) for r in rows] == [
        (1, "insert", 1), (1, "delete", 2), (2, "insert", 3)]


def test_a_dbt_project_holding_its_profiles_is_built_with_them_from_any_folder(tmp_path, monkeypatch):
    """dbt itself looks for profiles.yml in DBT_PROFILES_DIR, the current folder and ~/.dbt, not
    in the project given with --project-dir; a project that holds its own is built with it from
    any folder, and one dbt would find a profile for is left to dbt."""
    import yaml

    from sqlext.models import profile_source

    project, elsewhere, home = tmp_path / "project", tmp_path / "elsewhere", tmp_path / "home"
    shutil.copytree(DBT_PROJECT, project, ignore=shutil.ignore_patterns("target", "logs"))
    elsewhere.mkdir()
    home.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("DBT_PROFILES_DIR", raising=False)
    assert profile_source(project, tmp_path / "wh") == (project, None)
    (project / "profiles.yml").unlink()
    folder, generated = profile_source(project, tmp_path / "w h'{x}")
    target = yaml.safe_load(generated)["accounts"]["outputs"]["sqlext"]
    assert folder is None and target["type"] == "sqlext"
    assert target["server_side_parameters"]["spark.sql.warehouse.dir"] == str(tmp_path / "w h'{x}")
    (elsewhere / "profiles.yml").write_text("accounts: {}\n")
    assert profile_source(project, tmp_path / "wh") == (None, None)


def test_what_dbt_refuses_before_it_builds_is_said(tmp_path, monkeypatch, capsys):
    """dbt returns a refusal to start (here DBT_PROFILES_DIR names a folder that does not exist)
    without printing it; sqlext build prints it as one line and fails."""
    project = tmp_path / "project"
    shutil.copytree(DBT_PROJECT, project, ignore=shutil.ignore_patterns("target", "logs"))
    monkeypatch.setenv("DBT_PROFILES_DIR", str(tmp_path / "no such folder"))
    monkeypatch.setenv("DBT_SEND_ANONYMOUS_USAGE_STATS", "false")
    assert main(["build", str(project)]) == 1
    err = capsys.readouterr().err
    assert "[DBT_REFUSED] sqlext build:" in err and "no such folder" in err and str(project) in err


def test_build_of_a_folder_without_models_fails_before_spark(tmp_path, capsys):
    assert main(["build", str(tmp_path / "nowhere")]) == 1
    assert str(tmp_path / "nowhere") in capsys.readouterr().err


def test_unselected_upstream_table_must_be_in_the_warehouse(spark, built, tmp_path):
    for name in ("stg_orders", "stg_customers"):
        spark.catalog.dropTempView(name)
    errors = []
    results = build(spark, MODELS, tmp_path / "empty", selectors=["orders_with_customer"],
                    out=lambda line: None, err=errors.append)
    assert [(r.name, r.status) for r in results] == [("orders_with_customer", "ERROR")]
    assert "orders_with_customer.sql:5:" in errors[0] and "[MODEL_NOT_BUILT]" in errors[0]


def test_a_build_killed_while_writing_leaves_no_half_written_table(spark, tmp_path):
    """The build process dies (SIGKILL) while Spark writes a table: the warehouse holds the
    previous version of that table or none, never part of one; the next build completes."""
    import os
    import signal
    import subprocess
    import sys
    import time

    models, warehouse = tmp_path / "models", tmp_path / "warehouse"
    write(models, {
        "a_small.sql": "{{ config(materialized='table') }}\nSELECT 1 AS id",  # built first (ties by name)
        "big.sql": "{{ config(materialized='table') }}\n"
                   "SELECT id, sha2(CAST(id AS STRING), 256) AS h FROM range(40000000)",
    })
    build = subprocess.Popen([sys.executable, "-m", "sqlext.cli", "build", str(models), "--warehouse", str(warehouse)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 300
    writing = warehouse / ".tmp"
    while time.monotonic() < deadline and not (writing.exists() and any(p.name.startswith("big-") for p in writing.iterdir())):
        time.sleep(0.2)
    assert build.poll() is None, "the build ended before it wrote the big table"
    time.sleep(1.0)  # Spark is writing the big table's files now
    os.killpg(build.pid, signal.SIGKILL)
    build.wait(timeout=60)
    assert not (warehouse / "big").exists()  # no half-written table under its name
    assert (warehouse / "a_small").exists()  # the table built before it is there, whole
    assert spark.read.parquet(str(warehouse / "a_small")).count() == 1
    # the next build clears what the killed one left and completes
    write(models, {"big.sql": "{{ config(materialized='table') }}\nSELECT id FROM range(10)"})
    assert main(["build", str(models), "--warehouse", str(warehouse)]) == 0
    assert spark.read.parquet(str(warehouse / "big")).count() == 10
    assert not list((warehouse / ".tmp").iterdir())


def test_a_config_key_the_runner_does_not_support_is_reported_not_silently_ignored(tmp_path, capsys):
    write(tmp_path, {"m.sql": "{{ config(materialized='view', partition_by=['day']) }}\nSELECT 1 AS day"})
    models = discover(tmp_path)
    assert models["m"].materialized == "view"
    assert "model m: config partition_by=['day'] is not supported by this runner and is ignored" \
        in capsys.readouterr().err
