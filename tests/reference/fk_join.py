"""A plainly written replay of the foreign-key join workflow of Kafka Streams (KIP-213), the
reference FK_JOIN is checked against.

Two processors and the messages between them, as in KIP-213:

* the LHS keeps the left table; on a left change it sends subscription instructions to the
  RHS partition of the old and new foreign key;
* the RHS keeps the right table and the subscription store ``(fk, left key) -> hash``; it
  answers an instruction with a response ``(left key, hash, right row)`` when the
  instruction says so, and on a right change sends a response to every subscriber of that
  key (the prefix scan);
* the LHS checks each response's hash against the hash of its current row for that key and
  drops stale ones, then forwards a joined row, a padded row (left join) or a tombstone.

Messages are delivered at once, in order; so the hash check never drops anything here (the
check matters when the processors run in parallel), but it is kept, as written.

NULL foreign keys: a left row without one is not subscribed anywhere; a left join forwards
it padded with NULLs and an inner join treats it as absent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

DELETE_KEY_NO_PROPAGATE = "DELETE_KEY_NO_PROPAGATE"
DELETE_KEY_AND_PROPAGATE = "DELETE_KEY_AND_PROPAGATE"
PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE = "PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE"
PROPAGATE_ONLY_IF_FK_VAL_AVAILABLE = "PROPAGATE_ONLY_IF_FK_VAL_AVAILABLE"

TOMBSTONE = None


def row_hash(row: dict | None) -> int:
    return hash(None) if row is None else hash(tuple(sorted(row.items())))


@dataclass
class FkJoinReplay:
    join_type: str  # 'inner' or 'left'
    foreign_key: Callable[[dict], Any]
    left: dict = field(default_factory=dict)  # LHS state: left key -> row
    right: dict = field(default_factory=dict)  # RHS state: right key -> row
    subscriptions: dict = field(default_factory=dict)  # (fk, left key) -> hash
    records: list = field(default_factory=list)  # (left key, joined row or TOMBSTONE, version)

    # ---- LHS -------------------------------------------------------------------------
    def left_change(self, key, new: dict | None, version) -> None:
        old = self.left.get(key)
        if old is None and new is None:
            return
        if new is None:
            del self.left[key]
        else:
            self.left[key] = new
        old_fk = None if old is None else self.foreign_key(old)
        new_fk = None if new is None else self.foreign_key(new)
        new_hash = row_hash(new)

        if old is not None and old_fk is not None:
            if new is None:
                self.rhs_instruction(old_fk, key, new_hash, DELETE_KEY_AND_PROPAGATE, version)
            elif new_fk != old_fk:
                self.rhs_instruction(old_fk, key, new_hash, DELETE_KEY_NO_PROPAGATE, version)
        if new is None:
            if old_fk is None:  # never subscribed: the LHS retracts directly
                self.forward(key, TOMBSTONE, version)
            return
        if new_fk is None:  # no foreign key: no subscription
            if self.join_type == "left":
                self.forward(key, self.join(new, None), version)
            elif old is not None:
                self.forward(key, TOMBSTONE, version)
            return
        instruction = (
            PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE
            if old is not None or self.join_type == "left"
            else PROPAGATE_ONLY_IF_FK_VAL_AVAILABLE
        )
        self.rhs_instruction(new_fk, key, new_hash, instruction, version)

    def lhs_response(self, key, response_hash: int, right_row: dict | None, version) -> None:
        current = self.left.get(key)
        if row_hash(current) != response_hash:
            return  # stale: the left row changed since this subscription was sent
        if current is None:
            self.forward(key, TOMBSTONE, version)
        elif right_row is None:
            self.forward(key, self.join(current, None) if self.join_type == "left" else TOMBSTONE, version)
        else:
            self.forward(key, self.join(current, right_row), version)

    # ---- RHS -------------------------------------------------------------------------
    def rhs_instruction(self, fk, key, sub_hash: int, instruction: str, version) -> None:
        if instruction in (DELETE_KEY_NO_PROPAGATE, DELETE_KEY_AND_PROPAGATE):
            self.subscriptions.pop((fk, key), None)
            if instruction == DELETE_KEY_AND_PROPAGATE:
                self.lhs_response(key, sub_hash, None, version)
            return
        self.subscriptions[(fk, key)] = sub_hash
        right_row = self.right.get(fk)
        if right_row is not None:
            self.lhs_response(key, sub_hash, right_row, version)
        elif instruction == PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE:
            self.lhs_response(key, sub_hash, None, version)

    def right_change(self, right_key, new: dict | None, version) -> None:
        old = self.right.get(right_key)
        if old is None and new is None:
            return
        if new is None:
            del self.right[right_key]
        else:
            self.right[right_key] = new
        subscribers = sorted(
            ((k, h) for (fk, k), h in self.subscriptions.items() if fk == right_key),
            key=lambda item: repr(item[0]),
        )
        for key, sub_hash in subscribers:  # the prefix scan
            self.lhs_response(key, sub_hash, new, version)

    # ---- output ----------------------------------------------------------------------
    def join(self, left_row: dict, right_row: dict | None) -> dict:
        return {"left": left_row, "right": right_row}

    def forward(self, key, value, version) -> None:
        self.records.append((key, value, version))


def replay(events, join_type, foreign_key):
    """events: (version, side, key, row-or-None), in any order; replayed by version with the
    right side first at equal versions."""
    join = FkJoinReplay(join_type, foreign_key)
    for version, side, key, row in sorted(events, key=lambda e: (e[0], 0 if e[1] == "right" else 1)):
        if side == "left":
            join.left_change(key, row, version)
        else:
            join.right_change(key, row, version)
    return join


def result_table_changes(records):
    """The minimal change feed of the table the records build: per key and version, the
    result row before and after (None where absent)."""
    table, before_version, out = {}, {}, []
    by_key_version: dict = {}
    for key, value, version in records:
        if (key, version) not in by_key_version:
            by_key_version[(key, version)] = table.get(key)
        if value is TOMBSTONE:
            table.pop(key, None)
        else:
            table[key] = value
        before_version[(key, version)] = table.get(key)
    for (key, version), before in by_key_version.items():
        after = before_version[(key, version)]
        if before == after:
            continue
        if before is None:
            out.append(("insert", key, after, version))
        elif after is None:
            out.append(("delete", key, before, version))
        else:
            out.append(("update_preimage", key, before, version))
            out.append(("update_postimage", key, after, version))
    return out, table
