"""A region of graph nodes as a Program (program.py), for every ahead-of-time C target: each
node lowered to a loop nest, each loop nest scheduled by the target, every tensor given a
place, the intermediates planned into one arena.

Where values live:
- region inputs and outputs are the caller's buffers (`model_run`'s pointer arrays): the
  arena holds only what the region computes and nobody outside reads;
- constants go into the weights blob, each at a 64-byte aligned offset, in order of first use,
  only those some kernel reads;
- a view (Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout: `lower_node` returns None)
  is its source's bytes: it costs nothing, shares the source's place and extends its lifetime;
- a region output computed by a kernel is written straight into the caller's output buffer;
  one that is a view of something living elsewhere (a region input, a constant, another
  output) is copied there at the end;
- everything else is an arena value, placed by targets/aot/memory_plan.py.

Ops are lowered by `retarget.loopnest.ops` (`lower_node`, `SUPPORTED_OPS`), reached through
an `OpLowering` so a target (or a test) can supply another table.
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Sequence

import numpy as np

from ...errors import GraphError, TargetError, node_context
from ...ir.graph import Node, Value
from ...ir.types import TensorType
from ...loopnest.c_printer import C_TYPES, c_identifier
from ...loopnest.ir import Kernel as LoopKernel
from ...loopnest.register_tile import Relayout, Scheduled
from .memory_plan import Step, plan_memory
from ..base import Region
from .program import (ALIGNMENT, Call, Constant, OutputCopy, Place, Program, Routine,
                      TensorSpec)
from ...loopnest import ops


@dataclass(frozen=True, slots=True)
class OpLowering:
    """How graph nodes become loop nests: `lower_node(node)` returns a Kernel whose inputs
    and outputs are named after the node's input and output values, or None for a view op;
    `supported` names the ops it lowers."""
    lower_node: Callable[[Node], LoopKernel | None]
    supported: frozenset[str]
    source: str = "retarget.loopnest.ops"


@lru_cache(maxsize=1)
def default_op_lowering() -> OpLowering | None:
    """retarget.loopnest.ops's table, or None where that module does not exist."""
    if importlib.util.find_spec("retarget.loopnest.ops") is None:
        return None
    return OpLowering(ops.lower_node, frozenset(ops.SUPPORTED_OPS))


@dataclass(frozen=True, slots=True)
class Fused:
    """Consecutive nodes of a region computed by one call: `scheduled` is its loop nest (over
    the group's external inputs, and constants in other layouts) and its relayouts; `routine`
    the library routine that runs it, if any. The call takes the place of the last node."""
    nodes: tuple[Node, ...]
    scheduled: Scheduled
    routine: Routine | None = None
    # kernel outputs that are the call's own scratch (planned into the arena for the call
    # only, read by nobody after it)
    scratch: tuple[str, ...] = ()


# Which nodes of a region a target computes as fused calls (none: every node on its own).
Fuse = Callable[[Region], Sequence[Fused]]


def _derived_constant(r: Relayout, source: Value) -> Value:
    """The constant a relaid-out kernel input holds."""
    data = r.apply(source.const)     # may change the dtype (int8 weights read as int32)
    return Value(r.name, TensorType(data.shape, str(data.dtype)), data)


def _spec(v: Value) -> TensorSpec:
    return TensorSpec(v.name, tuple(v.type.shape), v.type.dtype)


