"""`retarget disasm FILE`: a compiled program listed readably (a vta or dnnvm instruction
stream, an nvdla loadable, or any target's whose kernels implement `Kernel.disassemble`).

Which kernel kind a file is comes from --target, else from the kernel directory's kernel.json,
else from the first kernel class that `recognizes` it; the listing itself is the kernel's."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..errors import TargetError
from ..targets.base import Kernel
from ..targets.registry import target_class, target_names
from .compile_options import load_plugins


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "disasm", help="disassemble a vta or dnnvm instruction stream, or an nvdla loadable",
        description="Print a compiled program readably: VTA's or dnnvm's binary instruction "
                    "stream one instruction per line (docs/vta.md, docs/dnnvm-isa.md), an "
                    "nvdla loadable's memory list, address list and hardware layers "
                    "(docs/nvdla.md). Given a compiled kernel (its directory, or its "
                    "program.insn.bin), the target, config and micro-ops come from the files "
                    "saved beside it.")
    p.add_argument("file", help="program file, or a kernel directory of an artifact "
                                "(DIR/kernels/vta_0)")
    p.add_argument("--config", default=None,
                   help="preset or config .json of the program's target; default: the one "
                        "saved beside the program, else the target's default")
    p.add_argument("--target", default=None,
                   help="the program's target when nothing saved beside it says")
    p.add_argument("--uops", default=None, help="micro-op file (raw little-endian uint32); "
                                                "default: the kernel's program.uop.bin")
    p.add_argument("--plugin", action="append", default=[], metavar="FILE.py",
                   help="Python file defining and registering a target (repeatable)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    load_plugins(args.plugin)
    path = Path(args.file)
    kernel = _kernel_class(path, args.target)
    print(kernel.disassemble(path, config=args.config,
                             uops=Path(args.uops) if args.uops else None))
    return 0


def _kernel_kinds() -> dict[str, type[Kernel]]:
    return {kind: k for name in target_names() for kind, k in target_class(name).kernel_kinds.items()}


def _kernel_class(path: Path, target: str | None) -> type[Kernel]:
    if target is not None:
        kinds = list(target_class(target).kernel_kinds.values())
        if len(kinds) != 1:
            raise TargetError(f"target {target!r} has {len(kinds)} kernel kinds; "
                              f"give a kernel directory (its kernel.json names the kind)")
        return kinds[0]
    kinds = _kernel_kinds()
    spec = path / "kernel.json"
    if path.is_dir() and spec.is_file():
        try:
            kind = json.loads(spec.read_text(encoding="utf-8")).get("kind")
        except (json.JSONDecodeError, AttributeError, UnicodeDecodeError):
            kind = None
        if kind in kinds:
            return kinds[kind]
    for k in kinds.values():
        if k.recognizes(path):
            return k
    raise TargetError(f"{path}: not a program any registered target's kernels recognise; "
                      f"give --target ({', '.join(target_names())})")
