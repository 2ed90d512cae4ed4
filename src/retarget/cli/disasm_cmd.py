"""`retarget disasm FILE`: list a binary VTA instruction stream readably."""
from __future__ import annotations

import argparse
import json
from pathlib import Path


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "disasm", help="disassemble a VTA instruction stream",
        description="Print a binary VTA instruction stream (raw 16-byte little-endian "
                    "instructions, see docs/vta.md) one instruction per line. Given a "
                    "compiled kernel (its directory, or its program.insn.bin), the config and "
                    "micro-ops come from the program.json and program.uop.bin beside it.")
    p.add_argument("file", help="instruction stream file, or a kernel directory of an artifact "
                                "(DIR/kernels/vta_0)")
    p.add_argument("--config", default=None,
                   help="VTA preset (pynq, ultra96, 1x32, 1x64, 2x16) or config .json; "
                        "default: the kernel's program.json if there is one, else pynq")
    p.add_argument("--uops", default=None, help="micro-op file (raw little-endian uint32); "
                                                "default: the kernel's program.uop.bin")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..targets.vta.config import load_config
    from ..targets.vta.disasm import disassemble_bytes
    from ..targets.vta.isa import layout_for

    path = Path(args.file)
    if path.is_dir():                         # an artifact's kernel directory
        path = path / "program.insn.bin"
    # Program.save(prefix) writes prefix.insn.bin beside prefix.json and prefix.uop.bin
    prefix = str(path)[:-len(".insn.bin")] if path.name.endswith(".insn.bin") else None
    meta = Path(prefix + ".json") if prefix and Path(prefix + ".json").exists() else None
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
