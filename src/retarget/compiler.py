"""compile(graph, target) -> Module: the whole pipeline as one list of steps.

The idiom: placement overrides and size rules are keyword arguments of `compile`, because they
are properties of one compilation, not of the target or the graph:

    m = retarget.compile(graph, "toy")                               # default config
    m = retarget.compile(graph, "toy:small", cpu_nodes=["fc", "stem/*"])  # force nodes to cpu
    m = retarget.compile(graph, "my_target.toml", min_region_macs=0)  # offload every region
    m = retarget.compile(graph, "toy", config={"memory_bytes": 1 << 22})  # override a field
    print(m.report)                                                   # where every node runs

The pipeline, top-down: import -> type -> convert a pre-quantised model / quantise into the
number format the target declares (`prepare`) -> the target's own rewrite -> partition ->
fusion (which layers of each region become one unit) -> lower each offloaded region ->
package. Data only flows down: targets never call the frontend or the passes.
"""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np

from .errors import RetargetError, TargetError
from .frontend.onnx_quantized import QDQ_OPS, convert_quantized
from .ir.graph import Graph
from .ops.quantized import ACCUMULATING_OPS
from .passes.infer_shapes import infer_shapes
from .passes.fusion import STRATEGIES, plan_region
from .passes.partition import partition
from .runtime.module import Module
from .targets.base import INT8_TFLITE, Target
from .targets.registry import get_target


def compile(graph: "Graph | str | Path", target: "str | Path | Target" = "cpu", *,
            cpu_nodes: Iterable[str] = (), min_region_macs: int | None = None,
            config: Mapping[str, Any] | None = None, calibration: Any = None,
            fusion: str | None = None) -> Module:
    """Compile `graph` (a Graph or an ONNX file path) for `target`.

    target: a name ("toy"), "name:preset", a .toml/.json config file, or a Target instance.
    cpu_nodes: node names or glob patterns that must run on the CPU.
    min_region_macs: offloaded regions with fewer MACs run on the CPU instead (default: the
        target's own rule).
    config: config fields overriding the target's (unknown fields raise TargetError).
    calibration: sample inputs for targets whose prepare() quantises (e.g. vta): a dict
        name -> array, a list of such dicts, or an array split along axis 0; None lets the
        target calibrate on random data (with a warning).
    fusion: "optimized" (the default for targets that declare fusion templates), "greedy" or
        "none" (the default for the others): how layers are grouped into units lowered as
        one (passes/fusion/).
    """
    # 1. the target, with its config resolved (preset, file, overrides)
    tgt = get_target(target, config)
    # 2. the graph: load a model file if given a path (a TFLite int8 model in its own
    #    arithmetic, or as float to re-quantise in the target's format)
    if not isinstance(graph, Graph):
        graph, calibration = _load_model(graph, tgt, calibration)
    # 3. type every value (a copy: the caller's graph is left alone); support rules, MAC
    #    counts and device buffer sizes all read shapes
    g = infer_shapes(graph)
    g.toposort()
    # 4. the target's number format (vta: fold BatchNorm, int8 with power-of-two scales),
    #    then its own rewrites (vta: window packing); identity for a float target
    cpu_nodes = tuple(cpu_nodes)
    tgt.cpu_nodes = cpu_nodes
    g = prepare(g, tgt, calibration)
    # 5. partition: annotate, merge convex regions, apply the size rule, schedule
    parts = partition(g, tgt, cpu_nodes=cpu_nodes, min_region_macs=min_region_macs)
    # 6. fusion: which layers of each offloaded region are lowered as one unit
    fusion = _fusion_strategy(tgt, fusion)
    parts.report.fusion = fusion
    groups = {}                # region -> its fused groups, for targets that fuse
    for region in parts.offloaded if tgt.fusion_templates else ():
        groups[region.name] = []
        if fusion != "none":
            f = plan_region(tgt, region, fusion)
            groups[region.name] = f.groups()
            parts.report.fused += f.report(region.name)
    # 7. lower each offloaded region to the target's kernel
    kernels = {}
    for region in parts.offloaded:
        try:
            kernels[region.name] = (tgt.lower(region, groups[region.name])
                                    if region.name in groups else tgt.lower(region))
        except RetargetError as e:
            raise type(e)(f"lowering region {region.name!r} ({', '.join(region.node_names)}) "
                          f"for {tgt.name}: {e}") from None
    # 8. package graph, regions, kernels and the placement report as a Module
    return Module(g, tgt, parts.regions, kernels, parts.report)


