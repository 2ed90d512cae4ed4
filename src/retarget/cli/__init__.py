"""The `retarget` command. Each subcommand lives in its own module in this package, exposing
`register(subparsers)` which adds its parser and sets `func` to a function taking the parsed
arguments and returning an exit code."""
from __future__ import annotations

import argparse
import importlib
import sys

from ..errors import RetargetError

# Subcommand modules, in the order `retarget --help` lists them.
COMMANDS = ["demo", "inspect", "run", "disasm", "compile", "deploy", "report", "explore",
            "targets"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="retarget",
                                     description="Retarget trained networks to new hardware.")
    parser.add_argument("--debug", action="store_true", help="show Python tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"{__name__}.{name}_cmd").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except (RetargetError, FileNotFoundError, OSError) as e:
        if args.debug:
            raise
        print(f"error: {e}", file=sys.stderr)
        return 2   # bad input (as argparse's usage errors): one line, no traceback
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
