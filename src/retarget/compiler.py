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

import fnmatch
import glob
import warnings
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from .errors import RetargetError, TargetError, UnsupportedOpError
from .frontend.onnx import load_onnx
from .frontend.onnx_quantized import QDQ_OPS, convert_quantized, load_quantized_as_float
from .frontend.tflite import (io_quantization, is_int8_tflite, is_tflite_path, load_tflite,
                              model_samples, real_inputs)
from .ir.graph import Graph
from .ops.quantized import ACCUMULATING_OPS
from .passes import rewrite_for
from .passes.infer_shapes import infer_shapes
from .passes.calibrate import random_samples
from .passes.fusion import STRATEGIES, plan_region
from .passes.host import REFERENCE, place_on_host
from .passes.partition import partition
from .passes.quantize import quantize
from .runtime.module import Module
from .targets.base import INT8_TFLITE, Target
from .targets.cpu.host_model import PYNQ_A9
from .targets.registry import get_target

CPU = "cpu"
# How many inputs a re-quantised QDQ model is calibrated on when none are given.
SEEDED_CALIBRATION = 8
# What `placement="cheapest"` charges per byte a node reads from another device: the runtime
# moves it device -> host -> device, two memcpys through the host's DRAM, each reading and
# writing every byte, at the modelled host's bandwidth (the Pynq's 2.1 GB/s DDR3,
# targets/cpu/host_model.PYNQ_A9, cited there): 4 bytes of DRAM traffic per byte moved.
COPY_SECONDS_PER_BYTE = 4 / (PYNQ_A9.dram_gbs * 1e9)


