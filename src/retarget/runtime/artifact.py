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

Integrity (docs/guarantees.md): the manifest lists every other file of the artifact with its
size and SHA-256. Before anything is built from an artifact, `load_module` checks that each
listed file is a regular file inside the directory (no symlink, FIFO or device node, no path
leaving it) of exactly the recorded size, and, unless `verify=False`, that its SHA-256 matches;
every read is then bounded by the recorded size. Files not listed are never read. The manifest
itself is checked field by field, the graph is verified as an import is, and the regions must
form a valid schedule of the graph; each failure is a ModelLoadError naming the file and field.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ..errors import ModelLoadError, RetargetError, TargetError
from ..ir.serialize import ARRAY_FILE_ERRORS, load_graph, read_versioned_json, save_graph
from ..ir.verify import verify as verify_graph
from ..passes.partition import FusedGroup, NodePlacement, PlacementReport
from ..targets.base import Region, Target
from ..targets.registry import target_class, target_names

FORMAT = "retarget-module"
VERSION = 2        # 2: the manifest lists every file with its size and SHA-256
GRAPH_FILE = "graph.json"
MANIFEST = "manifest.json"
MAX_MANIFEST_BYTES = 64 << 20
_SHA256 = re.compile(r"[0-9a-f]{64}")
_CHUNK = 1 << 20


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
                "target": {"name": t.name, "preset": t.preset_name, "config": t.program_config()},
                "graph": GRAPH_FILE, "regions": regions, "report": module.report.to_dict()}
    if len(module.targets) > 1:   # several devices: each one's target as "target" records it
        manifest["devices"] = [{"name": d.name, "preset": d.preset_name,
                                "config": d.config_dict()} for d in module.targets.values()]
    for name, a in consts.items():
        if weights[name] is not a:
            raise RetargetError(f"a kernel replaced graph constant {name!r} in the weight store; "
                                f"kernels must key their own arrays '<region>/<name>'")
    own = {k: a for k, a in weights.items() if k not in consts}
    with open(out / "weights.npz", "wb") as fh:
        np.savez(fh, allow_pickle=False, **own)
    _write_manifest(out, manifest)
    return out


def reseal(directory: str | Path) -> None:
    """Record the artifact's files as they are now (sizes and SHA-256) in its manifest: for
    someone who edits an artifact on purpose and takes responsibility for what it holds."""
    src = Path(directory)
    _write_manifest(src, _read_manifest(src))


def _write_manifest(out: Path, manifest: dict) -> None:
    manifest["files"] = {rel: {"size": path.stat().st_size, "sha256": _sha256(path)}
                         for rel, path in _artifact_files(out)}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1), encoding="utf-8")


def _artifact_files(root: Path) -> list[tuple[str, Path]]:
    """Every file below `root` except the manifest, as (relative POSIX path, path), sorted."""
    found = []
    for dirpath, _, names in os.walk(root):
        for name in names:
            path = Path(dirpath) / name
            rel = path.relative_to(root).as_posix()
            if rel != MANIFEST:
                found.append((rel, path))
    return sorted(found)


def _sha256(path: Path, limit: int | None = None) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK if limit is None else min(_CHUNK, limit + 1)):
            h.update(chunk)
            if limit is not None:
                limit -= len(chunk)
                if limit < 0:
                    break
    return h.hexdigest()


