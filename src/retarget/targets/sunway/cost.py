"""What each layer would cost on an SW26010 core group (the model of docs/sunway.md).

Counts come from the scheduled loop nests themselves (`cpe_counts`: each CPE runs its share
of its nests' CPE loops, RT_LO .. RT_HI, and every loop outside them in full); the emulator
counts the same things at run time (DMA bytes and calls, global loads and stores), and the
tests hold the two equal. Per CPE:

    compute = flops / (clock * flops_per_cycle * compute_efficiency)
    dma     = (DMA bytes + DMA transfers * dma_overhead_bytes) / (dma_gbps / cpes_per_cg)
    global  = (global loads + stores) * gld_cycles / clock

The three add up, except where the code double-buffers (config.double_buffer,
double_buffer.py): there, per execution of a pipelined loop of n iterations, n - 1 times the
smaller of its prefetched copies' DMA time and one iteration's compute + global-access time is
hidden (the first iteration's fetch is not). The slowest CPE sets the layer's time, plus
`spawn_us` for athread_spawn + join. A layer on the MPE costs
its flops at the MPE's peak (765 - 64 * 11.6 GFlop/s per core group) times the efficiency,
plus the bytes it touches at the core group's bandwidth. The assumptions and their sources
are listed in docs/sunway.md.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...loopnest.ir import Binary, Copy, Expr, Kernel, Load, Loop, Select, Store, Unary, walk
from ..aot.program import Call, Program
from .config import SunwayConfig
from .double_buffer import Pipeline, doubled_buffers, ldm_bytes, pipelines
from .cores import runs_on

MPE_GFLOPS = 765.0 - 64 * 11.6        # a core group's peak minus its 64 CPEs'


@dataclass(frozen=True, slots=True)
class Work:
    """What one CPE does in one layer (or, for an MPE layer, the MPE)."""
    flops: int = 0              # arithmetic operations (a multiply-add is two)
    get_bytes: int = 0          # DMA main memory -> LDM
    put_bytes: int = 0          # DMA LDM -> main memory
    get_calls: int = 0          # DMA transfers in (one per contiguous run)
    put_calls: int = 0          # DMA transfers out
    gld: int = 0                # global loads (elements; the baseline's)
    gst: int = 0                # global stores

    def __add__(self, o: "Work") -> "Work":
        return Work(*(a + b for a, b in zip(self._values(), o._values())))

    def __mul__(self, k: int) -> "Work":
        return Work(*(a * k for a in self._values()))

    def _values(self) -> tuple[int, ...]:
        return (self.flops, self.get_bytes, self.put_bytes, self.get_calls, self.put_calls,
                self.gld, self.gst)

    @property
    def dma_bytes(self) -> int:
        return self.get_bytes + self.put_bytes

    @property
    def dma_calls(self) -> int:
        return self.get_calls + self.put_calls

    def reads(self) -> "Work":
        """This work without its main-memory writes."""
        return Work(self.flops, self.get_bytes, 0, self.get_calls, 0, self.gld, 0)

    def writes(self) -> "Work":
        return Work(0, 0, self.put_bytes, 0, self.put_calls, 0, self.gst)


def _flops(e: Expr) -> int:
    if isinstance(e, (Binary,)):
        return 1 + _flops(e.a) + _flops(e.b)
    if isinstance(e, Unary):
        return 1 + _flops(e.x)
    if isinstance(e, Select):
        return 1 + sum(_flops(x) for x in (e.a, e.b, e.then, e.other))
    return 0


def _global_loads(e: Expr) -> int:
    if isinstance(e, Load):
        return int(e.access.tensor.scope == "global")
    if isinstance(e, Binary):
        return _global_loads(e.a) + _global_loads(e.b)
    if isinstance(e, Unary):
        return _global_loads(e.x)
    if isinstance(e, Select):
        return sum(_global_loads(x) for x in (e.a, e.b, e.then, e.other))
    return 0


def copy_runs(c: Copy) -> int:
    """How many contiguous runs (DMA transfers) the printer splits `c` into: the innermost
    dimension, merged outward while the box covers whole dimensions of both tensors."""
    rank = len(c.extents)
    if rank == 0:
        return 1
    run, first = c.extents[-1], rank - 1
    whole = c.extents[-1] == c.src.tensor.shape[-1] == c.dst.tensor.shape[-1]
    for d in range(rank - 2, -1, -1):
        if not (whole or c.extents[d] == 1):
            break
        run *= c.extents[d]
        first = d
        whole = whole and c.extents[d] == c.src.tensor.shape[d] == c.dst.tensor.shape[d]
    runs = 1
    for d in range(first):
        runs *= c.extents[d]
    return runs


def _statement(s) -> Work:
    if isinstance(s, Store):
        flops = _flops(s.value) + (s.reduce is not None)
        gld = _global_loads(s.value)
        gst = 0
        if s.dst.tensor.scope == "global":
            gst = 1
            gld += s.reduce is not None
        return Work(flops=flops, gld=gld, gst=gst)
    n = 1
    for e in s.extents:
        n *= e
    nbytes = n * s.src.tensor.nbytes // s.src.tensor.size
    calls = copy_runs(s)
    if s.src.tensor.scope == "global" and s.dst.tensor.scope != "global":
        return Work(get_bytes=nbytes, get_calls=calls)
    if s.dst.tensor.scope == "global" and s.src.tensor.scope != "global":
        return Work(put_bytes=nbytes, put_calls=calls)
    return Work()


def _nest(stmts) -> tuple[Work, Work, int]:
    """Running `stmts` once costs `fixed + per_iteration * share` for a CPE whose share of the
    CPE loop inside them (extent E; 0 when there is none) is `share`: (fixed, per_iteration,
    E)."""
    fixed, per_iteration, extent = Work(), Work(), 0
    for s in stmts:
        if not isinstance(s, Loop):
            fixed = fixed + _statement(s)
            continue
        f, p, e = _nest(s.body)
        if s.kind == "parallel":          # the CPE loop: its body, once per iteration
            per_iteration = per_iteration + f
            extent = s.extent
        else:
            fixed = fixed + f * s.extent
            per_iteration = per_iteration + p * s.extent
            extent = e or extent
    return fixed, per_iteration, extent


def _share(extent: int, cpe: int, cpes: int) -> int:
    """How many iterations of a CPE loop of `extent` CPE `cpe` runs (RT_LO .. RT_HI)."""
    return (extent * (cpe + 1)) // cpes - (extent * cpe) // cpes


def _per_cpe(stmts, cpes: int) -> list[Work]:
    """Each CPE's work for a top-level nest."""
    work = [Work() for _ in range(cpes)]
    for s in stmts:
        o, i, e = _nest((s,))
        if e:
            for c in range(cpes):
                work[c] = work[c] + o + i * _share(e, c, cpes)
        else:       # every CPE runs it; CPE 0 alone writes main memory
            work = [w + o.reads() for w in work]
            work[0] = work[0] + o.writes()
    return work


