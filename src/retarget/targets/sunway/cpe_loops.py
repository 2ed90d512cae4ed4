"""The CPE loop of each nest: which loop's iterations the CPEs split among them (marked
`parallel` in the IR), chosen with the cost model (schedule.py describes the rule)."""
from __future__ import annotations

from ...errors import GraphError
from ...loopnest.ir import Kernel, Loop, Stmt, accesses, walk
from ...loopnest.verify import verify_kernel
from .config import SunwayConfig
from .cost import cpe_counts, cpe_seconds


def _writes_main_memory(s: Stmt) -> bool:
    return any(rw == "w" and acc.tensor.scope == "global"
               for st, _ in walk((s,)) if not isinstance(st, Loop) for acc, rw in accesses(st))


def serial_loops(stmts) -> tuple[Stmt, ...]:
    """`stmts` with every loop serial."""
    return tuple(Loop(s.var, s.extent, serial_loops(s.body)) if isinstance(s, Loop) else s
                 for s in stmts)


def _with_parallel(nest: Loop, var: str) -> Loop:
    def mark(s):
        if not isinstance(s, Loop):
            return s
        return Loop(s.var, s.extent, tuple(mark(b) for b in s.body),
                    "parallel" if s.var == var else s.kind)
    return mark(nest)


def _locals(stmts, rw: str) -> set[str]:
    return {acc.tensor.name for st, _ in walk(tuple(stmts)) if not isinstance(st, Loop)
            for acc, kind in accesses(st) if acc.tensor.scope == "local" and kind == rw}


def cpe_loops(kernel: Kernel, nest: Loop) -> list[str]:
    """The variables of the loops of `nest` that can be its CPE loop, outermost first. Along
    the nest's spine, a loop qualifies when
    - its iterations write disjoint main-memory elements (the verifier's parallel rule) and it
      writes main memory at all: splitting a loop that only fills LDM would leave each CPE's
      own LDM partly filled;
    - no LDM buffer it writes is read or written outside it: each CPE has its own LDM, so what
      one CPE's share leaves in a buffer is not what another statement would expect there;
    - nothing outside it, on the way down the spine, writes main memory."""
    found = []
    s = nest
    while isinstance(s, Loop):
        inside = _locals(s.body, "w")
        elsewhere = {acc.tensor.name for st, _ in walk(kernel.body) if not isinstance(st, Loop)
                     and not _within(st, s) for acc, _ in accesses(st)}
        if s.extent > 1 and _writes_main_memory(s) and not inside & elsewhere:
            trial = Kernel(kernel.name, kernel.inputs, kernel.outputs,
                           (_with_parallel(nest, s.var),), kernel.locals)
            try:
                verify_kernel(trial)
                found.append(s.var)
            except GraphError:
                pass
        inner = [b for b in s.body if isinstance(b, Loop)]
        if len(inner) != 1 or any(_writes_main_memory(b) for b in s.body if b is not inner[0]):
            break
        s = inner[0]
    return found


def _within(stmt, loop: Loop) -> bool:
    return any(st is stmt for st, _ in walk(loop.body))


def mark_cpe_loops(kernel: Kernel, config: SunwayConfig | None = None) -> Kernel:
    """`kernel` with every loop serial except each top-level nest's CPE loop: of the legal
    ones, the one the cost model finds fastest with `config`'s CPEs (the outermost on a tie,
    or when there is no config)."""

    def modelled(nest: Loop) -> float:
        one = Kernel(kernel.name, kernel.inputs, kernel.outputs, (nest,), kernel.locals)
        return max(sum(cpe_seconds(w, config)) for w in cpe_counts(one, config.cpes))

    body = []
    for s in serial_loops(kernel.body):
        if isinstance(s, Loop):
            options = [_with_parallel(s, v) for v in cpe_loops(kernel, s)]
            if options:
                s = options[0] if config is None or len(options) == 1 else \
                    min(options, key=modelled)
        body.append(s)
    return Kernel(kernel.name, kernel.inputs, kernel.outputs, tuple(body), kernel.locals)


__all__ = ["cpe_loops", "mark_cpe_loops", "serial_loops"]
