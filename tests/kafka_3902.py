"""KAFKA-3902's case table for CHANGELOG_FILTER, shared by the tests of the filter, of the input
shapes and of the incremental runs.

Predicate throughout: ``v >= 0``. Events are ``(version, key, v)`` (``(version, key, v, ts)`` in
:data:`SEQUENCED`, whose ``ts`` is the ``sequence_by`` column); ``v=None`` is a delete.
Expectations are ``(change_type, v, version)`` for changes and records and ``(id, v)`` for final,
as ``(events, changes, records, final)``.
"""

from feeds import NULL_V

CASES = {
    # 2 / 3a: a new row that passes is inserted (records: upserted)
    "3a new row passes": (
        [(1, 1, 5)],
        [("insert", 5, 1)],
        [("upsert", 5, 1)],
        [(1, 5)],
    ),
    # 2 / 3a: a new row that fails: nothing with old values; a tombstone without them
    "3a new row filtered": (
        [(1, 1, -5)],
        [],
        [("delete", None, 1)],
        [],
    ),
    # 3b: delete of a row that passed: a delete carrying the old row
    "3b delete of a passing row": (
        [(1, 1, 5), (2, 1, None)],
        [("insert", 5, 1), ("delete", 5, 2)],
        [("upsert", 5, 1), ("delete", None, 2)],
        [],
    ),
    # 3b: delete of a row that was filtered: nothing (it already left the filtered table)
    "3b delete of a filtered row": (
        [(1, 1, -5), (2, 1, None)],
        [],
        [("delete", None, 1), ("delete", None, 2)],
        [],
    ),
    # 3c1: both pass: the pre/post pair
    "3c1 both pass": (
        [(1, 1, 5), (2, 1, 7)],
        [("insert", 5, 1), ("update_preimage", 5, 2), ("update_postimage", 7, 2)],
        [("upsert", 5, 1), ("upsert", 7, 2)],
        [(1, 7)],
    ),
    # 3c1 made minimal (sqlext's change feeds are minimal): an update whose rows are equal forwards nothing
    "3c1 both pass, row unchanged": (
        [(1, 1, 5, 1), (2, 1, 5, 1)],  # same ts too: ts is data
        [("insert", 5, 1)],
        [("upsert", 5, 1), ("upsert", 5, 2)],
        [(1, 5)],
    ),
    # 3c2: both fail: nothing (records: a tombstone each time)
    "3c2 both filtered": (
        [(1, 1, -5), (2, 1, -7)],
        [],
        [("delete", None, 1), ("delete", None, 2)],
        [],
    ),
    # 3c3: old passes, new fails: {old -> null}, a delete of the old row
    "3c3 passing row becomes filtered": (
        [(1, 1, 5), (2, 1, -7)],
        [("insert", 5, 1), ("delete", 5, 2)],
        [("upsert", 5, 1), ("delete", None, 2)],
        [],
    ),
    # 3c4: old fails, new passes: {null -> new}, an insert of the new row
    "3c4 filtered row starts passing": (
        [(1, 1, -5), (2, 1, 7)],
        [("insert", 7, 2)],
        [("delete", None, 1), ("upsert", 7, 2)],
        [(1, 7)],
    ),
    # a tombstone for a key never seen: nothing with old values, the tombstone without
    "tombstone for a key never seen": (
        [(1, 9, None)],
        [],
        [("delete", None, 1)],
        [],
    ),
    "re-insert after a delete": (
        [(1, 1, 5), (2, 1, None), (3, 1, 6)],
        [("insert", 5, 1), ("delete", 5, 2), ("insert", 6, 3)],
        [("upsert", 5, 1), ("delete", None, 2), ("upsert", 6, 3)],
        [(1, 6)],
    ),
    "a NULL predicate counts as filtered": (
        [(1, 1, 5), (2, 1, NULL_V)],
        [("insert", 5, 1), ("delete", 5, 2)],
        [("upsert", 5, 1), ("delete", None, 2)],
        [],
    ),
}


KEYS_PER_CASE = 1000  # case i's key k is i * 1000 + k in the feed the cases share


SEQUENCED = {
    # the change at version 2 is older (ts 5) than the key's latest (ts 10): ignored
    "stale update ignored": (
        [(1, 1, 5, 10), (2, 1, 7, 5)],
        [("insert", 5, 1)],
        [("upsert", 5, 1)],
        [(1, 5)],
    ),
    "stale delete ignored": (
        [(1, 1, 5, 10), (2, 1, None, 5)],
        [("insert", 5, 1)],
        [("upsert", 5, 1)],
        [(1, 5)],
    ),
    "newer change after a stale one applies": (
        [(1, 1, 5, 10), (2, 1, 7, 5), (3, 1, 9, 12)],
        [("insert", 5, 1), ("update_preimage", 5, 3), ("update_postimage", 9, 3)],
        [("upsert", 5, 1), ("upsert", 9, 3)],
        [(1, 9)],
    ),
    "equal timestamp is not stale": (
        [(1, 1, 5, 10), (2, 1, 7, 10)],
        [("insert", 5, 1), ("update_preimage", 5, 2), ("update_postimage", 7, 2)],
        [("upsert", 5, 1), ("upsert", 7, 2)],
        [(1, 7)],
    ),
}
