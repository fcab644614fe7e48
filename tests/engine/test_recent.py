"""What a process keeps between runs of its statements (compiled pipelines and walks, a
recursion's present edges): at most so many entries, the least recently used forgotten first."""

from __future__ import annotations

import threading

from sqlext.streaming.recent import Recent


def test_the_least_recently_used_entry_is_forgotten_first():
    kept = Recent(2)
    kept.put("a", 1)
    kept.put("b", 2)
    assert kept.get("a") == 1  # a is now the more recent
    kept.put("c", 3)
    assert (kept.get("a"), kept.get("b"), kept.get("c")) == (1, None, 3)
    assert len(kept) == 2


def test_an_entry_put_again_is_replaced_and_one_forgotten_is_gone():
    kept = Recent(2)
    kept.put("a", 1)
    kept.put("a", 2)
    assert kept.get("a") == 2 and len(kept) == 1
    kept.forget("a")
    kept.forget("never there")
    assert kept.get("a", "missing") == "missing" and len(kept) == 0


def test_threads_putting_at_once_leave_at_most_its_size():
    kept = Recent(5)

    def fill(start):
        for i in range(start, start + 2000):
            kept.put(i, i)
            kept.get(i - 1)

    threads = [threading.Thread(target=fill, args=(n * 10000,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(kept) == 5
