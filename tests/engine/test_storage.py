"""The storage package (``sqlext.storage``) on both of its ways to a store: through ``pyarrow.fs``
(the default for a local disk) and through the JVM's Hadoop ``FileSystem``
(``spark.sqlext.storage.io=hadoop``), each over a folder named in one of the test forms (a
plain path, a ``file://`` URI, a ``viewfs://`` mount table). Small files and JSON, listings,
renames that replace, deletes of what is not there, Parquet files read back with a filter;
layers that appear only once committed, on a store that renames atomically and on one that
does not (a commit file written last); failures that are ``[STORAGE_ERROR]`` naming the path;
and whole incremental runs over ``viewfs`` that give the rows of a run over plain paths and
leave nothing in the working folder."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

import sqlext.storage as sx
from rows import multiset
from sqlext.storage.backends import ArrowIO, HadoopIO, arrow_io_for, arrow_path
from sqlext.storage.credentials import azure_account
from sqlext.errors import SqlextError
from sqlext.streaming import run_available_now
from sqlext.streaming.state import KeyedState
from storage_forms import Storage

IO_CLASSES = {"arrow": ArrowIO, "hadoop": HadoopIO}


@pytest.fixture(params=list(IO_CLASSES))
def io(request, spark):
    """Which way sqlext reaches the store in the test: pyarrow, or the JVM's FileSystem. The
    setting is read when a URI is resolved (and resolutions are kept per setting), so it is set
    for the test and unset after."""
    if request.param == "hadoop":
        spark.conf.set(sx.IO_SETTING, "hadoop")
    yield request.param
    spark.conf.unset(sx.IO_SETTING)


@pytest.fixture
def folder(spark, tmp_path, storage, io):
    """A new folder, named in the test's storage form and reached the ``io`` way."""
    resolved = sx.resolve(spark, storage.uri(tmp_path / "store"))
    assert isinstance(resolved.io, IO_CLASSES[io]), (io, resolved.io)
    return resolved


def test_bytes_and_json_are_read_back_as_written(folder, tmp_path):
    data = bytes(range(256)) * 3
    (folder / "a" / "blob.bin").write_bytes(data)
    assert (folder / "a" / "blob.bin").read_bytes() == data
    assert (tmp_path / "store" / "a" / "blob.bin").read_bytes() == data  # the same folder on the disk
    (folder / "a" / "blob.bin").write_bytes(b"shorter")  # replaced whole
    assert (folder / "a" / "blob.bin").read_bytes() == b"shorter"
    record = {"name": "o'dd `x`", "n": [1, 2, None], "nested": {"ok": True}}
    (folder / "record.json").write_json(record)
    assert (folder / "record.json").read_json() == record
    assert (folder / "missing.json").read_json() is None
    (folder / "broken.json").write_bytes(b"{not json")
    assert (folder / "broken.json").read_json() is None
    assert (folder / "a").is_dir() and (folder / "record.json").exists() and not (folder / "record.json").is_dir()
    assert not (folder / "nothing").exists()
    assert not [p for p in (tmp_path / "store").rglob("*") if p.name.endswith(".tmp")]  # no temporary name left


def test_entries_name_files_and_folders(folder):
    (folder / "sub").mkdirs()
    (folder / "one.txt").write_bytes(b"12345")
    (folder / "sub" / "inner.txt").write_bytes(b"x")
    entries = {e.name: e for e in folder.entries()}
    assert set(entries) == {"sub", "one.txt"}  # one level, no checksum or temporary files
    assert entries["sub"].is_dir and not entries["one.txt"].is_dir
    assert entries["one.txt"].size == 5 and entries["one.txt"].mtime_ns > 0
    assert (folder / "nowhere").entries() == []
    assert sorted(f.name for f in sx.walk_files(folder)) == ["inner.txt", "one.txt"]


def test_rename_replaces_the_target(folder):
    (folder / "new.txt").write_bytes(b"new")
    (folder / "old.txt").write_bytes(b"old")
    (folder / "new.txt").rename_to(folder / "old.txt")
    assert (folder / "old.txt").read_bytes() == b"new" and not (folder / "new.txt").exists()
    (folder / "layer" / "f").write_bytes(b"1")
    (folder / "target" / "stale").write_bytes(b"2")
    (folder / "layer").rename_to(folder / "deep" / "target")  # into a folder that does not exist yet
    (folder / "deep" / "target").rename_to(folder / "target")  # over a folder: replaced, not moved into it
    assert sorted(e.name for e in (folder / "target").entries()) == ["f"]
    assert not (folder / "layer").exists() and not (folder / "deep" / "target").exists()


