"""A static memory plan: every intermediate value of a straight-line program at a fixed offset
in one arena, values whose lifetimes do not overlap sharing bytes. Target-neutral:
the `c` and `sunway` targets plan a region's intermediates with it (targets/aot/lower.py).

The program is a topologically ordered list of `Step`s, each naming the values it reads and
writes; a view step (Reshape, Flatten...) names the value whose bytes its output *is*. Only
values given a size in `sizes` are placed; every other name is external (a region input or
output the caller passes by pointer, a constant in the weights blob), and so is a view of an
external value. This is the choice for graph inputs too: the plan does not decide that inputs
are copied into the arena; a caller that wants them there gives them a size, and a value no
step writes then lives from the start.

Lifetimes are inclusive step intervals: from the step that writes a value to the last step
that reads it (the value itself or any view of it: a view shares its source's offset and
extends its lifetime); values in `keep` (graph outputs placed in the arena) live to the end.
A step's outputs are live at that step, as are its inputs, so a step never writes over what it
reads. Offsets come from greedy-by-size best fit: largest value first, each placed in the
smallest gap (64-byte aligned) between values it overlaps in time, else above them all. Each
placement ends at most at the sum of the aligned sizes placed so far, so the arena is never
larger than giving every value its own bytes.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

from ...errors import GraphError

ALIGNMENT = 64


@dataclass(frozen=True, slots=True)
class Step:
    """One operation of the program: the value names it reads and writes; `alias` set for a
    view, whose single output is the bytes of `alias` reinterpreted."""
    name: str
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    alias: str | None = None

    def __post_init__(self):
        if self.alias is not None and (len(self.writes) != 1 or self.alias not in self.reads):
            raise GraphError(f"step {self.name!r}: a view writes one value and reads the value "
                             f"it aliases, got reads {list(self.reads)} writes "
                             f"{list(self.writes)} alias {self.alias!r}")


@dataclass(frozen=True, slots=True)
class Lifetime:
    """Steps [first, last], inclusive, during which a value's bytes must be kept."""
    first: int
    last: int

    def overlaps(self, other: "Lifetime") -> bool:
        return self.first <= other.last and other.first <= self.last


@dataclass(frozen=True, slots=True)
class MemoryPlan:
    """Where each arena value lives. `offsets` holds placed values and their views (a view at
    its source's offset); `sizes` and `lifetimes` the placed (root) values only."""
    offsets: Mapping[str, int]
    sizes: Mapping[str, int]
    lifetimes: Mapping[str, Lifetime]
    arena_bytes: int
    sum_of_tensor_bytes: int     # the placed values' aligned sizes added up: no sharing at all
    alignment: int = ALIGNMENT
    roots: Mapping[str, str] = field(default_factory=dict)   # view -> the value it aliases

    @property
    def saved_bytes(self) -> int:
        return self.sum_of_tensor_bytes - self.arena_bytes

    def check(self) -> None:
        """GraphError unless every placed value is aligned, inside the arena, and disjoint in
        bytes from every value live at the same time."""
        names = sorted(self.sizes, key=lambda n: self.offsets[n])
        for n in names:
            off, size = self.offsets[n], self.sizes[n]
            if off % self.alignment or off < 0 or off + size > self.arena_bytes:
                raise GraphError(f"memory plan: {n!r} at [{off}, {off + size}) is misaligned "
                                 f"or outside the {self.arena_bytes}-byte arena")
        for i, a in enumerate(names):
            a_end = self.offsets[a] + self.sizes[a]
            for b in names[i + 1:]:
                if self.offsets[b] >= a_end:
                    break
                if self.sizes[b] and self.sizes[a] and self.lifetimes[a].overlaps(self.lifetimes[b]):
                    raise GraphError(
                        f"memory plan: {a!r} [{self.offsets[a]}, {a_end}) and {b!r} "
                        f"[{self.offsets[b]}, {self.offsets[b] + self.sizes[b]}) overlap in the "
                        f"arena while both are live (steps {self.lifetimes[a]} and "
                        f"{self.lifetimes[b]})")
        for view, root in self.roots.items():
            if self.offsets.get(view) != self.offsets[root]:
                raise GraphError(f"memory plan: view {view!r} is not at its source {root!r}")