def load_module(directory: str | Path, verify: bool = True,
                config: Mapping[str, Any] | None = None):
    """Read an artifact directory written by save_module. `verify=False` skips the SHA-256
    comparison (sizes, file kinds and every structural check still run). `config`: the
    target's host fields (its `host_fields`: compiler, flags, build directory, device memory)
    for this machine; the artifact's own values for them are ignored (module.notes says
    which)."""
    from .module import Module
    src = Path(directory)
    manifest = _read_manifest(src)
    _check_manifest(src, manifest)
    _check_files(src, manifest["files"], verify)
    try:
        with np.load(src / "weights.npz", allow_pickle=False) as z:
            weights = {k: z[k] for k in z.files}
    except ARRAY_FILE_ERRORS as e:
        raise ModelLoadError(f"{src / 'weights.npz'}: not a readable .npz of arrays ({e})") from None
    t = manifest["target"]
    target, notes = _target(src, t["name"], t.get("preset"), t["config"], config or {})
    targets = {target.name: target}
    for d in _devices(src, manifest)[1:]:   # a module compiled for several devices
        host = {k: v for k, v in (config or {}).items()
                if k in target_class(d["name"]).host_fields}
        targets[d["name"]], more = _target(src, d["name"], d.get("preset"), d["config"], host)
        notes += more
    graph = load_graph(src / _plain_name(manifest["graph"]), allowed_arrays=manifest["files"])
    try:
        verify_graph(graph)
    except RetargetError as e:
        raise ModelLoadError(f"{src / manifest['graph']}: {e}") from None
    for v in graph.constants():
        weights.setdefault(v.name, v.const)
    regions = _build_regions(src, graph, manifest["regions"])
    kernels = {}
    for e, r in zip(manifest["regions"], regions):
        if r.target == "cpu":
            continue
        if r.target not in targets:
            raise ModelLoadError(f"{src / MANIFEST}: region {r.name!r} is for target "
                                 f"{r.target!r}, the module's targets are {sorted(targets)}")
        if not isinstance(e.get("kernel"), dict):
            raise ModelLoadError(f"{src / MANIFEST}: region {r.name!r} has no kernel spec")
        kdir = src / "kernels" / _plain_name(r.name)
        if not any(rel.startswith(f"kernels/{r.name}/") for rel in manifest["files"]):
            raise ModelLoadError(f"{src / MANIFEST}: region {r.name!r} has no kernel files "
                                 f"(kernels/{r.name}/ is not in the artifact)")
        try:
            kernels[r.name] = targets[r.target].load_kernel(kdir, e["kernel"], weights)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError,
                RecursionError, OSError) as err:
            # Everything in an artifact is input: a kernel loader that trips over a damaged
            # field must still end in one clear error, not a traceback.
            raise ModelLoadError(f"kernel of region {r.name!r} in {kdir}: malformed "
                                 f"({type(err).__name__}: {err})") from None
    try:
        rep = manifest["report"]
        fused = [FusedGroup(str(g["region"]), str(g["template"]),
                            tuple(str(m) for m in g["members"]), int(g["cycles"]),
                            int(g["alone_cycles"])) for g in rep.get("fused", [])]
        report = PlacementReport(rep["target"], [NodePlacement(**n) for n in rep["nodes"]],
                                 int(rep["summary"]["regions"]), int(rep["summary"]["bytes_crossing"]),
                                 str(rep.get("fusion", "none")), fused,
                                 int(rep.get("bytes_between_devices", 0)),
                                 str(rep.get("choice", "first")))
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise ModelLoadError(f"{src / MANIFEST}: malformed placement report "
                             f"({type(e).__name__}: {e})") from None
    return Module(graph, target, regions, kernels, report, targets=targets, notes=notes)


def _target(src: Path, name: str, preset: str | None, recorded: dict,
            host: Mapping[str, Any]) -> tuple[Target, list[str]]:
    """The artifact's target: its preset and recorded program fields, with the host fields
    (`Target.host_fields`) from the target's defaults, the environment and `host` (the
    caller's options) — never from the artifact. Returns it with a note per recorded host
    field that differs from what is used."""
    cls = target_class(name)
    fixed = sorted(set(host) - set(cls.host_fields))
    if fixed:
        raise TargetError(f"target {name!r}: config field(s) {fixed} of a compiled module are "
                          f"fixed by its program (recompile to change them); a loaded module "
                          f"takes only {sorted(cls.host_fields) or 'no fields'}")
    if preset is not None and preset not in cls.presets:
        raise ModelLoadError(f"{src / MANIFEST}: target {name!r} has no preset {preset!r}")
    target = cls(preset=preset)    # the preset's host fields, then the environment's
    try:
        target = target.with_overrides(
            {k: v for k, v in _jsonable_config(recorded).items() if k not in cls.host_fields})
    except RetargetError as e:
        raise ModelLoadError(f"{src / MANIFEST}: target {name!r}: {e}") from None
    target = target.with_overrides(dict(host))
    notes = []
    for k in sorted(set(recorded) & set(cls.host_fields)):
        used = getattr(target.config, k)
        if recorded[k] != used:
            var = cls.host_fields[k]
            notes.append(f"{src / MANIFEST}: ignored target config {k}={recorded[k]!r}: an "
                         f"artifact never chooses what runs on the loading machine; using "
                         f"{k}={used!r} (from the target's default"
                         f"{', ' + var if var else ''} or --config {k}=...)")
    return target, notes