def test_deleting_what_is_not_there_does_nothing(folder):
    (folder / "no" / "such" / "thing").delete()
    (folder / "keep.txt").write_bytes(b"k")
    (folder / "gone" / "a" / "b.txt").write_bytes(b"b")
    (folder / "gone").delete()  # a folder, with all it holds
    (folder / "gone").delete()
    assert [e.name for e in folder.entries()] == ["keep.txt"]


def test_a_parquet_file_is_read_back_with_a_filter_and_columns(folder):
    table = pa.table({"k": pa.array(range(10), pa.int64()), "name": [f"n{i}" for i in range(10)],
                      "v": pa.array([None if i % 4 == 0 else i * 10 for i in range(10)], pa.int64())})
    (folder / "layer" / "part-00000.parquet").write_parquet(table, row_group_size=3)
    (folder / "layer" / "part-00001.parquet").write_parquet(table.slice(0, 2))
    files = (folder / "layer").files()
    assert [f.name for f in files] == ["part-00000.parquet", "part-00001.parquet"]
    assert files[0].parquet_rows() == 10 and files[0].parquet_schema().names == ["k", "name", "v"]
    wide = pa.schema([("k", pa.int64()), ("name", pa.string()), ("v", pa.int64())])
    whole = sx.read_parquet(files, wide)
    assert whole.num_rows == 12
    got = sx.read_parquet(files, wide, columns=["k", "v"], filter=pc.field("k") >= 7)
    assert got.column_names == ["k", "v"]
    assert sorted(zip(got["k"].to_pylist(), got["v"].to_pylist())) == [(7, 70), (8, None), (9, 90)]
    assert sx.read_parquet([], wide, columns=["k"]).num_rows == 0
    # a slice at a time, as a task reads a long history: the same rows, no slice larger than asked
    slices = list(sx.parquet_slices(files, wide, rows=4))
    assert pa.concat_tables(slices).equals(whole) and list(sx.parquet_slices([], wide)) == []
    if folder.io.streams:
        assert max(t.num_rows for t in slices) <= 4 and len(slices) >= 3
    assert sx.folder_bytes(folder / "layer") == sum(e.size for e in (folder / "layer").entries()) > 0
    assert sx.folder_bytes(folder / "nothing here") == 0


def test_a_layer_is_seen_only_once_committed(folder):
    layers = folder / "state"
    pending = (layers / "base-1").begin_layer()
    (pending / "part-00000.parquet").write_parquet(pa.table({"k": [1, 2]}), whole=False)
    assert layers.committed_names() == set() and not (layers / "base-1").committed()
    (layers / "base-1").commit_layer()
    assert layers.committed_names() == {"base-1"} and (layers / "base-1").committed()
    assert [f.name for f in (layers / "base-1").files()] == ["part-00000.parquet"]
    again = (layers / "base-1").begin_layer()  # a replayed batch writes the layer again
    (again / "part-00001.parquet").write_parquet(pa.table({"k": [3]}), whole=False)
    (layers / "base-1").commit_layer()
    assert [f.name for f in (layers / "base-1").files()] == ["part-00001.parquet"]  # nothing of the first
    assert layers.committed_names() == {"base-1"}
    (layers / "base-1").delete_layer()
    assert layers.committed_names() == set() and layers.entries() == []


def _without_atomic_rename(path) -> sx.Folder:
    """A local folder read and written as on an object store: no atomic rename, so a layer is
    whole only once its commit file is there."""
    return sx.Folder("file:" + str(path), ArrowIO(pafs.LocalFileSystem(), False), str(path))


def test_without_atomic_rename_a_layer_without_its_commit_file_is_ignored(tmp_path):
    layers = _without_atomic_rename(tmp_path / "state")
    assert not layers.atomic_rename
    written = (layers / "base-0").begin_layer()
    assert written == layers / "base-0"  # written in place
    (written / "part-00000.parquet").write_parquet(pa.table({"k": [1]}), whole=False)
    assert layers.committed_names() == set() and not (layers / "base-0").committed()
    (layers / "base-0").commit_layer()
    assert (tmp_path / "state" / "base-0.commit").exists()
    assert layers.committed_names() == {"base-0"} and (layers / "base-0").committed()
    (tmp_path / "state" / "base-3").mkdir()  # a layer a crashed batch left half written
    (tmp_path / "state" / "delta-2.commit").write_bytes(b"")  # a commit file whose layer is gone
    assert layers.committed_names() == {"base-0"}
    (layers / "base-0").delete_layer()
    assert sorted(p.name for p in (tmp_path / "state").iterdir()) == ["base-3", "delta-2.commit"]


