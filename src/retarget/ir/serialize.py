"""The JSON form of a Graph: `save_graph(graph, "net.json")` writes net.json (structure, types,
attributes) and net.npz beside it (constant data and array attributes).

No pickle anywhere: arrays go through .npz with allow_pickle=False both ways, so loading a
file cannot run code. The form round-trips exactly: names, order, types, attribute values
and their Python types (list vs tuple, int vs float vs NumPy scalar), constant bytes.

Layout of the JSON (version 1):
    {"format": "retarget.graph", "version": 1, "name": ..., "arrays": "net.npz",
     "values":  [{"name": "w", "type": {"shape": [..], "dtype": ".."} | null, "const": "v3"?}],
     "inputs":  ["x"], "outputs": ["y"],
     "nodes":   [{"op": "Conv", "name": "conv1", "inputs": ["x", "w", null],
                  "outputs": ["y"], "attrs": {"strides": [2, 2], ...}}]}
Attribute values that JSON cannot say exactly are tagged objects: {"$array": key},
{"$tuple": [...]}, {"$float": "nan"|"inf"|"-inf"}.
"""
from __future__ import annotations

import json
import math
import zipfile
import zlib
from pathlib import Path
from typing import Any, Container

import numpy as np

from ..errors import GraphError, ModelLoadError, ResourceLimitError, RetargetError
from ..limits import check_regular_file, read_regular_file
from .graph import Graph, Node, Value
from .types import TensorType

FORMAT = "retarget.graph"
VERSION = 1
MAX_JSON_BYTES = 1 << 30   # a graph or manifest JSON larger than this is not one we wrote
# What np.load raises on a damaged .npz/.npy (zipfile's own errors included: a header may claim
# a compression method it does not have, or hold bytes zlib cannot inflate).
ARRAY_FILE_ERRORS = (ValueError, OSError, EOFError, KeyError, zipfile.BadZipFile,
                     NotImplementedError, zlib.error)


def arrays_path(path) -> Path:
    """Where the arrays of the graph saved at `path` live: the same name with .npz."""
    return Path(path).with_suffix(".npz")


# ---- save ---------------------------------------------------------------------------------
def save_graph(graph: Graph, path) -> None:
    """Write `graph` to `path` (JSON) and its arrays to `arrays_path(path)` (.npz)."""
    path = Path(path)
    if path.suffix == ".npz":
        raise ValueError(f"{path}: give the .json path; the arrays go to a .npz beside it")
    arrays: dict[str, np.ndarray] = {}
    values = []
    seen: dict[str, Value] = {}
    for v in graph.values():
        if seen.setdefault(v.name, v) is not v:
            raise GraphError(f"cannot save graph {graph.name!r}: two values are named {v.name!r}")
        entry: dict[str, Any] = {"name": v.name, "type": _type_json(v.type)}
        if v.is_const:
            key = f"v{len(arrays)}"
            arrays[key] = np.asarray(v.const)
            entry["const"] = key
        values.append(entry)
    nodes = []
    for n in graph.nodes:
        attrs = {}
        for k, a in n.attrs.items():
            try:
                attrs[k] = _encode_attr(a, arrays)
            except TypeError as e:
                raise GraphError(f"cannot save {n.op} '{n.name}': attribute {k!r}: {e}") from None
        nodes.append({"op": n.op, "name": n.name,
                      "inputs": [None if v is None else v.name for v in n.inputs],
                      "outputs": [v.name for v in n.outputs], "attrs": attrs})
    doc = {"format": FORMAT, "version": VERSION, "name": graph.name,
           "arrays": arrays_path(path).name, "values": values,
           "inputs": [v.name for v in graph.inputs], "outputs": [v.name for v in graph.outputs],
           "nodes": nodes}
    for key, a in arrays.items():
        if a.dtype.hasobject:
            raise GraphError(f"cannot save graph {graph.name!r}: array {key} has object dtype")
    # Arrays first: a JSON next to a missing/stale .npz is the worse half-written state.
    with open(arrays_path(path), "wb") as f:
        np.savez(f, allow_pickle=False, **arrays)
    path.write_text(json.dumps(doc, indent=1, allow_nan=False))


def _type_json(t: TensorType | None):
    return None if t is None else {"shape": list(t.shape), "dtype": t.dtype}


def _encode_attr(a, arrays: dict[str, np.ndarray]):
    if isinstance(a, (np.ndarray, np.generic)):
        # NumPy scalars go here too: their dtype is part of the value.
        key = f"a{len(arrays)}"
        arrays[key] = np.asarray(a)
        return {"$array": key, "scalar": isinstance(a, np.generic)}
    if isinstance(a, bool) or a is None or isinstance(a, (int, str)):
        return a
    if isinstance(a, float):
        return a if math.isfinite(a) else {"$float": repr(a)}
    if isinstance(a, list):
        return [_encode_attr(x, arrays) for x in a]
    if isinstance(a, tuple):
        return {"$tuple": [_encode_attr(x, arrays) for x in a]}
    raise TypeError(f"values of type {type(a).__name__} cannot be saved")


