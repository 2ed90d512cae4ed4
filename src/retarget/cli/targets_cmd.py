"""`retarget targets`: list the registered targets with their presets and default configs."""
from __future__ import annotations

import argparse
import json
from ..targets.registry import describe_targets
from .compile_options import load_plugins


def register(subparsers) -> None:
    p = subparsers.add_parser("targets", help="list the targets and their configs",
                              description="List every registered target, its presets and its "
                                          "default config fields.")
    p.add_argument("--plugin", action="append", default=[], metavar="FILE.py",
                   help="Python file defining and registering a target (repeatable)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    load_plugins(args.plugin)
    targets = describe_targets()
    if args.json:
        print(json.dumps(targets, indent=1))
        return 0
    for t in targets:
        presets = ", ".join(t["presets"]) or "none"
        print(f"{t['name']}: {t['description']}")
        print(f"  presets: {presets}")
        for k, v in t["config"].items():
            print(f"  {k} = {v!r}")
    return 0
