"""Real exports without their weights: ship a model's graph, regenerate its weights.

A timm network exported to ONNX is mostly weights (ViT-Tiny: 23 MB of its 23 MB). What a
compiler test needs from the export is its graph: the ops, attributes, constant shapes and
index tensors the exporter wrote. `strip_weights` keeps all of that and replaces each large
float weight by a note of its shape, mean, standard deviation and range; `fill_weights` puts
seeded normal values with those statistics back, clipped to the range (so a BatchNorm variance
stays positive). The weights were random to begin with (timm's own
initialisation), so the filled model is the same kind of network the export was.

What is kept verbatim: every non-float tensor (Swin's relative-position indices, Reshape
shapes), every float tensor of at most KEEP_ELEMENTS values, and every float tensor with at
most KEEP_DISTINCT distinct values (attention masks of 0 and -100, LayerNorm's ones, BatchNorm's
running statistics). Such tensors compress well, and the files are stored gzipped.
"""
from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

KEEP_ELEMENTS = 64
KEEP_DISTINCT = 16
# The note a stripped initializer carries in its doc_string.
MARK = "retarget:random "


def _strippable(t: TensorProto) -> np.ndarray | None:
    if t.data_type not in (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE):
        return None
    a = numpy_helper.to_array(t)
    if a.size <= KEEP_ELEMENTS or np.unique(a).size <= KEEP_DISTINCT:
        return None
    return a


def strip_weights(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of `model` whose large float initializers hold no data, only a note of their
    statistics (see the module docstring for what is kept)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for t in out.graph.initializer:
        a = _strippable(t)
        if a is None:
            continue
        note = {"mean": float(a.mean()), "std": float(a.std()), "min": float(a.min()), "max": float(a.max())}
        dims, dtype, name = list(t.dims), t.data_type, t.name
        t.Clear()
        t.name, t.data_type = name, dtype
        t.dims.extend(dims)
        t.doc_string = MARK + json.dumps(note)
    return out


def stripped_names(model: onnx.ModelProto) -> list[str]:
    return [t.name for t in model.graph.initializer if t.doc_string.startswith(MARK)]


def fill_weights(model: onnx.ModelProto, seed: int = 0) -> onnx.ModelProto:
    """A copy of `model` with each stripped initializer filled with normal values of its
    recorded mean and standard deviation, clipped to its recorded range. Each tensor's values depend only on `seed` and its
    name, so the same seed gives the same model."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for t in out.graph.initializer:
        if not t.doc_string.startswith(MARK):
            continue
        note = json.loads(t.doc_string[len(MARK):])
        rng = np.random.default_rng([seed, zlib.crc32(t.name.encode())])
        dtype = onnx.helper.tensor_dtype_to_np_dtype(t.data_type)
        a = note["mean"] + note["std"] * rng.standard_normal(tuple(t.dims))
        a = np.clip(a, note["min"], note["max"]).astype(dtype)
        t.CopyFrom(numpy_helper.from_array(a, t.name))
    return out


def save_stripped(model: onnx.ModelProto, path: str | Path) -> int:
    """Write `strip_weights(model)` gzipped to `path`; returns the bytes written."""
    data = gzip.compress(strip_weights(model).SerializeToString(), compresslevel=9, mtime=0)
    Path(path).write_bytes(data)
    return len(data)


def load_filled(path: str | Path, seed: int = 0) -> onnx.ModelProto:
    """Read a file written by `save_stripped` and fill its weights (`fill_weights`)."""
    model = onnx.load_from_string(gzip.decompress(Path(path).read_bytes()))
    return fill_weights(model, seed)
