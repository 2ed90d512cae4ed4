"""Saving and loading a compiled Module as an artifact directory.

Layout
    DIR/manifest.json       format name and version, target (name, preset, full config), the
                            graph file's name, the regions in execution order with each offloaded
                            region's kernel spec, and the placement report
    DIR/graph.json, .npz    the whole graph in the IR's JSON form (ir/serialize.py): structure,
                            types, attributes; constants in graph.npz
    DIR/weights.npz         the arrays kernels store (keyed "<region>/<name>"); kernels may also
                            refer to graph constants by value name without copying them
    DIR/kernels/<region>/   each kernel's own files (e.g. an instruction binary)

Only JSON and .npz (allow_pickle=False) are read. Kernels are rebuilt by the *registered*
target's `load_kernel`, which maps the recorded kernel kind to a class it already has; nothing
in the directory is imported or executed.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ModelLoadError, RetargetError
from ..ir.serialize import load_graph, read_versioned_json, save_graph
from ..passes.partition import NodePlacement, PlacementReport
from ..targets.base import Region
from ..targets.registry import get_target

FORMAT = "retarget-module"
VERSION = 1
GRAPH_FILE = "graph.json"


def save_module(module, directory: str | Path) -> Path:
    """Write `module` to `directory` (created if needed; existing files are overwritten)."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    # Kernels see the graph's constants under their value names, so they can refer to them
    # instead of storing copies; only what they add goes to weights.npz.
    consts = {v.name: v.const for v in module.graph.constants()}
    weights: dict[str, np.ndarray] = dict(consts)
    save_graph(module.graph, out / GRAPH_FILE)
    regions = []
    for r in module.regions:
        entry: dict[str, Any] = {"name": r.name, "target": r.target, "nodes": r.node_names,
                                 "inputs": [v.name for v in r.inputs],
                                 "outputs": [v.name for v in r.outputs], "macs": r.macs}
        if r.target != "cpu":
            kdir = out / "kernels" / r.name
            kdir.mkdir(parents=True, exist_ok=True)
            entry["kernel"] = module.kernels[r.name].save(kdir, weights)
        regions.append(entry)
    t = module.target
    manifest = {"format": FORMAT, "version": VERSION,
                "target": {"name": t.name, "preset": t.preset_name, "config": t.config_dict()},
                "graph": GRAPH_FILE, "regions": regions, "report": module.report.to_dict()}
    for name, a in consts.items():
        if weights[name] is not a:
            raise RetargetError(f"a kernel replaced graph constant {name!r} in the weight store; "
                                f"kernels must key their own arrays '<region>/<name>'")
    own = {k: a for k, a in weights.items() if k not in consts}
    with open(out / "weights.npz", "wb") as fh:
        np.savez(fh, allow_pickle=False, **own)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1), encoding="utf-8")
    return out


def load_module(directory: str | Path):
    """Read an artifact directory written by save_module."""
    from .module import Module
    src = Path(directory)
    manifest = _read_manifest(src)
    try:
        with np.load(src / "weights.npz", allow_pickle=False) as z:
            weights = {k: z[k] for k in z.files}
    except (OSError, ValueError) as e:
        raise ModelLoadError(f"{src / 'weights.npz'}: not a readable .npz of arrays ({e})") from None
    try:
        t = manifest["target"]
        target = get_target(f"{t['name']}:{t['preset']}" if t.get("preset") else t["name"],
                            _jsonable_config(t["config"]))
        graph = load_graph(src / _plain_name(manifest["graph"]))
        for v in graph.constants():
            weights.setdefault(v.name, v.const)
        by_node = {n.name: n for n in graph.nodes}
        by_value = {v.name: v for v in graph.values()}
        regions, kernels = [], {}
        for e in manifest["regions"]:
            r = Region(e["name"], e["target"], [by_node[n] for n in e["nodes"]],
                       [by_value[v] for v in e["inputs"]], [by_value[v] for v in e["outputs"]],
                       int(e["macs"]))
            regions.append(r)
            if r.target != "cpu":
                if r.target != target.name:
                    raise ModelLoadError(f"region {r.name!r} is for target {r.target!r}, "
                                         f"the module's target is {target.name!r}")
                kdir = src / "kernels" / _plain_name(r.name)
                kernels[r.name] = target.load_kernel(kdir, e["kernel"], weights)
        rep = manifest["report"]
        report = PlacementReport(rep["target"], [NodePlacement(**n) for n in rep["nodes"]],
                                 int(rep["summary"]["regions"]), int(rep["summary"]["bytes_crossing"]))
    except (KeyError, TypeError, ValueError) as e:
        raise ModelLoadError(f"{src}: malformed module manifest ({type(e).__name__}: {e})") from None
    return Module(graph, target, regions, kernels, report)


def _read_manifest(src: Path) -> dict:
    path = src / "manifest.json"
    if not path.is_file():
        raise ModelLoadError(f"{src} is not a retarget module directory (no manifest.json)")
    return read_versioned_json(path, FORMAT, VERSION, f"{FORMAT} manifest")


def _plain_name(name: Any) -> str:
    # Names in a manifest become paths: keep them inside the artifact directory.
    if not isinstance(name, str) or not name or Path(name).name != name or name in (".", ".."):
        raise ModelLoadError(f"manifest names a file {name!r} outside the artifact directory")
    return name


def _jsonable_config(config: dict) -> dict:
    # JSON has no tuples; config fields holding tuples come back as lists.
    return {k: tuple(v) if isinstance(v, list) else v for k, v in config.items()}


__all__ = ["save_module", "load_module", "FORMAT", "VERSION"]