# ---- load -----------------------------------------------------------------------------------
def read_versioned_json(path: Path, fmt: str, version: int, what: str) -> dict:
    """A JSON document {"format": fmt, "version": version, ...} (graphs, module manifests), or
    ModelLoadError saying what `path` is not."""
    try:
        raw = read_regular_file(path, what, MAX_JSON_BYTES)
    except ResourceLimitError as e:
        raise ModelLoadError(str(e)) from None
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise ModelLoadError(f"{path}: not valid JSON, so not a {what} ({e})") from None
    except RecursionError:
        raise ModelLoadError(f"{path}: JSON nested too deeply to be a {what}") from None
    if not isinstance(doc, dict) or doc.get("format") != fmt:
        raise ModelLoadError(f"{path}: not a {what} (format is not {fmt!r})")
    if doc.get("version") != version:
        raise ModelLoadError(f"{path}: {what} format version {doc.get('version')!r}; this "
                             f"retarget reads version {version}")
    return doc


def load_graph(path, allowed_arrays: Container[str] | None = None) -> Graph:
    """Read a graph written by save_graph. ModelLoadError when the files are not such a graph.
    The arrays file must be a regular file beside the JSON (and, when `allowed_arrays` is
    given, one of those names: an artifact allows only the files its manifest lists)."""
    path = Path(path)
    doc = read_versioned_json(path, FORMAT, VERSION, "retarget graph JSON file")
    name = doc.get("arrays") or arrays_path(path).name
    if not isinstance(name, str) or Path(name).name != name or name in (".", "..") or (
            allowed_arrays is not None and name not in allowed_arrays):
        raise ModelLoadError(f"{path}: its arrays file {name!r} is not a file beside it that "
                             f"may be read")
    npz = path.with_name(name)
    if not npz.exists():
        raise ModelLoadError(f"{path}: its arrays file {npz} is missing")
    try:
        check_regular_file(npz, f"{path}: arrays file")
    except ResourceLimitError as e:
        raise ModelLoadError(str(e)) from None
    try:
        with np.load(npz, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except FileNotFoundError:
        raise ModelLoadError(f"{path}: its arrays file {npz} is missing") from None
    except ARRAY_FILE_ERRORS as e:
        raise ModelLoadError(f"{path}: its arrays file {npz} is unreadable ({e})") from None
    try:
        return _build(doc, arrays)
    except RetargetError as e:
        raise ModelLoadError(f"{path}: {e}") from None
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
        raise ModelLoadError(f"{path}: malformed graph file ({type(e).__name__}: {e})") from None


def _array(arrays: dict[str, np.ndarray], key: str) -> np.ndarray:
    if key not in arrays:
        raise KeyError(f"array {key!r} is not in the .npz file")
    return arrays[key]


def _decode_attr(a, arrays):
    if isinstance(a, list):
        return [_decode_attr(x, arrays) for x in a]
    if isinstance(a, dict):
        if "$array" in a:
            arr = _array(arrays, a["$array"])
            return arr[()] if a.get("scalar") else arr
        if "$tuple" in a:
            return tuple(_decode_attr(x, arrays) for x in a["$tuple"])
        if "$float" in a:
            return float(a["$float"])
        raise ValueError(f"unknown tagged attribute {sorted(a)}")
    return a


def _names(items, what: str, optional: bool = False) -> list:
    """A JSON list of value names (None allowed for omitted optional inputs)."""
    if not isinstance(items, list) or not all(
            isinstance(x, str) or (optional and x is None) for x in items):
        raise TypeError(f"{what} must be a list of value names, got {items!r:.80}")
    return items


def _build(doc: dict, arrays: dict[str, np.ndarray]) -> Graph:
    values: dict[str, Value] = {}
    for key in ("values", "nodes"):
        if not isinstance(doc.get(key), list) or not all(isinstance(e, dict) for e in doc[key]):
            raise TypeError(f"{key!r} must be a list of objects")
    if not isinstance(doc.get("name", ""), str):
        raise TypeError("the graph's name must be a string")
    for n in doc["nodes"]:
        if not (isinstance(n.get("op"), str) and isinstance(n.get("name"), str)
                and isinstance(n.get("attrs"), dict)):
            raise TypeError(f"node {n.get('name')!r:.60}: op and name must be strings, attrs an "
                            f"object")
        _names(n.get("inputs"), f"node {n['name']!r} inputs", optional=True)
        _names(n.get("outputs"), f"node {n['name']!r} outputs")
    _names(doc.get("inputs"), "graph inputs")
    _names(doc.get("outputs"), "graph outputs")
    for e in doc["values"]:
        if not isinstance(e.get("name"), str):
            raise TypeError(f"value name must be a string, got {e.get('name')!r:.60}")
        t = e["type"]
        typ = None if t is None else TensorType(tuple(t["shape"]), t["dtype"])
        const = _array(arrays, e["const"]) if "const" in e else None
        if e["name"] in values:
            raise ValueError(f"value {e['name']!r} is listed twice")
        values[e["name"]] = Value(e["name"], typ, const)

    def get(name):
        if name not in values:
            raise KeyError(f"value {name!r} is used but not listed")
        return values[name]

    nodes = [Node(n["op"], n["name"], [None if x is None else get(x) for x in n["inputs"]],
                  [get(y) for y in n["outputs"]],
                  {k: _decode_attr(a, arrays) for k, a in n["attrs"].items()})
             for n in doc["nodes"]]
    return Graph(nodes, [get(x) for x in doc["inputs"]], [get(y) for y in doc["outputs"]],
                 name=doc["name"])
