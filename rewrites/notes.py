"""What the rules did to a statement, for ``sqlext explain``: one line per rule."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Note:
    rule: str
    fired: bool
    text: str

    def __str__(self) -> str:
        return f"{'fired' if self.fired else 'skipped'}  {self.rule}: {self.text}"


@dataclass
class Notes:
    items: list[Note] = field(default_factory=list)

    def fire(self, rule: str, text: str) -> None:
        self.items.append(Note(rule, True, text))

    def skip(self, rule: str, text: str) -> None:
        self.items.append(Note(rule, False, text))

    @property
    def fired(self) -> list[str]:
        return [n.rule for n in self.items if n.fired]

    def __iter__(self):
        return iter(self.items)