def cpe_counts(kernel: Kernel, cpes: int) -> list[Work]:
    """Each CPE's work in `kernel`, as the CPE code runs it: a nest's CPE loop shared out
    (RT_LO .. RT_HI), a nest without one run by every CPE with CPE 0 alone writing."""
    return _per_cpe(kernel.body, cpes)


def mpe_work(kernel: Kernel) -> Work:
    """The MPE's work in `kernel`, counting its direct main-memory reads and writes as
    global loads and stores."""
    return cpe_counts(_serial_copy(kernel), 1)[0]


def _serial_copy(kernel: Kernel) -> Kernel:
    def serial(s):
        return Loop(s.var, s.extent, tuple(serial(b) for b in s.body)) \
            if isinstance(s, Loop) else s
    return Kernel(kernel.name, kernel.inputs, kernel.outputs,
                  tuple(serial(s) for s in kernel.body), kernel.locals)


@dataclass(frozen=True, slots=True)
class LayerCost:
    name: str
    kind: str                # conv, fc, pool, ... (from the node's op)
    where: str               # cpe or mpe
    flops: int               # all CPEs
    dma_bytes: int
    dma_transfers: int
    global_accesses: int     # global loads + stores (the baseline's)
    ldm_bytes: int           # per CPE
    seconds: float           # predicted on the SW26010
    compute_s: float         # of the slowest CPE
    dma_s: float
    global_s: float
    hidden_s: float = 0.0    # of those, what double buffering overlaps (seconds = sum - hidden)


KINDS = {"Conv": "conv", "ConvTranspose": "conv", "Gemm": "fc", "MatMul": "fc",
         "MaxPool": "pool", "AveragePool": "pool", "GlobalAveragePool": "pool"}


def call_kind(call: Call) -> str:
    op = call.node.split(" ", 1)[0]
    return KINDS.get(op, op.lower())


def pipeline_plan(kernel: Kernel, mode: str, config: SunwayConfig) -> tuple[Pipeline, ...]:
    """The double-buffered loops of `kernel` as scheduled in `mode` (none unless swtvm mode
    with double_buffer)."""
    if mode != "swtvm" or not config.double_buffer:
        return ()
    return pipelines(kernel, config.ldm_bytes)


def overlap_seconds(kernel: Kernel, plan: tuple[Pipeline, ...], config: SunwayConfig
                    ) -> list[float]:
    """Per CPE, the time double buffering hides: per execution of a pipelined loop of n
    iterations (n: the CPE's share for a CPE loop), n - 1 times the smaller of the DMA time of
    its prefetched copies and the compute + global-access time of one iteration of its body
    (the body's other DMAs share the CPE's bandwidth with the prefetch, so they hide
    nothing)."""
    cpes = config.cpes
    out = [0.0] * cpes
    if not plan:
        return out
    loops = [s for s, _ in walk(kernel.body) if isinstance(s, Loop)]
    by_loop = {id(loops[p.loop]): p for p in plan}
    for c in range(cpes):
        def visit(stmts, times: int) -> None:
            for s in stmts:
                if not isinstance(s, Loop):
                    continue
                n = _share(s.extent, c, cpes) if s.kind == "parallel" else s.extent
                p = by_loop.get(id(s))
                if p is not None and n > 1:
                    fixed, per, e = _nest(s.body)
                    body = fixed + per * (_share(e, c, cpes) if e else 0)
                    compute, _, global_ = cpe_seconds(body, config)
                    fetch = cpe_seconds(sum((_statement(g) for g in p.copies), Work()), config)[1]
                    out[c] += times * (n - 1) * min(fetch, compute + global_)
                visit(s.body, times * n)
        visit(kernel.body, 1)
    return out


