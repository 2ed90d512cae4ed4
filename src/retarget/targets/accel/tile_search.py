"""The tile search every accelerator runs: rank candidates cheaply, let the cycle model judge.

    ranked = rank(cands, cost=analytic, keep=2, screen=closed_form, screened=24)
    best = judge(ranked, time=lambda s: full_model_cycles(s), tie=lambda s: dram_bytes(s))

1. `screen` (optional, O(1) per candidate) orders every candidate; only the `screened` best go on;
2. `cost` (an analytic model, cheaper than the full one) orders those; `keep` survive;
3. `judge` lowers/times each survivor with the full cycle model: fewest cycles wins, ties go to
   the smaller `tie` key (e.g. DRAM bytes).

`ChoiceCache` remembers a layer's choice by (geometry, config, ...) key, bounded, so a network
repeating a layer shape pays for its search once.
"""
from __future__ import annotations

from typing import Any, Callable, Generic, Hashable, Iterable, Sequence, TypeVar

T = TypeVar("T")


def rank(candidates: Iterable[T], cost: Callable[[T], float], keep: int,
         screen: Callable[[T], float] | None = None,
         screened: int | None = None) -> list[tuple[float, T]]:
    """The `keep` candidates of least `cost` as (cost, candidate), best first; with `screen`,
    `cost` is evaluated only on the `screened` best by the screen. Ties keep input order."""
    cands = list(candidates)
    if screen is not None:
        order = sorted(((screen(c), i, c) for i, c in enumerate(cands)), key=lambda x: x[:2])
        cands = [c for _, _, c in order[:screened]]
    scored = sorted(((cost(c), i, c) for i, c in enumerate(cands)), key=lambda x: x[:2])
    return [(s, c) for s, _, c in scored[:keep]]


def judge(ranked: Sequence[tuple[float, T]], time: Callable[[T], int],
          tie: Callable[[T], Any] = lambda c: 0, best: tuple | None = None
          ) -> tuple[tuple[int, Any], T] | None:
    """The candidate of fewest `time` cycles (ties: smaller `tie`) among `ranked`, as
    ((cycles, tie key), candidate); `best` is a previous answer to improve on."""
    for _, c in ranked:
        key = (time(c), tie(c))
        if best is None or key < best[0]:
            best = (key, c)
    return best


class ChoiceCache(Generic[T]):
    """A bounded memo of search results by key (cleared whole when full: the keys of one
    network are few, and a cleared cache only costs a repeated search)."""

    def __init__(self, limit: int = 4096):
        self.limit = limit
        self._data: dict[Hashable, T] = {}

    def get(self, key: Hashable) -> T | None:
        return self._data.get(key)

    def put(self, key: Hashable, value: T) -> T:
        if len(self._data) >= self.limit:
            self._data.clear()
        self._data[key] = value
        return value

    def clear(self) -> None:
        self._data.clear()

    def keys(self) -> list[Hashable]:
        return list(self._data)

    def __len__(self) -> int:
        return len(self._data)


__all__ = ["ChoiceCache", "judge", "rank"]
