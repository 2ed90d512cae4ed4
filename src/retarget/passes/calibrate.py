"""Calibration for post-training quantisation: run the float graph, record max|x| per value.

The samples are what the user gives (real inputs give real ranges); with none we fall back to
standard-normal random data and say so, because ranges from noise can be far from the real
ones. Fractional bits are then chosen from the maxima (`frac_bits_for`).
"""
from __future__ import annotations

import math
import warnings
from typing import Iterable, Mapping, Union

import numpy as np

from ..errors import InputError
from ..ir.graph import Graph
from ..ir.types import TensorType
from .infer_shapes import infer_shapes
from ..ops.reference import run_graph

# Fractional bits are kept in this range: a tensor of all zeros (or a tiny one) would otherwise
# ask for an unbounded scale, and shifts beyond ~30 bits are meaningless for int32 accumulators.
MIN_FRAC_BITS, MAX_FRAC_BITS = -24, 24
# The largest magnitude a symmetric int8 tensor uses (-128 is left for saturation only).
QMAX = 127
NUM_RANDOM_SAMPLES = 4

Samples = Union[None, np.ndarray, Mapping[str, np.ndarray], Iterable[Mapping[str, np.ndarray]]]


def frac_bits_for(max_abs: float, qmax: int = QMAX) -> int:
    """The largest f with max_abs * 2**f <= qmax, so the extreme value rounds to at most qmax
    and nothing calibrated saturates. Clamped to [MIN_FRAC_BITS, MAX_FRAC_BITS]."""
    if not math.isfinite(max_abs):
        raise InputError(f"calibration saw a non-finite value ({max_abs}); check the inputs")
    if max_abs <= 0:
        return MAX_FRAC_BITS
    f = math.floor(math.log2(qmax / max_abs))
    # log2 is rounded; make the inequality exact with ldexp (exact for powers of two).
    while math.ldexp(max_abs, f) > qmax:
        f -= 1
    while math.ldexp(max_abs, f + 1) <= qmax:
        f += 1
    return max(MIN_FRAC_BITS, min(MAX_FRAC_BITS, f))


