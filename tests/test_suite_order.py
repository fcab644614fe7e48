"""The order the suite's two workers take its files in (tests/conftest.py): every file the
heaviest-first list names exists, so a renamed or removed file does not drop out of it unseen,
and the collected tests follow the list."""

from pathlib import Path

from conftest import HEAVIEST_FILES, _heaviest_first

ROOT = Path(__file__).resolve().parents[1]


def test_every_file_the_heaviest_first_list_names_exists():
    assert len(set(HEAVIEST_FILES)) == len(HEAVIEST_FILES)
    assert [name for name in HEAVIEST_FILES if not (ROOT / name).is_file()] == []


def test_the_listed_files_sort_first_in_the_listed_order():
    class Item:
        def __init__(self, nodeid):
            self.nodeid = nodeid

    items = [Item("tests/test_dialect.py::test_a"), Item(f"{HEAVIEST_FILES[1]}::test_b"),
             Item(f"{HEAVIEST_FILES[0]}::test_c[x]"), Item("tests/test_catalogue.py::test_d")]
    assert [i.nodeid for i in sorted(items, key=_heaviest_first)] == [
        f"{HEAVIEST_FILES[0]}::test_c[x]", f"{HEAVIEST_FILES[1]}::test_b",
        "tests/test_dialect.py::test_a", "tests/test_catalogue.py::test_d"]