def test_a_keyed_state_reads_no_layer_without_its_commit_file(tmp_path):
    schema = StructType([StructField("k", LongType()), StructField("v", StringType())])
    state = KeyedState(_without_atomic_rename(tmp_path / "state"), ["k"], share=float("inf"))
    state.record_schema(schema)
    table = pa.table({"k": pa.array([1, 2], pa.int64()), "v": ["a", "b"]})
    state.write(state.before(0), table, 0)
    state.write(state.before(1), pa.table({"k": pa.array([2], pa.int64()), "v": ["c"]}), 1)
    assert state.before(2).layers() == ((0, 0, 1),)
    assert sorted(state.before(2).rows().to_pylist(), key=lambda r: r["k"]) == [{"k": 1, "v": "a"},
                                                                                {"k": 2, "v": "c"}]
    for kind, batch_id in (("base", 2), ("delta", 3)):  # layers of batches that died before their commit files
        (state.part(0).path(kind, batch_id).begin_layer() / "part-00000.parquet") \
            .write_parquet(pa.table({"k": pa.array([9], pa.int64()), "v": ["late"]}), whole=False)
    assert (tmp_path / "state" / "base-2").is_dir() and (tmp_path / "state" / "delta-3").is_dir()
    view = state.before(4)
    assert view.layers() == ((0, 0, 1),)
    assert sorted(view.rows().to_pylist(), key=lambda r: r["k"]) == [{"k": 1, "v": "a"}, {"k": 2, "v": "c"}]


def _assert_storage_error(raised, *named):
    text = str(raised.value)
    assert raised.value.error_class == "STORAGE_ERROR", text
    for part in named:
        assert part in text, (part, text)
    assert "py4j" not in text.lower() and "traceback" not in text.lower(), text


def test_a_scheme_without_a_file_system_is_a_storage_error(spark):
    with pytest.raises(SqlextError) as raised:
        sx.resolve(spark, "nosuch://host/x")
    _assert_storage_error(raised, "nosuch://host/x", "resolve")


def test_writing_under_a_regular_file_is_a_storage_error(folder):
    (folder / "plain").write_bytes(b"a file, not a folder")
    with pytest.raises(SqlextError) as raised:
        (folder / "plain" / "child.json").write_json({"a": 1})
    _assert_storage_error(raised, str(folder / "plain" / "child.json"), "write")
    assert (folder / "plain").read_bytes() == b"a file, not a folder"


# -- whole runs

FILTER = ("SELECT * FROM CHANGELOG_FILTER(input => TABLE(STREAM(acc)), key => 'id', predicate => 'balance >= 0', "
          "emit => 'changes')")
ACC = "id BIGINT, balance BIGINT, _change_type STRING, _commit_version BIGINT"
INCREMENTS = [[(k, k % 7 - 2, "insert", k) for k in range(60)],
              [(k, k % 5 - 1, "update_postimage", 100 + k) for k in range(0, 60, 7)] + [(61, 3, "insert", 200)]]


def _filter_runs(spark, root, storage: Storage) -> multiset:
    """Two incremental CHANGELOG_FILTER runs over folders under ``root``, named in ``storage``'s
    form; the output's rows after them."""
    uri = storage.uri
    for rows in INCREMENTS:
        spark.createDataFrame(rows, ACC).coalesce(1).write.mode("append").parquet(uri(root / "acc"))
        run_available_now(spark, FILTER, checkpoint=uri(root / "cp"), output=uri(root / "out"),
                          sources={"acc": uri(root / "acc")})
    return multiset(r.asDict() for r in spark.read.parquet(uri(root / "out")).collect())


def test_runs_through_hadoop_on_viewfs_give_the_rows_of_runs_on_plain_paths(spark, tmp_path):
    plain = _filter_runs(spark, tmp_path / "plain", Storage("plain"))
    spark.conf.set(sx.IO_SETTING, "hadoop")  # resolutions are kept per setting: these are new
    try:
        assert isinstance(sx.resolve(spark, Storage("viewfs").uri(tmp_path)).io, HadoopIO)
        through_hadoop = _filter_runs(spark, tmp_path / "viewfs", Storage("viewfs"))
    finally:
        spark.conf.unset(sx.IO_SETTING)
    assert sum(plain.values()) > len(INCREMENTS[0]) // 2 and through_hadoop == plain
    state = tmp_path / "viewfs" / "cp" / "sqlext-state"
    assert any(p.name.startswith("base-") for p in state.rglob("*") if p.is_dir())  # the state is where viewfs maps


def test_a_run_on_viewfs_writes_nothing_in_the_working_folder(spark, tmp_path, monkeypatch):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    rows = _filter_runs(spark, tmp_path / "lake", Storage("viewfs"))
    assert rows and os.listdir(cwd) == []
    assert (tmp_path / "lake" / "cp" / "commits").is_dir() and any((tmp_path / "lake" / "out").glob("*.parquet"))