def compile(graph: "Graph | str | Path", target: "str | Path | Target | Sequence" = "cpu", *,
            cpu_nodes: Iterable[str] = (), min_region_macs: int | None = None,
            config: Mapping[str, Any] | None = None, calibration: Any = None,
            fusion: str | None = None, pins: Mapping[str, str] | None = None,
            placement: str = "first", host: "str | Target | None" = None) -> Module:
    """Compile `graph` (a Graph or an ONNX file path) for `target`.

    target: a name ("toy"), "name:preset", a .toml/.json config file, or a Target instance; or
        several devices, as a list of those or one string "vta,dnnvm": each node goes to the
        first device that accepts it (the CPU last), docs/partitioning.md "Several devices".
    cpu_nodes: node names or glob patterns that must run on the CPU.
    pins: node name or glob pattern -> device name ("cpu" or one of the devices): those nodes
        run there, or the compile is refused (PlacementError) saying why that device cannot.
    placement: "first" (the first device in the list that accepts a node) or "cheapest" (the
        device whose cost model prices the node lowest; every device needs one).
    min_region_macs: offloaded regions with fewer MACs run on the CPU instead (default: the
        target's own rule).
    config: config fields overriding the target's (unknown fields raise TargetError; one
        device only).
    calibration: sample inputs for targets whose prepare() quantises (e.g. vta): a dict
        name -> array, a list of such dicts, or an array split along axis 0; None lets the
        target calibrate on random data (with a warning).
    fusion: "optimized" (the default for targets that declare fusion templates), "greedy" or
        "none" (the default for the others): how layers are grouped into units lowered as
        one (passes/fusion/).
    host: what runs the CPU regions: None or "reference" (the NumPy reference), or "c" /
        "c:preset" / a c Target (generated C, passes/host.py; docs/deploy.md).
    """
    # 1. the devices, with their configs resolved (preset, file, overrides)
    targets = resolve_targets(target, config)
    tgt = targets[0]
    # 2. the graph: load a model file if given a path (a TFLite int8 model in its own
    #    arithmetic, or as float to re-quantise in the devices' shared format)
    if not isinstance(graph, Graph):
        graph, calibration = _load_model(graph, tgt, calibration)
    # 3. type every value (a copy: the caller's graph is left alone); support rules, MAC
    #    counts and device buffer sizes all read shapes
    g = infer_shapes(graph)
    g.toposort()
    # 4. the devices' shared number format (vta: fold BatchNorm, int8 with power-of-two
    #    scales), then each device's own rewrites (vta: window packing); identity for a float
    #    target. A device leaves alone the nodes this compile keeps off it.
    cpu_nodes = tuple(cpu_nodes)
    pins = dict(pins or {})
    g = to_number_format(g, tgt, calibration)
    elsewhere = _placed_elsewhere(g, targets, pins, placement) if len(targets) > 1 else {}
    for t in targets:
        t.cpu_nodes = cpu_nodes + tuple(p for p, d in pins.items() if d != t.name) + \
            elsewhere.get(t.name, ())
        g = rewrite(g, t)
    # 5. partition: annotate, merge convex regions, apply the size rule, schedule
    costs = node_costs(g, targets) if placement == "cheapest" else None
    parts = partition(g, targets, cpu_nodes=cpu_nodes, min_region_macs=min_region_macs,
                      pins=pins, choice=placement, costs=costs,
                      copy_seconds_per_byte=COPY_SECONDS_PER_BYTE)
    # 6. fusion: which layers of each offloaded region are lowered as one unit
    by_name = {t.name: t for t in targets}
    strategies = {t.name: _fusion_strategy(t, fusion, len(targets) > 1) for t in targets}
    parts.report.fusion = ",".join(dict.fromkeys(strategies.values()))
    groups = {}                # region -> its fused groups, for targets that fuse
    for region in parts.offloaded:
        t, strategy = by_name[region.target], strategies[region.target]
        if not t.fusion_templates:
            continue
        groups[region.name] = []
        if strategy != "none":
            f = plan_region(t, region, strategy)
            groups[region.name] = f.groups()
            parts.report.fused += f.report(region.name)
    # 7. lower each offloaded region to its device's kernel
    kernels = {}
    for region in parts.offloaded:
        t = by_name[region.target]
        try:
            kernels[region.name] = (t.lower(region, groups[region.name])
                                    if region.name in groups else t.lower(region))
        except RetargetError as e:
            raise type(e)(f"lowering region {region.name!r} ({', '.join(region.node_names)}) "
                          f"for {t.name}: {e}") from None
    # 8. the host: CPU regions as generated C when asked (the reference otherwise)
    regions, host_code = parts.regions, None
    if host is not None and host != REFERENCE:
        regions, host_code = place_on_host(g, parts.regions, parts.report, get_target(host))
    # 9. package graph, regions, kernels and the placement report as a Module
    return Module(g, tgt, regions, kernels, parts.report, targets={t.name: t for t in targets},
                  host=host_code)


def resolve_targets(target: "str | Path | Target | Sequence", config: Mapping[str, Any] | None
                    = None) -> list[Target]:
    """The compile's devices, in order: one target, or several ("vta,dnnvm" or a list). The
    CPU, always the last resort, is implicit (a "cpu" in a list of several is dropped). Several
    devices must compute in one number format (docs/partitioning.md says why)."""
    specs = (target.split(",") if isinstance(target, str) and "," in target else
             list(target) if isinstance(target, (list, tuple)) else [target])
    if len(specs) == 1:
        return [get_target(specs[0], config)]
    if config:
        raise TargetError(f"config overrides {sorted(config)} with several devices: name which "
                          f"device they are for with a .toml/.json config file per device")
    targets = [get_target(s.strip() if isinstance(s, str) else s) for s in specs]
    targets = [t for t in targets if t.name != CPU] or targets[:1]
    seen = [t.name for t in targets]
    if len(set(seen)) != len(seen):
        raise TargetError(f"devices {', '.join(t.spec for t in targets)}: each target may appear "
                          f"once in a compile (two configs of one target are not supported)")
    formats = {t.name: t.number_format for t in targets}
    if len(set(formats.values())) > 1:
        said = ", ".join(f"{n} {'float' if f is None else f.name + (' per-channel' if f.per_channel else '')}"
                         for n, f in formats.items())
        raise TargetError(f"devices in one compile must share a number format; {said}: compile "
                          f"for them separately (a region in another format would need its own "
                          f"quantisation and conversions at every boundary)")
    return targets


