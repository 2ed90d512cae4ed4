"""The conv tile walk, written once: the order in which a convolution's (or dense layer's)
tiles, their reduction phases and their loads go into the stream. The emitter
(conv._ConvEmitter.run) emits what it yields and the cost model (tuning.conv_cycles) costs it,
so the two cannot disagree on how many loads, GEMMs and stores a schedule makes.

Tiles: a Position (batch blocks x output rows x output columns) times a ChannelTile (output
channel blocks, with their reduction phases), positions outermost in batch, row, column order
and channel tiles innermost. Tile i runs on virtual thread i % v; the v consecutive tiles of a
round go in lockstep (each phase: every thread's loads, then every thread's GEMMs).

Which loads a phase makes: each thread's INP and WGT halves keep what it loaded last, and a
phase that needs exactly that is not loaded again. A phase after a tile's first always loads
both (its own block of input channels and of weights). A tile's first phase loads what differs
from its thread's previous tile; two tiles never agree on both (tiles at one position differ
in output channels, so in weights), so every phase loads something. The records are cheap to
make: channel tiles and their phase steps are built once per (geometry, tile_co, tile_ci) and
shared, positions once per walk; the tile search walks thousands of schedules.
"""
from __future__ import annotations

from functools import lru_cache
from itertools import chain, islice
from typing import Iterator, NamedTuple

from .schedule import ConvGeom, Schedule


class Phase(NamedTuple):
    """One reduction phase of a tile: input-channel blocks [p0, p0 + tci) of the tile's group
    (its weights), read from input blocks [ci0, ci0 + nci) of the feature map."""
    p0: int
    tci: int
    ci0: int
    nci: int


class Position(NamedTuple):
    """A tile's batch blocks, output rows and output columns; one record shared by the tiles
    at it (one per channel tile)."""
    n0: int
    tn: int
    oh0: int
    th: int
    ow0: int
    tw: int


class ChannelTile(NamedTuple):
    """Output-channel blocks [c0, c0 + tco) with their reduction phases, and per output block
    its first input block in the tile's input (nonzero when a tile spans several groups)."""
    c0: int
    tco: int
    phases: tuple[Phase, ...]
    offs: tuple[int, ...]


class PhaseStep(NamedTuple):
    """A phase as the walk reaches it: which loads it makes given what its thread holds."""
    phase: Phase
    index: int             # 0 for the tile's first phase (its accumulators are reset before)
    last: bool             # the tile's last phase (its epilogue and store follow)
    load_input: bool
    load_weights: bool


class TileStep(NamedTuple):
    """A tile as the walk reaches it."""
    index: int             # emission order, 0 .. tiles - 1
    thread: int            # index % vthreads: the SRAM halves it uses
    pos: Position
    cout: ChannelTile
    steps: tuple[PhaseStep, ...]
    more: bool             # its thread has a later tile (which waits for this tile's store)


_new = tuple.__new__
Round = tuple[TileStep, ...]      # tiles run in lockstep, one per thread (the last may be short)


class _StepSets:
    """The phase steps of a tile with these phases, by which of the first phase's loads happen
    (each built when first asked; the later phases' steps are shared), and what the first
    phase needs in a thread's halves and the last leaves there (besides the input's position
    and the weights' output blocks)."""
    __slots__ = ("phases", "later", "sets", "first_input", "last_input", "first_weights",
                 "last_weights")

    def __init__(self, phases: tuple[Phase, ...]):
        last = len(phases) - 1
        self.phases = phases
        self.later = tuple(PhaseStep(ph, p, p == last, True, True)
                           for p, ph in enumerate(phases) if p)
        self.sets: list[tuple[PhaseStep, ...] | None] = [None] * 4
        a, z = phases[0], phases[-1]
        self.first_input, self.last_input = (a.ci0, a.nci), (z.ci0, z.nci)
        self.first_weights, self.last_weights = (a.p0, a.tci), (z.p0, z.tci)

    def get(self, load_input: bool, load_weights: bool) -> tuple[PhaseStep, ...]:
        k = 2 * load_input + load_weights
        steps = self.sets[k]
        if steps is None:
            first = PhaseStep(self.phases[0], 0, not self.later, load_input, load_weights)
            steps = self.sets[k] = (first,) + self.later
        return steps


@lru_cache(maxsize=4096)
def _group_steps(cig: int, tile_ci: int, base: int) -> _StepSets:
    """The phases of a tile within a group (reduced tile_ci input blocks at a time), which
    depend on the group's first input block alone: shared by every tile of the group and by
    the schedules the search walks with the same tile_ci."""
    return _StepSets(tuple(Phase(p0, min(tile_ci, cig - p0), base + p0, min(tile_ci, cig - p0))
                           for p0 in range(0, cig, tile_ci)))


