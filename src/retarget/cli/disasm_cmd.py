"""`retarget disasm FILE`: list a binary VTA instruction stream readably."""
from __future__ import annotations

import argparse


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "disasm", help="disassemble a VTA instruction stream",
        description="Print a binary VTA instruction stream (raw 16-byte little-endian "
                    "instructions, see docs/vta.md) one instruction per line.")
    p.add_argument("file", help="instruction stream file")
    p.add_argument("--config", default=None,
                   help="VTA preset (pynq, ultra96, 1x32, 1x64, 2x16) or config .json; "
                        "default pynq")
    p.add_argument("--uops", default=None, help="micro-op file (raw little-endian uint32)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..targets.vta.config import load_config
    from ..targets.vta.disasm import disassemble_bytes
    from ..targets.vta.isa import layout_for

    cfg = load_config(args.config)
    with open(args.file, "rb") as fh:
        data = fh.read()
    uop_data = None
    if args.uops:
        with open(args.uops, "rb") as fh:
            uop_data = fh.read()
    header = (f"{args.file}: {len(data) // 16} instructions, config {cfg.name} "
              f"({cfg.target_name})")
    print(disassemble_bytes(data, layout_for(cfg), uop_data, header))
    return 0
