"""What a process keeps from one run of a statement for the next: a map of a bounded size that
forgets its least recently used entry first. The queries of a process run their batches in
threads of their own, so one lock guards each map."""

from __future__ import annotations

import threading
from collections import OrderedDict


class Recent:
    """At most ``size`` entries, the least recently used forgotten first."""

    def __init__(self, size: int):
        self.size = size
        self._entries: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key, default=None):
        with self._lock:
            if key not in self._entries:
                return default
            self._entries.move_to_end(key)
            return self._entries[key]

    def put(self, key, value) -> None:
        with self._lock:
            self._entries.pop(key, None)
            self._entries[key] = value
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)

    def forget(self, key) -> None:
        with self._lock:
            self._entries.pop(key, None)

    def __len__(self) -> int:
        return len(self._entries)