@lru_cache(maxsize=4096)      # the search walks both thread counts of each (tile_co, tile_ci)
def _channel_plan(g: ConvGeom, tile_co: int, tile_ci: int) -> tuple[tuple[ChannelTile,
                                                                          _StepSets], ...]:
    """The channel tiles in emission order, each with its phase steps. A tile within one group
    reduces its group's input blocks in phases of tile_ci; a tile spanning groups (tile_co >
    cog, whole groups) reduces each of its groups at once, reading the groups' input blocks
    side by side."""
    if tile_co > g.cog:             # schedule.conv_spans, from the tile size alone
        plan = []
        for c0 in range(0, g.cob, tile_co):
            tco = min(tile_co, g.cob - c0)
            gr0 = c0 // g.cog
            offs = tuple(((c0 + j) // g.cog - gr0) * g.cig for j in range(tco))
            nci = ((c0 + tco - 1) // g.cog - gr0 + 1) * g.cig
            steps = _StepSets((Phase(0, g.cig, gr0 * g.cig, nci),))
            plan.append((ChannelTile(c0, tco, steps.phases, offs), steps))
        return tuple(plan)
    return tuple((ChannelTile(c0, tco, steps.phases, (0,) * tco), steps)
                 for gr in range(g.cob // g.cog)
                 for steps in (_group_steps(g.cig, tile_ci, gr * g.cig),)
                 for c in range(0, g.cog, tile_co)
                 for c0, tco in ((gr * g.cog + c, min(tile_co, g.cog - c)),))


def positions(g: ConvGeom, s: Schedule) -> Iterator[Position]:
    """The tile positions in emission order (batch, then rows, then columns)."""
    for n0 in range(0, g.nb, s.tile_n):
        tn = min(s.tile_n, g.nb - n0)
        for oh0 in range(0, g.oh, s.tile_h):
            th = min(s.tile_h, g.oh - oh0)
            for ow0 in range(0, g.ow, s.tile_w):
                yield Position(n0, tn, oh0, th, ow0, min(s.tile_w, g.ow - ow0))


def _tile_count(g: ConvGeom, s: Schedule, nco: int) -> int:
    """Tiles of the walk: positions times `nco` channel tiles."""
    return -(-g.nb // s.tile_n) * -(-g.oh // s.tile_h) * -(-g.ow // s.tile_w) * nco


def conv_walk(g: ConvGeom, s: Schedule) -> Iterator[TileStep]:
    """The layer's tiles in emission order, with the phases and loads of each."""
    v = s.vthreads
    plan = _channel_plan(g, s.tile_co, s.tile_ci)
    nco = len(plan)
    n = _tile_count(g, s, nco)
    # Which loads a tile's first phase makes. Its thread's last tile is the one v before it in
    # the walk: at the same position when the tile's channel index j is at least v, else at an
    # earlier position (then the input is loaded), with channel tile (j - v) mod nco. So after
    # each thread's first tile (which loads both), the loads depend on j alone.
    first = [steps.get(True, True) for _, steps in plan]
    later = []
    for j, (ch, steps) in enumerate(plan):
        held_ch, held = plan[(j - v) % nco]
        load_input = j < v or held.last_input != steps.first_input
        load_weights = held_ch.c0 != ch.c0 or held.last_weights != steps.first_weights
        later.append(steps.get(load_input, load_weights))
    i = 0
    for pos in positions(g, s):
        for j, (ch, _) in enumerate(plan):
            # tuple.__new__: a NamedTuple built without its Python-level __new__ (this runs
            # per tile of every schedule the search costs)
            yield _new(TileStep, (i, i % v, pos, ch, later[j] if i >= v else first[j],
                                  i + v < n))
            i += 1


def conv_rounds(g: ConvGeom, s: Schedule) -> Iterator[Round]:
    """conv_walk's tiles a round at a time: the s.vthreads consecutive tiles that run in
    lockstep (each phase: every thread's loads, then every thread's GEMMs; then, without the
    ALU stage, every thread's epilogue, then every thread's stores)."""
    v = s.vthreads
    n = _tile_count(g, s, len(_channel_plan(g, s.tile_co, s.tile_ci)))
    walk = conv_walk(g, s)
    # the whole rounds zipped from one iterator (no Python frame per round), then the short
    # last round, if any, from what remains
    return chain(islice(zip(*[walk] * v), n // v), _rest(walk))


def _rest(walk: Iterator[TileStep]) -> Iterator[Round]:
    rnd = tuple(walk)
    if rnd:
        yield rnd


def first_tile(g: ConvGeom, s: Schedule) -> tuple[Position, ChannelTile]:
    """The walk's first tile (what the tile search's lower bound reads), without the others."""
    first_channels, _ = _channel_plan(g, s.tile_co, s.tile_ci)[0]
    return (Position(0, min(s.tile_n, g.nb), 0, min(s.tile_h, g.oh), 0, min(s.tile_w, g.ow)),
            first_channels)


def clear_cache() -> None:
    """Forget the cached channel plans (tuning.clear_cache: measuring the search afresh)."""
    _channel_plan.cache_clear()
    _group_steps.cache_clear()


__all__ = ["ChannelTile", "Phase", "PhaseStep", "Position", "Round", "TileStep",
           "clear_cache", "conv_rounds", "conv_walk", "first_tile", "positions"]