def _load_model(path, target: Target, calibration: Any) -> tuple[Graph, Any]:
    """The model file as the Graph `target` starts from, and the calibration samples for it.

    A TFLite int8 model stays in its own arithmetic (int8-tflite) for a float target or one
    that computes in that format; for any other number format it is imported as float (its
    dequantised weights) and re-quantised, calibrated on the model's own inputs (given, or
    uniform over the int8 range; float samples for an int8 input count as real values) turned
    into the real values the float graph takes."""
    from .frontend.tflite import (io_quantization, is_tflite_path, load_tflite,
                                  model_samples, real_inputs)
    if not is_tflite_path(path):
        from . import load
        return load(path), calibration
    fmt = target.number_format
    if fmt is None or fmt.name == INT8_TFLITE.name:
        return load_tflite(path), calibration
    if calibration is None:
        warnings.warn(f"{path}: no calibration inputs given; re-quantising for {target.name} "
                      f"on seeded inputs uniform over the model's int8 input range",
                      stacklevel=3)
    quant = io_quantization(path)
    samples = model_samples(load_tflite(path), calibration, quant)
    return load_tflite(path, form="float"), [real_inputs(quant, s) for s in samples]


def _fusion_strategy(target: Target, fusion: str | None) -> str:
    if fusion is None:
        return "optimized" if target.fusion_templates else "none"
    if fusion not in STRATEGIES:
        raise TargetError(f"fusion={fusion!r}; choose one of {', '.join(STRATEGIES)}")
    if fusion != "none" and not target.fusion_templates:
        raise TargetError(f"target {target.name!r} declares no fusion templates; "
                          f"fusion={fusion!r} needs them (use fusion='none')")
    return fusion


def prepare(graph: Graph, target: Target, calibration: Any = None) -> Graph:
    """`graph` (typed) in the form `target`'s rules read: converted from a pre-quantised
    (QDQ) model or quantised into `target.number_format` (calibrated on `calibration`: a dict
    name -> array, a list of such dicts, or an array split along axis 0; None calibrates on
    random data with a warning), then rewritten by `target.prepare`, typed and sorted. An
    already-integer graph is not quantised again."""
    graph = to_number_format(graph, target, calibration)
    rewritten = target.prepare(graph)
    if rewritten is not graph:
        rewritten = infer_shapes(rewritten)
    rewritten.toposort()
    return rewritten


def to_number_format(graph: Graph, target: Target, calibration: Any = None) -> Graph:
    """prepare()'s first half: `graph` converted (QDQ) or quantised into the target's number
    format, without the target's own rewrite (which may depend on its config)."""
    fmt = target.number_format
    if fmt is None:
        return graph
    from .frontend.tflite import is_int8_tflite
    if is_int8_tflite(graph):
        if fmt.name == INT8_TFLITE.name:
            return graph
        raise TargetError(f"{target.name} computes in {fmt.name}; this graph is an int8 "
                          f"TFLite model in its own arithmetic (int8-tflite): compile the "
                          f".tflite file, or load_tflite(path, form='float'), so that it is "
                          f"re-quantised")
    if fmt.name == INT8_TFLITE.name:
        raise NotImplementedError(f"{target.name}: quantising a float graph into int8-tflite "
                                  f"(TFLite's converter) is not implemented; import an int8 "
                                  f".tflite model")
    if _is_qdq_model(graph):
        return _convert_prequantized(graph, target)
    if any(n.op in ACCUMULATING_OPS and n.inputs[0].type is not None
           and np.dtype(n.inputs[0].type.dtype).kind == "f" for n in graph.nodes):
        from .passes.quantize import quantize  # needs the op table: import when used
        return quantize(graph, calibration, per_channel=fmt.per_channel, scales=fmt.scales)
    return graph


def _is_qdq_model(graph: Graph) -> bool:
    """An ONNX-quantised model: QLinearConv, or weights stored as int8 behind a
    DequantizeLinear. retarget's own multiplier + shift graphs also hold QuantizeLinear /
    DequantizeLinear, but only at the float edges of activations, so they are not converted
    (again)."""
    return any(n.op == "QLinearConv" or (n.op == "DequantizeLinear" and n.inputs[0].is_const)
               for n in graph.nodes) or (any(n.op in QDQ_OPS for n in graph.nodes) and not any(
        n.op in ("RequantizeMul", "QAddMul", "Requantize") for n in graph.nodes))


def _convert_prequantized(graph: Graph, target: Target) -> Graph:
    """An already-quantised ONNX model (QDQ / QLinearConv with power-of-two scales) as
    retarget's integer ops, requantised with the target's rounding. ONNX rounds half to even,
    so with half-up hardware results differ from the file's by one LSB exactly where a value
    lies half way: a documented approximation (docs/quantization.md), said as a warning."""
    rounding = target.number_format.rounding
    if rounding == "half_up":
        warnings.warn(f"{target.name}: requantising the imported QDQ model half-up (the "
                      f"hardware adds then shifts); ONNX rounds half to even, so outputs can "
                      f"differ from the file's by one LSB on exact ties", stacklevel=3)
    return convert_quantized(graph, rounding=rounding, scales=target.number_format.scales)


__all__ = ["compile", "prepare", "to_number_format"]
