"""Export a Module's offloaded regions as JSON for an outside compiler.

This is the route of papers/tvm-nvdla-byoc.txt: annotate and partition in retarget, then give
each offloaded region to the accelerator vendor's own compiler as a self-describing JSON graph
plus its weights. The format (version 1) is documented in docs/partitioning.md:

    {"format": "retarget.regions", "version": 1, "target": "toy", "weights": "net.npz",
     "regions": [{"name": "toy_0", "macs": 123,
                  "inputs":  [{"name": "x", "shape": [1, 3, 8, 8], "dtype": "float32"}],
                  "outputs": [{"name": "y", ...}],
                  "nodes": [{"op": "Conv", "name": "conv1", "attrs": {"strides": [1, 1], ...},
                             "inputs": [{"name": "x", "kind": "input", "shape": .., "dtype": ..},
                                        {"name": "w", "kind": "weight", "weight": "w", ...}],
                             "outputs": [{"name": "c1", "shape": .., "dtype": ..}]}]}]}

Input kinds: "input" (a region input, fed at run time), "weight" (a constant; its array is
`weights[<weight>]` in the .npz), "internal" (produced by an earlier node of the same region).
Attribute values are JSON numbers, strings and lists; array attributes are {"$array": key}
into the same .npz. Nothing in the export is executable.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import RetargetError, TargetError
from ...ir.graph import Graph, Node, Value, constant
from ...ir.types import TensorType
from ...ops.registry import resolve_attrs

FORMAT = "retarget.regions"
VERSION = 1


def _tensor(v: Value) -> dict[str, Any]:
    return {"name": v.name, "shape": None if v.type is None else list(v.type.shape),
            "dtype": None if v.type is None else v.type.dtype}


def _attr(node: Node, key: str, a: Any, arrays: dict[str, np.ndarray]) -> Any:
    if isinstance(a, np.ndarray):
        k = f"attr:{node.name}:{key}"
        arrays[k] = a
        return {"$array": k}
    if isinstance(a, np.generic):
        return a.item()
    if isinstance(a, (list, tuple)):
        return [_attr(node, key, x, arrays) for x in a]
    if a is None or isinstance(a, (bool, int, float, str)):
        return a
    raise RetargetError(f"{node.op} '{node.name}': attribute {key!r} ({type(a).__name__}) "
                        f"cannot be exported")


def region_to_json(region, arrays: dict[str, np.ndarray]) -> dict:
    """One region's entry of the export document; its weights and array attributes are added
    to `arrays`."""
    region_inputs = {id(v) for v in region.inputs}
    nodes = []
    for n in region.nodes:
        ins = []
        for v in n.inputs:
            if v is None:
                ins.append(None)
                continue
            e = _tensor(v)
            if v.is_const:
                e["kind"], e["weight"] = "weight", v.name
                arrays[v.name] = np.asarray(v.const)
            else:
                e["kind"] = "input" if id(v) in region_inputs else "internal"
            ins.append(e)
        # Attributes with defaults filled in: an outside compiler should not need to know
        # retarget's (ONNX's) defaults.
        attrs = {k: _attr(n, k, a, arrays) for k, a in resolve_attrs(n).items()}
        nodes.append({"op": n.op, "name": n.name, "attrs": attrs, "inputs": ins,
                      "outputs": [_tensor(v) for v in n.outputs]})
    return {"name": region.name, "macs": region.macs,
            "inputs": [_tensor(v) for v in region.inputs],
            "outputs": [_tensor(v) for v in region.outputs], "nodes": nodes}


def document(target: str, regions, config: dict | None = None
             ) -> tuple[dict, dict[str, np.ndarray]]:
    """The export document of `regions` for `target`, and the arrays it refers to. `config`:
    the hardware parameters the compiler should build for (optional key "config")."""
    arrays: dict[str, np.ndarray] = {}
    doc = {"format": FORMAT, "version": VERSION, "target": target,
           "regions": [region_to_json(r, arrays) for r in regions]}
    if config is not None:
        doc["config"] = config
    return doc, arrays


def regions_to_json(module) -> tuple[dict, dict[str, np.ndarray]]:
    """The export document of a module's offloaded regions and the arrays it refers to."""
    if len(module.targets) > 1:
        raise TargetError(f"exporting the regions of a module on several devices "
                          f"({', '.join(module.targets)}) is not implemented: the document "
                          f"names one target; compile for one device to export its regions")
    return document(module.target.name, module.offloaded)


def write_document(doc: dict, arrays: dict[str, np.ndarray], path: Path) -> Path:
    """`doc` as `path` (.json) with its arrays beside it (.npz, named in doc["weights"])."""
    npz = path.with_suffix(".npz")
    doc = {**doc, "weights": npz.name}
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(npz, "wb") as fh:
        np.savez(fh, allow_pickle=False, **arrays)
    path.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    return path


def read_document(doc: dict, arrays) -> list[Graph]:
    """The regions of an export document as typed Graphs (what an outside compiler written in
    Python starts from): values shared by name, constants from `arrays` (the .npz), array
    attributes restored. Refuses another format or version, naming what it got."""
    if doc.get("format") != FORMAT or doc.get("version") != VERSION:
        raise RetargetError(f"expected a {FORMAT} document version {VERSION}, got "
                            f"{doc.get('format')!r} version {doc.get('version')!r}")
    graphs = []
    for r in doc["regions"]:
        values: dict[str, Value] = {}

        def value(e: dict) -> Value:
            if e["name"] in values:
                return values[e["name"]]
            t = None if e.get("shape") is None else TensorType(tuple(e["shape"]), e["dtype"])
            if e.get("kind") == "weight":
                if e["weight"] not in arrays:
                    raise RetargetError(f"region {r['name']!r}: weight {e['weight']!r} is not "
                                        f"in the arrays file")
                v = constant(e["name"], np.asarray(arrays[e["weight"]]))
            else:
                v = Value(e["name"], t)
            values[e["name"]] = v
            return v

        def attr(a):
            if isinstance(a, dict) and "$array" in a:
                return np.asarray(arrays[a["$array"]])
            if isinstance(a, list):
                return [attr(x) for x in a]
            return a

        inputs = [value(e) for e in r["inputs"]]
        nodes = [Node(n["op"], n["name"], [None if e is None else value(e) for e in n["inputs"]],
                      [value(e) for e in n["outputs"]],
                      {k: attr(a) for k, a in n["attrs"].items()}) for n in r["nodes"]]
        outputs = [value(e) for e in r["outputs"]]
        graphs.append(Graph(nodes, inputs, outputs, name=r["name"]))
    return graphs


def export_regions(module, path: str | Path) -> Path:
    """Write the export to `path` (.json) and its arrays beside it (.npz); returns the path."""
    path = Path(path)
    if path.suffix != ".json":
        raise RetargetError(f"export path {path} must end in .json (the arrays go to a .npz beside it)")
    doc, arrays = regions_to_json(module)
    return write_document(doc, arrays, path)


__all__ = ["FORMAT", "VERSION", "document", "export_regions", "read_document", "region_to_json",
           "regions_to_json", "write_document"]
