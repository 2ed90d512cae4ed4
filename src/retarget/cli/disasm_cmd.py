"""`retarget disasm FILE`: list a binary instruction stream (vta or dnnvm) or an nvdla
loadable readably."""
from __future__ import annotations

import argparse
import json
from pathlib import Path


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "disasm", help="disassemble a vta or dnnvm instruction stream, or an nvdla loadable",
        description="Print a binary instruction stream one instruction per line: VTA's "
                    "(16-byte instructions, docs/vta.md) or dnnvm's (32-byte, "
                    "docs/dnnvm-isa.md). Given a compiled kernel (its directory, or its "
                    "program.insn.bin), the target, config and micro-ops come from the "
                    "program.json (and program.uop.bin) beside it. An nvdla loadable "
                    "(a .loadable file, or an nvdla kernel directory) prints its memory "
                    "list, address list and hardware layers (docs/nvdla.md).")
    p.add_argument("file", help="instruction stream file, or a kernel directory of an artifact "
                                "(DIR/kernels/vta_0)")
    p.add_argument("--config", default=None,
                   help="VTA preset (pynq, ultra96, 1x32, 1x64, 2x16) or config .json; "
                        "default: the kernel's program.json if there is one, else pynq")
    p.add_argument("--target", default=None, choices=("vta", "dnnvm"),
                   help="the stream's target when no program.json says (default: vta)")
    p.add_argument("--uops", default=None, help="micro-op file (raw little-endian uint32); "
                                                "default: the kernel's program.uop.bin")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..targets.vta.config import load_config
    from ..targets.vta.disasm import disassemble_bytes
    from ..targets.vta.isa import layout_for

    path = Path(args.file)
    if path.is_dir() and (path / "program.loadable").exists():
        path = path / "program.loadable"
    if path.suffix == ".loadable" or _is_loadable(path):
        return _nvdla(path)
    if path.is_dir():                         # an artifact's kernel directory
        path = path / "program.insn.bin"
    # Program.save(prefix) writes prefix.insn.bin beside prefix.json and prefix.uop.bin
    prefix = str(path)[:-len(".insn.bin")] if path.name.endswith(".insn.bin") else None
    meta = Path(prefix + ".json") if prefix and Path(prefix + ".json").exists() else None
    if (args.target or _saved_target(meta)) == "dnnvm":
        return _dnnvm(path, meta, args)
    saved_uops = Path(prefix + ".uop.bin") if meta else None
    uops = args.uops or (saved_uops if saved_uops and saved_uops.exists() else None)
    if args.config is None and meta is not None:
        cfg, source = _artifact_config(meta), f"from {meta.name}"
    else:
        cfg, source = load_config(args.config), "given" if args.config else "default"
    with open(path, "rb") as fh:
        data = fh.read()
    uop_data = None
    if uops:
        with open(uops, "rb") as fh:
            uop_data = fh.read()
    header = (f"{path}: {len(data) // 16} instructions, config {cfg.name} "
              f"({cfg.target_name}, {source})")
    print(disassemble_bytes(data, layout_for(cfg), uop_data, header))
    return 0


def _is_loadable(path: Path) -> bool:
    from ..targets.nvdla.loadable import MAGIC
    try:
        with open(path, "rb") as fh:
            return fh.read(len(MAGIC)) == MAGIC
    except OSError:
        return False


def _nvdla(path: Path) -> int:
    from ..errors import ModelLoadError
    from ..targets.nvdla.disasm import disassemble
    from ..targets.nvdla.loadable import Loadable, LoadableError
    try:
        ld = Loadable.from_bytes(path.read_bytes())
    except LoadableError as e:
        raise ModelLoadError(f"{path}: {e}") from None
    print(disassemble(ld, f"{path}: nvdla loadable, {len(ld.layers)} hardware layers"))
    return 0


def _saved_target(meta: Path | None) -> str | None:
    """The target a saved program.json names (dnnvm programs say so; vta's predate it)."""
    if meta is None:
        return None
    try:
        with open(meta, encoding="utf-8") as fh:
            return json.load(fh).get("target")
    except (json.JSONDecodeError, AttributeError):
        return None


def _dnnvm(path: Path, meta: Path | None, args: argparse.Namespace) -> int:
    from ..errors import TargetError
    from ..targets.dnnvm.config import DNNVMConfig, load_config
    from ..targets.dnnvm.disasm import disassemble_bytes
    from ..targets.dnnvm.isa import INSN_BYTES
    if args.config is None and meta is not None:
        try:
            with open(meta, encoding="utf-8") as fh:
                cfg = DNNVMConfig.from_dict(json.load(fh)["config"])
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise TargetError(f"{meta}: no readable 'config' ({e}); give --config") from None
        source = f"from {meta.name}"
    else:
        cfg, source = load_config(args.config), "given" if args.config else "default"
    with open(path, "rb") as fh:
        data = fh.read()
    print(f"{path}: {len(data) // INSN_BYTES} instructions, dnnvm config {cfg.name} "
          f"({cfg.target_name}, {source})")
    print(disassemble_bytes(data))
    return 0


def _artifact_config(program_json: Path):
    """The VTAConfig recorded in a saved Program's JSON (an artifact's program.json)."""
    from ..errors import TargetError
    from ..targets.vta.config import VTAConfig
    try:
        with open(program_json, encoding="utf-8") as fh:
            fields = json.load(fh)["config"]
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise TargetError(f"{program_json}: no readable 'config' ({e}); give --config") from None
    return VTAConfig.from_dict(fields)