def _placed_elsewhere(graph: Graph, targets: list[Target], pins: Mapping[str, str],
                      placement: str) -> dict[str, tuple[str, ...]]:
    """Per device, the unpinned nodes (as exact name patterns) the partitioner will give
    another device, so that this device's rewrite (vta's window packing) leaves them alone:
    with first-fit, those an earlier device accepts; with cheapest, those another device
    prices lower (on the graph before any rewrite)."""
    costs = node_costs(graph, targets) if placement == "cheapest" else None
    out: dict[str, list[str]] = {t.name: [] for t in targets}
    for i, n in enumerate(graph.nodes):
        if any(fnmatch.fnmatchcase(n.name, p) for p in pins):
            continue
        takers = [t.name for t in targets if t.supports(n, graph).ok]
        if costs is None:
            others = [t.name for t in targets[next((k + 1 for k, t in enumerate(targets)
                                                    if t.name in takers), 0):]] if takers else []
        else:
            priced = {d: costs[i][d] for d in takers if costs[i][d] is not None}
            best = min(priced, key=lambda d: (priced[d], takers.index(d))) if priced else None
            others = [t.name for t in targets if best is not None and t.name != best]
        for d in others:
            out[d].append(glob.escape(n.name))
    return {d: tuple(names) for d, names in out.items()}


def node_costs(graph: Graph, targets: list[Target]) -> list[dict[str, float | None]]:
    """Per node, each device's modelled seconds for it (Target.estimate_node_cost; None where
    the device refuses the node or cannot price it). Every device must have a cost model."""
    missing = [t.name for t in targets if not t.has_cost_model]
    if missing:
        raise TargetError(f"placement 'cheapest' needs a cost model on every device; "
                          f"{', '.join(missing)} {'has' if len(missing) == 1 else 'have'} none (use "
                          f"placement 'first')")
    caches = {t.name: {} for t in targets}
    return [{t.name: t.estimate_node_cost(n, graph, caches[t.name]) for t in targets}
            for n in graph.nodes]


def _load_model(path, target: Target, calibration: Any) -> tuple[Graph, Any]:
    """The model file as the Graph `target` starts from, and the calibration samples for it.

    A TFLite int8 model stays in its own arithmetic (int8-tflite) for a float target or one
    that computes in that format; for any other number format it is imported as float (its
    dequantised weights) and re-quantised, calibrated on the model's own inputs (given, or
    uniform over the int8 range; float samples for an int8 input count as real values) turned
    into the real values the float graph takes."""
    if not is_tflite_path(path):
        return _load_onnx_model(path, target, calibration)
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


def _load_onnx_model(path, target: Target, calibration: Any) -> tuple[Graph, Any]:
    """An ONNX file as `target` starts from it. A QDQ model whose scales or zero points the
    target's number format cannot hold (vta / dnnvm: powers of two, zero points 0; nvdla:
    zero points 0) is imported as its float network (`load_quantized_as_float`) and
    re-quantised in the target's format, calibrated on `calibration` or, without it, on
    seeded standard-normal inputs (with a warning); any other model loads as before."""
    graph = load_onnx(path)
    why = qdq_unfit_reason(graph, target)
    if why is None:
        return graph, calibration
    how = ("the given calibration inputs" if calibration is not None else
           f"{SEEDED_CALIBRATION} seeded standard-normal inputs (pass real ones)")
    warnings.warn(f"{path}: re-quantising the QDQ model in {target.number_format.name} for "
                  f"{target.name}, calibrated on {how}: its format cannot hold the file's "
                  f"quantisation ({why}); `retarget compile` prints the deviation from "
                  f"onnxruntime", stacklevel=4)
    float_graph = load_quantized_as_float(path)
    if calibration is None:
        calibration = random_samples(float_graph, SEEDED_CALIBRATION)
    return float_graph, calibration