def random_samples(graph: Graph, count: int, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """`count` seeded standard-normal samples of every input of `graph` (typed)."""
    rng = np.random.default_rng(seed)
    return [{v.name: rng.standard_normal(v.type.shape).astype(v.type.dtype)
             for v in graph.inputs} for _ in range(count)]


def sample_batches(graph: Graph, samples: Samples, *, num_random: int = NUM_RANDOM_SAMPLES,
                   seed: int = 0) -> list[dict[str, np.ndarray]]:
    """Normalise the accepted sample forms into a list of input dicts for `graph`.

    Accepted: None (random data, with a warning); one dict name -> array; a list of such
    dicts; or, for a single-input graph, an array of samples along the leading axis (split
    into batches of the input's batch size when it divides, else run as one batch)."""
    if samples is None:
        warnings.warn("quantize: no calibration inputs given; calibrating on standard-normal "
                      "random data, so the int8 ranges may not fit real inputs",
                      stacklevel=4)
        return random_samples(graph, num_random, seed)
    if isinstance(samples, np.ndarray):
        if len(graph.inputs) != 1:
            raise InputError(f"a bare calibration array needs a single-input graph; this one "
                             f"has inputs {[v.name for v in graph.inputs]}: pass dicts")
        v = graph.inputs[0]
        b = v.type.shape[0] if v.type.shape else 1
        if samples.ndim != v.type.rank or samples.shape[1:] != v.type.shape[1:]:
            raise InputError(f"calibration array of shape {list(samples.shape)} does not fit "
                             f"input {v.name!r} {v.type} (only the batch axis may differ)")
        if samples.shape[0] == 0:
            raise InputError(f"calibration array for input {v.name!r} holds no samples "
                             f"(shape {list(samples.shape)})")
        if samples.shape[0] % max(b, 1):  # not whole batches: one batch of another size
            return [{v.name: samples.astype(v.type.dtype)}]
        return [{v.name: samples[i:i + b].astype(v.type.dtype)}
                for i in range(0, samples.shape[0], b)]
    if isinstance(samples, Mapping):
        return [dict(samples)]
    batches = [dict(s) for s in samples]
    if not batches:
        raise InputError("calibration inputs are empty; pass None to calibrate on random data")
    return batches


def calibrate(graph: Graph, batches: list[dict[str, np.ndarray]]) -> dict[str, float]:
    """max|x| over all batches for every float value the graph computes (inputs included).

    A batch whose arrays differ from the graph's inputs only in the leading (batch) axis runs
    on a copy of the graph re-typed for that batch size, so calibration sets need not match
    the batch the model is compiled for (a graph that hard-codes its batch fails here with the
    shape error naming the node)."""
    maxima: dict[str, float] = {}
    rebound: dict[tuple, Graph] = {}
    for i, batch in enumerate(batches):
        _check_sample(graph, batch, i)
        values = run_graph(_for_batch(graph, batch, rebound), batch, intermediates=True)
        for name, a in values.items():
            if np.issubdtype(a.dtype, np.floating):
                m = float(np.max(np.abs(a))) if a.size else 0.0
                if not math.isfinite(m):   # max() would skip a NaN silently
                    raise InputError(f"calibration sample #{i}: value {name!r} becomes "
                                     f"{'NaN' if math.isnan(m) else 'infinite'} although the "
                                     f"inputs are finite (the model overflows or divides by zero)")
                maxima[name] = max(maxima.get(name, 0.0), m)
    for v in graph.inputs:
        if maxima.get(v.name) == 0.0:
            warnings.warn(f"calibration: input {v.name!r} is zero in every sample; its scale is "
                          f"the finest, 2^-{MAX_FRAC_BITS}, so any input beyond "
                          f"{QMAX / 2 ** MAX_FRAC_BITS:g} in magnitude will saturate",
                          stacklevel=3)
    return maxima


def _check_sample(graph: Graph, batch: Mapping[str, np.ndarray], index: int) -> None:
    """Every float input of a calibration sample is present, non-empty and finite."""
    for v in graph.inputs:
        if v.name not in batch:
            raise InputError(f"calibration sample #{index} has no array for input {v.name!r} "
                             f"(it has {sorted(batch)})")
        a = np.asarray(batch[v.name])
        if a.size == 0:
            raise InputError(f"calibration sample #{index}: input {v.name!r} is empty "
                             f"(shape {list(a.shape)})")
        if np.issubdtype(a.dtype, np.floating) and not np.isfinite(a).all():
            bad = np.argwhere(~np.isfinite(a))[0]
            raise InputError(f"calibration sample #{index}: input {v.name!r} holds "
                             f"{int((~np.isfinite(a)).sum())} non-finite value(s) (first: "
                             f"{a[tuple(bad)]} at index {tuple(int(i) for i in bad)}); "
                             f"calibration needs finite data")


def _for_batch(graph: Graph, batch: Mapping[str, np.ndarray], cache: dict) -> Graph:
    shapes = {v.name: tuple(np.shape(batch[v.name])) for v in graph.inputs if v.name in batch}
    if all(shapes.get(v.name, v.type.shape) == v.type.shape for v in graph.inputs):
        return graph
    for v in graph.inputs:
        s = shapes.get(v.name, v.type.shape)
        if len(s) != v.type.rank or s[1:] != v.type.shape[1:]:
            raise InputError(f"calibration input {v.name!r} has shape {list(s)}; the graph "
                             f"expects {v.type} (only the batch axis may differ)")
    key = tuple(sorted(shapes.items()))
    if key not in cache:
        g = graph.copy()
        for v in g.inputs:
            v.type = TensorType(shapes.get(v.name, v.type.shape), v.type.dtype)
        cache[key] = infer_shapes(g)
    return cache[key]
