"""The options `compile`, `run --target` and `report` share (target, config overrides, plugins,
placement, calibration, fusion) and compiling a model from them."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from ..compiler import compile
from ..errors import InputError, TargetError
from ..runtime.module import Module
from ..targets.registry import load_plugin
from .arrays import load_array_file
from .inspect_cmd import load_model


def add_target_options(p: argparse.ArgumentParser, *, target_required: bool) -> None:
    """--target, --config KEY=VALUE, --plugin FILE: shared by compile and the compiled run."""
    p.add_argument("--target", "-t", required=target_required, default=None,
                   help="target name, name:preset, or a .toml/.json config file "
                        "(see `retarget targets`); several devices comma-separated, "
                        "e.g. vta,dnnvm (each node on the first that accepts it, cpu last)")
    p.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                   help="override a target config field (repeatable)")
    p.add_argument("--plugin", action="append", default=[], metavar="FILE.py",
                   help="Python file defining and registering a target (repeatable)")


def add_verify_option(p: argparse.ArgumentParser) -> None:
    """--no-verify: load a module artifact without comparing its files' SHA-256 sums."""
    p.add_argument("--no-verify", action="store_true",
                   help="load a compiled module without checking its files' SHA-256 sums "
                        "(sizes, file kinds and structure are still checked)")


def add_compile_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cpu-node", action="append", default=[], metavar="NAME",
                   help="force node(s) onto the CPU; glob patterns allowed (repeatable)")
    p.add_argument("--pin", action="append", default=[], metavar="PATTERN=DEVICE",
                   help="run the nodes PATTERN (a name or glob) matches on DEVICE (cpu or one "
                        "of the --target devices), as tf.device does; refused with the reason "
                        "if DEVICE cannot run one of them (repeatable)")
    p.add_argument("--placement", default="first", choices=("first", "cheapest"),
                   help="with several devices: the first that accepts a node (default), or "
                        "the one whose cost model prices it lowest")
    p.add_argument("--min-region-macs", type=int, default=None, metavar="N",
                   help="offload only regions of at least N MACs (default: the target's rule)")
    p.add_argument("--calibration", default=None, metavar="FILE.npz",
                   help="calibration inputs for targets that quantise (vta, dnnvm): arrays by input "
                        "name, batches along axis 0 (default: random data, with a warning)")
    p.add_argument("--host", default=None, metavar="reference|c[:PRESET]",
                   help="what runs the CPU regions: the NumPy reference (default) or generated "
                        "C (c, c:portable, ...; docs/deploy.md)")
    p.add_argument("--fusion", default=None, choices=("none", "greedy", "optimized"),
                   help="group layers into units lowered as one (docs/fusion.md); default: "
                        "optimized for targets that declare fusion templates (dnnvm), else none")


def load_plugins(paths: list[str]) -> None:
    for path in paths:
        load_plugin(path)


def parse_overrides(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise TargetError(f"--config {item!r}: expected KEY=VALUE")
        out[key.strip()] = value.strip()
    return out


def compile_from_args(args: argparse.Namespace):
    load_plugins(args.plugin)
    model = args.model
    if getattr(args, "input_shape", None):   # bind shapes before compiling, as `run` does
        model = load_model(args.model, args.input_shape)
    return compile(model, args.target or "cpu", cpu_nodes=args.cpu_node,
                   min_region_macs=args.min_region_macs, config=parse_overrides(args.config),
                   calibration=read_calibration(getattr(args, "calibration", None)),
                   fusion=getattr(args, "fusion", None), pins=parse_pins(getattr(args, "pin", [])),
                   placement=getattr(args, "placement", "first"), host=getattr(args, "host", None))


def parse_pins(items: list[str]) -> dict[str, str]:
    """--pin PATTERN=DEVICE items as compile()'s pins (the last '=' splits, so a pattern may
    hold one)."""
    out = {}
    for item in items:
        pattern, sep, device = item.rpartition("=")
        if not sep or not pattern or not device.strip():
            raise TargetError(f"--pin {item!r}: expected PATTERN=DEVICE, e.g. '/layer1*=dnnvm'")
        out[pattern.strip()] = device.strip()
    return out


def read_calibration(path: str | None):
    """--calibration FILE.npz -> a dict input name -> array (split into batches by the
    quantiser), or None. A single unnamed array (.npy) is passed as it is."""
    if path is None:
        return None
    data = load_array_file(path, f"--calibration {path}")
    if isinstance(data, np.ndarray):
        return data
    arrays = data
    if not arrays:
        raise InputError(f"--calibration {path}: holds no arrays")
    return _split_batches(arrays)


def _split_batches(arrays: dict):
    # One array per input, each a stack of samples: the quantiser takes a bare array for a
    # single-input graph; for several inputs, keep the dict (one batch).
    if len(arrays) == 1:
        return next(iter(arrays.values()))
    return arrays


def load_artifact(path: Path, args: argparse.Namespace):
    """The module artifact at `path`: `--config` sets the target's host fields (compiler,
    flags, build directory, device memory), which an artifact never does; what loading
    ignored from the artifact is printed as notes on stderr."""
    module = Module.load(path, verify=not getattr(args, "no_verify", False),
                         config=parse_overrides(getattr(args, "config", None) or []))
    for note in module.notes:
        print(f"retarget: note: {note}", file=sys.stderr)
    return module