def _devices(src: Path, m: dict) -> list[dict]:
    """The optional "devices" list of a module compiled for several targets, each entry
    checked as "target" is; the first must be the module's target."""
    devices = m.get("devices", [])
    if not isinstance(devices, list) or (devices and devices[0] != m["target"]):
        raise _fail(src, "'devices' must list every target of the module, the first being "
                         "'target'")
    for d in devices:   # each entry as _check_manifest checks "target"
        _check_manifest(src, {**m, "target": d})
    return devices


def _read_manifest(src: Path) -> dict:
    path = src / MANIFEST
    if not src.is_dir() or not os.path.lexists(path):
        raise ModelLoadError(f"{src} is not a retarget module directory (no {MANIFEST})")
    _check_regular(path, MAX_MANIFEST_BYTES, None)
    return read_versioned_json(path, FORMAT, VERSION, f"{FORMAT} manifest")


def _fail(src: Path, what: str) -> ModelLoadError:
    return ModelLoadError(f"{src / MANIFEST}: {what}")


def _check_manifest(src: Path, m: dict) -> None:
    """The manifest's fields have the types load_module relies on (the content of regions and
    kernels is checked where it is used)."""
    t = m.get("target")
    if not isinstance(t, dict):
        raise _fail(src, f"'target' must be an object, got {type(t).__name__}")
    name = t.get("name")
    if not isinstance(name, str) or name not in target_names():
        raise _fail(src, f"target name {name!r} is not a registered target (known: "
                         f"{', '.join(target_names())}); an artifact names its target, never a "
                         f"config file")
    if t.get("preset") is not None and not isinstance(t.get("preset"), str):
        raise _fail(src, f"target preset must be a string or null, got {t.get('preset')!r}")
    if not isinstance(t.get("config"), dict):
        raise _fail(src, f"target config must be an object of fields, got "
                         f"{type(t.get('config')).__name__}")
    _plain_name(m.get("graph"))
    if not isinstance(m.get("regions"), list) or not all(isinstance(r, dict) for r in m["regions"]):
        raise _fail(src, "'regions' must be a list of objects")
    if not isinstance(m.get("report"), dict):
        raise _fail(src, "'report' must be an object")
    files = m.get("files")
    if not isinstance(files, dict):
        raise _fail(src, "'files' must map each file of the artifact to its size and sha256")
    for rel, entry in files.items():
        if not (isinstance(entry, dict) and isinstance(entry.get("size"), int)
                and not isinstance(entry.get("size"), bool) and entry["size"] >= 0
                and isinstance(entry.get("sha256"), str) and _SHA256.fullmatch(entry["sha256"])):
            raise _fail(src, f"files[{rel!r}] must be {{\"size\": bytes, \"sha256\": hex}}, "
                             f"got {entry!r}")
    for needed in ("weights.npz", m["graph"]):
        if needed not in files:
            raise _fail(src, f"'files' does not list {needed!r}")


def _check_files(src: Path, files: dict, verify: bool) -> None:
    root = src.resolve()
    for rel, entry in files.items():
        path = _inside(src, rel)
        _check_regular(path, entry["size"], rel)
        if not path.resolve().is_relative_to(root):   # a symlinked directory on the way
            raise ModelLoadError(f"{path}: resolves outside the artifact directory {src}")
        if verify and _sha256(path, entry["size"]) != entry["sha256"]:
            raise ModelLoadError(f"{path}: contents do not match the SHA-256 recorded in the "
                                 f"manifest (the file was modified or damaged; recompile, or "
                                 f"load with --no-verify to skip this check)")


def _inside(src: Path, rel: Any) -> Path:
    """`src / rel`, refusing a path that leaves the artifact directory."""
    parts = rel.split("/") if isinstance(rel, str) else None
    if not parts or rel.startswith("/") or any(p in ("", ".", "..") for p in parts) \
            or "\\" in rel or rel == MANIFEST:
        raise ModelLoadError(f"{src / MANIFEST}: file path {rel!r} escapes the artifact "
                             f"directory (only plain relative paths inside it are allowed)")
    return src.joinpath(*parts)