def _round_up(n: int, alignment: int) -> int:
    return -(-n // alignment) * alignment


def view_roots(steps: Sequence[Step]) -> dict[str, str]:
    """Each view's ultimate source (through chains of views)."""
    roots: dict[str, str] = {}
    for s in steps:
        if s.alias is not None:
            roots[s.writes[0]] = roots.get(s.alias, s.alias)
    return roots


def lifetimes(steps: Sequence[Step], placed: Iterable[str],
              keep: Iterable[str] = ()) -> tuple[dict[str, Lifetime], dict[str, str]]:
    """The lifetime of each placed value (its views' uses included), and the view -> root
    map of views of placed values."""
    placed = set(placed)
    roots = view_roots(steps)
    root = {n: roots.get(n, n) for s in steps for n in s.reads + s.writes}
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for i, s in enumerate(steps):
        for n in s.writes:
            r = root[n]
            if r in placed and s.alias is None:
                if r in first:
                    raise GraphError(f"memory plan: {r!r} is written by two steps (the second "
                                     f"is {s.name!r})")
                first[r] = i
        for n in s.reads + s.writes:
            r = root[n]
            if r in placed:
                last[r] = i
    end = max(len(steps) - 1, 0)
    for n in keep:
        r = roots.get(n, n)
        if r in placed:
            last[r] = end
    out = {}
    for n in placed:
        lo = first.get(n, 0)                      # never written: lives from the start
        out[n] = Lifetime(lo, max(last.get(n, lo), lo))
    return out, {v: r for v, r in roots.items() if r in placed}


def plan_memory(steps: Sequence[Step], sizes: Mapping[str, int], *, keep: Iterable[str] = (),
                alignment: int = ALIGNMENT) -> MemoryPlan:
    """Place every value of `sizes` (bytes) in one arena; see the module docstring."""
    if alignment <= 0 or alignment & (alignment - 1):
        raise GraphError(f"memory plan: alignment {alignment} is not a power of two")
    roots = view_roots(steps)
    viewed = sorted(n for n in sizes if n in roots)
    if viewed:
        raise GraphError(f"memory plan: views {viewed} were given sizes; a view takes its "
                         "source's bytes")
    if any(not isinstance(b, int) or b < 0 for b in sizes.values()):
        raise GraphError("memory plan: sizes must be non-negative byte counts")
    life, view_of = lifetimes(steps, sizes, keep)
    padded = {n: _round_up(b, alignment) for n, b in sizes.items()}
    order = sorted(sizes, key=lambda n: (-padded[n], life[n].first, n))
    offsets: dict[str, int] = {}
    for n in order:
        need = padded[n]
        busy = sorted((offsets[m], offsets[m] + padded[m]) for m in offsets
                      if padded[m] and life[m].overlaps(life[n]))
        best, best_gap, cursor = None, None, 0
        for lo, hi in busy:
            gap = lo - cursor
            if gap >= need and (best_gap is None or gap < best_gap):
                best, best_gap = cursor, gap
            cursor = max(cursor, hi)
        offsets[n] = cursor if best is None else best
    arena = max((offsets[n] + padded[n] for n in offsets), default=0)
    all_offsets = dict(offsets)
    all_offsets.update({v: offsets[r] for v, r in view_of.items()})
    return MemoryPlan(all_offsets, dict(sizes), life, arena, sum(padded.values()), alignment,
                      view_of)


__all__ = ["ALIGNMENT", "Lifetime", "MemoryPlan", "Step", "lifetimes", "plan_memory",
           "view_roots"]