# -- Azure: the account and credential pyarrow is given come from Hadoop's ABFS settings

HOST = "lake.dfs.core.windows.net"
CLOUD = {"dfs_storage_authority": ".dfs.core.windows.net", "blob_storage_authority": ".blob.core.windows.net"}


@pytest.mark.parametrize("settings, expected", [
    ({f"fs.azure.account.key.{HOST}": "K1", "fs.azure.account.key": "K0"},
     {"account_name": "lake", "account_key": "K1"}),  # the account's own setting first
    ({"fs.azure.account.key": "K0"}, {"account_name": "lake", "account_key": "K0"}),
    ({f"fs.azure.account.auth.type.{HOST}": "SAS", "fs.azure.sas.fixed.token": "?sv=2022&sig=x"},
     {"account_name": "lake", "sas_token": "sv=2022&sig=x"}),
    ({"fs.azure.account.auth.type": "OAuth",
      "fs.azure.account.oauth.provider.type": "org.apache.hadoop.fs.azurebfs.oauth2.ClientCredsTokenProvider",
      f"fs.azure.account.oauth2.client.id.{HOST}": "app", "fs.azure.account.oauth2.client.secret": "s3cr'et",
      "fs.azure.account.oauth2.client.endpoint": "https://login.microsoftonline.com/tenant-1/oauth2/token"},
     {"account_name": "lake", "client_id": "app", "client_secret": "s3cr'et", "tenant_id": "tenant-1"}),
    ({"fs.azure.account.auth.type": "OAuth",
      "fs.azure.account.oauth.provider.type": "org.apache.hadoop.fs.azurebfs.oauth2.MsiTokenProvider"},
     {"account_name": "lake"}),  # the machine's managed identity
    ({"fs.azure.account.auth.type": "OAuth",
      "fs.azure.account.oauth.provider.type": "org.apache.hadoop.fs.azurebfs.oauth2.MsiTokenProvider",
      "fs.azure.account.oauth2.client.id": "identity-2"},
     {"account_name": "lake", "client_id": "identity-2"}),
])
def test_an_azure_accounts_credential_comes_from_hadoops_settings(settings, expected):
    account = azure_account(HOST, settings)
    assert account == {**expected, **CLOUD}
    assert pafs.AzureFileSystem(**account).type_name == "abfs"  # names pyarrow takes (no request is made)


@pytest.mark.parametrize("host, settings", [
    (HOST, {}),  # no credential set: Hadoop's own lookup (e.g. a key provider) keeps the store
    (HOST, {"fs.azure.account.auth.type": "Custom", "fs.azure.account.key": "K"}),
    (HOST, {"fs.azure.account.auth.type": "OAuth",
            "fs.azure.account.oauth.provider.type": "com.example.MyTokenProvider"}),
    (HOST, {"fs.azure.account.auth.type": "OAuth",  # no tenant in the endpoint
            "fs.azure.account.oauth.provider.type": "org.apache.hadoop.fs.azurebfs.oauth2.ClientCredsTokenProvider",
            "fs.azure.account.oauth2.client.id": "app", "fs.azure.account.oauth2.client.secret": "s",
            "fs.azure.account.oauth2.client.endpoint": "https://login.microsoftonline.com/"}),
    (HOST, {"fs.azure.account.auth.type": "SAS", "fs.azure.sas.fixed.token": "sv=1",  # Hadoop takes the provider's
            "fs.azure.sas.token.provider.type": "com.example.MySasTokenProvider"}),
    ("localhost", {"fs.azure.account.key": "K"}),
])
def test_an_azure_credential_pyarrow_has_no_form_of_leaves_the_store_to_hadoop(host, settings):
    assert azure_account(host, settings) is None


def test_an_azure_account_in_another_cloud_keeps_its_domain():
    account = azure_account("lake.blob.core.chinacloudapi.cn", {"fs.azure.account.key": "K"})
    assert account["dfs_storage_authority"] == ".dfs.core.chinacloudapi.cn"
    assert account["blob_storage_authority"] == ".blob.core.chinacloudapi.cn"


@pytest.mark.parametrize("uri, path", [
    ("abfss://data@lake.dfs.core.windows.net/cp/my%20state", "data/cp/my state"),
    ("wasbs://data@lake.blob.core.windows.net/out", "data/out"),
    ("s3a://bucket/out", "bucket/out"),
    ("file:///tmp/a%20b", "/tmp/a b"),
])
def test_a_stores_uri_becomes_the_path_pyarrow_takes(uri, path):
    assert arrow_path(uri) == path


def test_an_azure_folder_without_a_credential_pyarrow_takes_goes_through_hadoop():
    assert arrow_io_for("abfss://data@lake.dfs.core.windows.net/cp", {}) is None

