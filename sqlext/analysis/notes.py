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

    def lines(self, verbose: bool = False, more: str = "") -> list[str]:
        """The notes as ``explain`` prints them: every note with ``verbose``; otherwise what
        fired, one line each, and the rules that did not fire on one line (``more`` says how
        to see why).

        >>> notes = Notes()
        >>> notes.fire("a", "did it"); notes.skip("b", "nothing here"); notes.skip("c", "no")
        >>> notes.lines()
        ['fired  a: did it', 'not fired: b, c']
        """
        if verbose:
            return [str(n) for n in self.items]
        lines = [str(n) for n in self.items if n.fired]
        idle = list(dict.fromkeys(n.rule for n in self.items if not n.fired and n.rule not in self.fired))
        if idle:
            lines.append(f"not fired: {', '.join(idle)}{more}")
        return lines

    def __iter__(self):
        return iter(self.items)