def qdq_unfit_reason(graph: Graph, target: Target) -> str | None:
    """Why `target`'s number format cannot hold the QDQ model `graph` (as loaded by
    load_onnx): the conversion's refusal (a scale that is not a power of two, a zero point);
    None when it can, or when `graph` is no QDQ model or the target has no number format."""
    fmt = target.number_format
    if fmt is None or not _is_qdq_model(graph):
        return None
    try:
        convert_quantized(infer_shapes(graph), rounding=fmt.rounding, scales=fmt.scales)
    except UnsupportedOpError as e:
        return str(e).split(";")[0]
    return None


def _fusion_strategy(target: Target, fusion: str | None, several: bool = False) -> str:
    """The strategy for `target`'s regions. With several devices, an asked-for strategy
    applies to the devices that fuse and "none" to the others."""
    if fusion is not None and fusion not in STRATEGIES:
        raise TargetError(f"fusion={fusion!r}; choose one of {', '.join(STRATEGIES)}")
    if fusion is None or (several and not target.fusion_templates):
        return "optimized" if target.fusion_templates else "none"
    if fusion != "none" and not target.fusion_templates:
        raise TargetError(f"target {target.name!r} declares no fusion templates; "
                          f"fusion={fusion!r} needs them (use fusion='none')")
    return fusion


def prepare(graph: Graph, target: Target, calibration: Any = None) -> Graph:
    """`graph` (typed) in the form `target`'s rules read: converted from a pre-quantised
    (QDQ) model or quantised into `target.number_format` (calibrated on `calibration`: a dict
    name -> array, a list of such dicts, or an array split along axis 0; None calibrates on
    random data with a warning), then rewritten by the shared passes the target declares
    (`target.graph_passes()`, run here in order) and by `target.prepare`, typed and sorted. An
    already-integer graph is not quantised again."""
    return rewrite(to_number_format(graph, target, calibration), target)


def rewrite(graph: Graph, target: Target) -> Graph:
    """prepare()'s second half, on a graph already in the target's number format: the shared
    passes the target declares, then `target.prepare`, typed and sorted (passes.rewrite_for)."""
    return rewrite_for(graph, target)


def to_number_format(graph: Graph, target: Target, calibration: Any = None) -> Graph:
    """prepare()'s first half: `graph` converted (QDQ) or quantised into the target's number
    format, without the target's own rewrite (which may depend on its config)."""
    fmt = target.number_format
    if fmt is None:
        return graph
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
    if fmt.scales == "onnxruntime":
        raise NotImplementedError(f"{target.name}: quantising a float graph into {fmt.name} "
                                  f"is not implemented; quantise it with onnxruntime's "
                                  f"quantize_static and compile the QDQ model")
    if any(n.op in ACCUMULATING_OPS and n.inputs[0].type is not None
           and np.dtype(n.inputs[0].type.dtype).kind == "f" for n in graph.nodes):
        return quantize(graph, calibration, per_channel=fmt.per_channel, scales=fmt.scales)
    return graph


def _is_qdq_model(graph: Graph) -> bool:
    """An ONNX-quantised model: QLinearConv, or weights stored as int8 behind a
    DequantizeLinear. retarget's own multiplier + shift graphs also hold QuantizeLinear /
    DequantizeLinear, but only at the float edges of activations, so they are not converted
    (again)."""
    return any(n.op == "QLinearConv" or (n.op == "DequantizeLinear" and n.inputs[0].is_const)
               for n in graph.nodes) or (any(n.op in QDQ_OPS for n in graph.nodes) and not any(
        n.op in ("RequantizeMul", "QAddMul", "Requantize", "RequantizeOrt")
        for n in graph.nodes))


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


__all__ = ["compile", "node_costs", "prepare", "qdq_unfit_reason", "resolve_targets",
           "to_number_format"]