def _round_up(n: int) -> int:
    return -(-n // ALIGNMENT) * ALIGNMENT


def _check_params(nodes: Sequence[Node], k: LoopKernel, by_name: dict[str, Value],
                  derived: set[str] = frozenset(), scratch: set[str] = frozenset()) -> None:
    """The kernel's tensors are the nodes' values (or, for inputs, constants `derived` from
    them), with their dtypes and sizes; its outputs the last node's (and its `scratch`)."""
    node = nodes[-1]
    ins = {v.name for n in nodes for v in n.inputs if v is not None} | set(derived)
    outs = {v.name for v in node.outputs} | set(scratch)
    for group, allowed, what in ((k.inputs, ins, "input"), (k.outputs, outs, "output")):
        for t in group:
            if t.name not in allowed:
                raise TargetError(f"{node_context(node)}: its loop nest's {what} {t.name!r} is "
                                  f"not one of the node's {what} values {sorted(allowed)}")
            v = by_name[t.name]
            if t.dtype != v.type.dtype or t.nbytes != v.type.nbytes:
                raise TargetError(f"{node_context(node)}: loop-nest tensor {t.name!r} is "
                                  f"{t.dtype}{list(t.shape)}, the value is {v.type}")


# How a target schedules each lowered kernel: (kernel, names of its constant inputs) -> the
# scheduled kernel and the constants it reads in another layout.
Schedule = Callable[[LoopKernel, frozenset[str]], Scheduled]


def lower_region(region: Region, lowering: OpLowering, schedule: Schedule, mode: str,
                 fuse: Fuse | None = None) -> tuple[Program, np.ndarray]:
    """The region's Program (its kernels scheduled by `schedule`, recorded as `mode`; the
    groups `fuse` names computed by one call each) and its weights blob (uint8)."""
    by_name: dict[str, Value] = {}
    for v in region.inputs + region.outputs + [v for n in region.nodes
                                                for v in n.inputs + n.outputs if v is not None]:
        if by_name.setdefault(v.name, v) is not v:
            raise TargetError(f"region {region.name!r}: two values are named {v.name!r}")
        if v.type is None:
            raise TargetError(f"region {region.name!r}: value {v.name!r} has no type")

    # 1. each node: a scheduled, verified loop nest, or a view of its input; or a fused group
    groups = {g.nodes[-1].name: g for g in (fuse(region) if fuse else ())}
    inside = {n.name for g in groups.values() for n in g.nodes[:-1]}
    steps: list[Step] = []
    lowered: list[tuple[tuple[Node, ...], LoopKernel, Routine | None]] = []
    alias: dict[str, str] = {}             # view -> the value it reads as
    produced: set[str] = set()             # values a kernel writes
    for node in region.nodes:
        if node.name in inside:
            continue
        group = groups.get(node.name)
        try:
            k = lowering.lower_node(node) if group is None else group.scheduled.kernel
        except GraphError as e:
            raise TargetError(f"{node_context(node)}: {e}") from None
        if k is None:
            src, dst = node.inputs[0], node.outputs[0]
            if src.type.dtype != dst.type.dtype or src.type.nbytes != dst.type.nbytes:
                raise TargetError(f"{node_context(node)}: lowered as a view, but its output "
                                  f"{dst.type} is not its input {src.type} reinterpreted")
            alias[dst.name] = src.name
            steps.append(Step(node.name, (src.name,), (dst.name,), alias=src.name))
            continue
        nodes = (node,) if group is None else group.nodes
        scratch = set() if group is None else set(group.scratch)
        for t in k.outputs:
            if t.name in scratch and by_name.setdefault(t.name, Value(
                    t.name, TensorType(t.shape, t.dtype))).type.shape != t.shape:
                raise TargetError(f"{node_context(node)}: scratch {t.name!r} is also a value")
        if group is None:
            constants = frozenset(v.name for v in node.inputs if v is not None and v.is_const)
            tiled = schedule(k, constants)
        else:
            tiled = group.scheduled
        k = tiled.kernel
        for r in tiled.relayouts:
            derived = _derived_constant(r, by_name[r.source])
            known = by_name.setdefault(r.name, derived)
            if known is not derived and not np.array_equal(known.const, derived.const):
                raise TargetError(f"{node_context(node)}: two different constants would be "
                                  f"named {r.name!r}")
        _check_params(nodes, k, by_name, {r.name for r in tiled.relayouts}, scratch)
        lowered.append((nodes, k, None if group is None else group.routine))
        produced.update(t.name for t in k.outputs)
        steps.append(Step(node.name, tuple(t.name for t in k.inputs),
                          tuple(t.name for t in k.outputs)))

    def root(name: str) -> str:
        while name in alias:
            name = alias[name]
        return name

    # 2. places: region inputs, outputs computed here, constants, then the arena
    place: dict[str, Place] = {v.name: Place("input", i) for i, v in enumerate(region.inputs)}
    for j, v in enumerate(region.outputs):
        r = root(v.name)
        if r in produced and r not in place:
            place[r] = Place("output", j)
    constants: list[Constant] = []
    blob_parts: list[tuple[int, np.ndarray]] = []
    weights_bytes = 0

    def constant(v: Value) -> Place:
        nonlocal weights_bytes
        if v.name not in place:
            data = np.ascontiguousarray(v.const, dtype=v.type.dtype)
            place[v.name] = Place("weights", weights_bytes)
            constants.append(Constant(_spec(v), weights_bytes))
            blob_parts.append((weights_bytes, data.reshape(-1).view(np.uint8)))
            weights_bytes += _round_up(data.nbytes)
        return place[v.name]

    arena_values = {r: by_name[r].type.nbytes for r in produced if r not in place}
    plan = plan_memory(steps, arena_values)
    plan.check()
    for r in arena_values:
        place[r] = Place("arena", plan.offsets[r])

    def where(name: str) -> Place:
        r = root(name)
        if r in place:
            return place[r]
        v = by_name[r]
        if v.is_const:
            return constant(v)
        raise TargetError(f"region {region.name!r}: value {r!r} is read but neither a region "
                          f"input, a constant nor computed in the region")

    # 3. calls, and the outputs that are bytes living elsewhere
    calls = []
    taken: set[str] = set()
    for i, (nodes, k, routine) in enumerate(lowered):
        fn = c_identifier(f"k{i}_{nodes[0].name}"[:48], taken)
        taken.add(fn)
        outs = ", ".join(t.name for t in k.outputs)
        what = " + ".join([f"{nodes[0].op} '{nodes[0].name}'"] + [n.op for n in nodes[1:]])
        calls.append(Call(fn, f"{what} -> {outs}", k, tuple(where(t.name) for t in k.params),
                          routine))
    copies = []
    for j, v in enumerate(region.outputs):
        src = where(v.name)
        if src != Place("output", j):
            copies.append(OutputCopy(j, src, v.type.nbytes))

    blob = np.zeros(weights_bytes, dtype=np.uint8)
    for offset, data in blob_parts:
        blob[offset:offset + data.size] = data
    program = Program(region.name, mode, tuple(_spec(v) for v in region.inputs),
                      tuple(_spec(v) for v in region.outputs), tuple(calls), tuple(copies),
                      tuple(constants), weights_bytes, plan.arena_bytes, plan.sum_of_tensor_bytes)
    program.validate()
    return program, blob


def node_support_problem(node: Node) -> str | None:
    """Why an ahead-of-time C target cannot hold this node's values (None: it can)."""
    for v in list(node.inputs) + list(node.outputs):
        if v is None:
            continue
        if v.type is None:
            return f"value {v.name!r} has no type"
        if v.type.dtype not in C_TYPES:
            return (f"value {v.name!r} is {v.type.dtype}; generated C computes "
                    f"{', '.join(C_TYPES)} only")
        if v.type.numel == 0:
            return f"value {v.name!r} is empty ({v.type})"
    return None


__all__ = ["Fuse", "Fused", "OpLowering", "default_op_lowering", "lower_region", "node_support_problem",
           "Schedule"]
