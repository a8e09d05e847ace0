"""Views: the versioned member lists of seed 003 §3.1 (G1)."""

from __future__ import annotations

from dataclasses import dataclass

MemberId = str


@dataclass(frozen=True, slots=True)
class View:
    """`members` are ordered by seniority: the first is the longest-standing (the state donor)."""

    group: str
    version: int
    members: tuple[MemberId, ...]

    def __contains__(self, member: object) -> bool:
        return member in self.members

    def successor(self, leaving: frozenset[MemberId], joining: tuple[MemberId, ...]) -> View:
        kept = tuple(m for m in self.members if m not in leaving)
        return View(self.group, self.version + 1, kept + joining)