def _slowest_cpe(k: Kernel, per: list[Work], plan: tuple[Pipeline, ...], config: SunwayConfig
                 ) -> tuple[tuple[float, float, float], float]:
    """The slowest CPE's (compute, DMA, global) seconds and what double buffering hides of
    them."""
    hidden = overlap_seconds(k, plan, config)
    slowest = max(range(len(per)), key=lambda c: sum(cpe_seconds(per[c], config)) - hidden[c])
    return cpe_seconds(per[slowest], config), hidden[slowest]


def kernel_seconds(kernel: Kernel, mode: str, config: SunwayConfig) -> float:
    """A CPE kernel's predicted time without the spawn: its slowest CPE's."""
    parts, hidden = _slowest_cpe(kernel, cpe_counts(kernel, config.cpes),
                                 pipeline_plan(kernel, mode, config), config)
    return sum(parts) - hidden


def layer_cost(call: Call, mode: str, config: SunwayConfig) -> LayerCost:
    k = call.kernel
    plan = pipeline_plan(k, mode, config)
    ldm = ldm_bytes(k.locals, doubled_buffers(plan))
    if runs_on(k, mode) == "mpe":
        w = mpe_work(k)
        itemsize = 8 if any(t.dtype == "float64" for t in k.params) else 4
        compute = w.flops / (MPE_GFLOPS * 1e9 * config.compute_efficiency)
        memory = (w.gld + w.gst) * itemsize / (config.dma_gbps * 1e9)
        return LayerCost(call.function, call_kind(call), "mpe", w.flops, 0, 0,
                         w.gld + w.gst, 0, compute + memory, compute, memory, 0.0)
    per = cpe_counts(k, config.cpes)
    parts, hidden = _slowest_cpe(k, per, plan, config)
    total = sum(per, Work())
    return LayerCost(call.function, call_kind(call), "cpe", total.flops, total.dma_bytes,
                     total.dma_calls, total.gld + total.gst, ldm,
                     sum(parts) - hidden + config.spawn_us * 1e-6, *parts, hidden)


def cpe_seconds(w: Work, config: SunwayConfig) -> tuple[float, float, float]:
    """(compute, DMA, global access) seconds of one CPE's work."""
    clock = config.clock_ghz * 1e9
    compute = w.flops / (clock * config.flops_per_cycle * config.compute_efficiency)
    dma = (w.dma_bytes + w.dma_calls * config.dma_overhead_bytes) / (
        config.dma_gbps * 1e9 / config.cpes_per_cg)
    return compute, dma, (w.gld + w.gst) * config.gld_cycles / clock


def program_costs(p: Program, config: SunwayConfig) -> list[LayerCost]:
    return [layer_cost(c, p.mode, config) for c in p.calls]


@dataclass(frozen=True, slots=True)
class PaperLayer:
    """A conv or fc layer as swTVM's Sec. 6.2 times it: "the execution time of the
    convolution and fully connected layer includes the ReLU layer". The explicit Pad the
    target's prepare pass puts in front of a padded convolution is left out, in every
    schedule: the code the paper compares pads inside the convolution, and our Pad kernel
    reads with out-of-range fills, which neither the buffering nor the OpenACC copies take
    (the baselines run it with global loads over 3 busy CPEs, which would swamp conv1)."""
    name: str               # the conv / fc call's function
    kind: str               # conv or fc
    calls: tuple[int, ...]  # indices into the program's calls: conv / fc, [relu]

    def seconds(self, costs: list[LayerCost]) -> float:
        return sum(costs[i].seconds for i in self.calls)


def paper_layers(p: Program) -> list[PaperLayer]:
    """The program's conv and fc layers, each with the ReLU that follows it, as the paper
    counts them."""
    kinds = [call_kind(c) for c in p.calls]
    out = []
    for i, call in enumerate(p.calls):
        if kinds[i] not in ("conv", "fc"):
            continue
        members = [i]
        if i + 1 < len(p.calls) and kinds[i + 1] == "relu" and any(
                t.name == call.kernel.outputs[0].name for t in p.calls[i + 1].kernel.inputs):
            members.append(i + 1)
        out.append(PaperLayer(call.function, kinds[i], tuple(members)))
    return out


__all__ = ["LayerCost", "MPE_GFLOPS", "Work", "call_kind", "copy_runs", "cpe_counts", "cpe_seconds",
           "kernel_seconds", "layer_cost", "mpe_work", "overlap_seconds", "paper_layers",
           "PaperLayer", "pipeline_plan", "program_costs"]