def _check_regular(path: Path, size: int, rel: str | None) -> None:
    """A regular file (not a symlink, FIFO or device) of exactly `size` bytes (at most `size`
    for the manifest itself, rel None)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise ModelLoadError(f"{path}: missing (the manifest lists it)") from None
    if stat.S_ISLNK(st.st_mode):
        raise ModelLoadError(f"{path}: is a symbolic link; an artifact holds only regular files")
    if not stat.S_ISREG(st.st_mode):
        raise ModelLoadError(f"{path}: is not a regular file (a FIFO, device or directory); "
                             f"an artifact holds only regular files")
    if rel is None:
        if st.st_size > size:
            raise ModelLoadError(f"{path}: {st.st_size} bytes, more than a manifest may be "
                                 f"({size})")
    elif st.st_size != size:
        raise ModelLoadError(f"{path}: {st.st_size} bytes, the manifest records {size} "
                             f"(truncated, extended or replaced)")


def _build_regions(src: Path, graph, entries: list[dict]) -> list[Region]:
    """The manifest's regions, checked to be a schedule of `graph`: every node in exactly one
    region, each region's inputs available (graph inputs, constants or earlier regions'
    outputs) when it runs, its outputs produced by its own nodes."""
    by_node = {n.name: n for n in graph.nodes}
    by_value = {v.name: v for v in graph.values()}
    constants = {id(v) for v in graph.constants()}
    available = {id(v) for v in graph.inputs} | constants
    placed: set[str] = set()
    regions = []
    for i, e in enumerate(entries):
        try:
            name, target = e["name"], e["target"]
            if not (isinstance(name, str) and isinstance(target, str)):
                raise TypeError("name and target must be strings")
            nodes = [by_node[n] for n in e["nodes"]]
            inputs = [by_value[v] for v in e["inputs"]]
            outputs = [by_value[v] for v in e["outputs"]]
            macs = int(e["macs"])
        except (KeyError, TypeError, ValueError) as err:
            raise _fail(src, f"region #{i} is malformed ({type(err).__name__}: {err})") from None
        label = f"region #{i} {name!r}"
        missing = [v.name for v in inputs if id(v) not in available]
        if missing:
            raise _fail(src, f"{label} reads {missing} before any earlier region produces them "
                             f"(regions out of order?)")
        # what the region's nodes may read: constants, its declared inputs (the executor copies
        # exactly those to where the region runs), and what its earlier nodes produce
        inside = constants | {id(v) for v in inputs}
        for node in nodes:
            if node.name in placed:
                raise _fail(src, f"{label}: node {node.name!r} is in two regions")
            placed.add(node.name)
            absent = [v.name for v in node.inputs if v is not None and id(v) not in inside]
            if absent:
                raise _fail(src, f"{label}: node {node.name!r} reads {absent}, which neither the "
                                 f"region's inputs nor its earlier nodes provide")
            inside.update(id(v) for v in node.outputs)
        stray = [v.name for v in outputs if id(v) not in inside]
        if stray:
            raise _fail(src, f"{label}: outputs {stray} are not produced by the region")
        available.update(id(v) for v in outputs)
        regions.append(Region(name, target, nodes, inputs, outputs, macs))
    unplaced = [n.name for n in graph.nodes if n.name not in placed]
    if unplaced:
        raise _fail(src, f"nodes {unplaced[:5]}{'...' if len(unplaced) > 5 else ''} are in no region")
    if any(id(v) not in available for v in graph.outputs):
        raise _fail(src, "the regions do not produce every graph output")
    return regions


def _plain_name(name: Any) -> str:
    # Names in a manifest become paths: keep them inside the artifact directory.
    if not isinstance(name, str) or not name or Path(name).name != name or name in (".", ".."):
        raise ModelLoadError(f"manifest names a file {name!r} that escapes the artifact "
                             f"directory (only plain file names are allowed)")
    return name


def _jsonable_config(config: dict) -> dict:
    # JSON has no tuples; config fields holding tuples come back as lists.
    return {k: tuple(v) if isinstance(v, list) else v for k, v in config.items()}


__all__ = ["save_module", "load_module", "reseal", "FORMAT", "VERSION"]
