"""`retarget deploy ARTIFACT_DIR -o DIR`: write a compiled module (target vta, compiled with
`--host c`) as a standalone C project; `make -C DIR` builds `DIR/model`, which runs the
network without Python (retarget/deploy/, docs/deploy.md)."""
from __future__ import annotations

import argparse

from .compile_cmd import add_verify_option


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "deploy", help="write a compiled module as a standalone C program (vta, --host c)",
        description="Write the C project of a module artifact compiled for vta with --host c: "
                    "host regions' C, VTA instruction streams and DRAM images, a static memory "
                    "plan, main.c (.npy in and out) and a Makefile. `make -C DIR` builds "
                    "DIR/model; `DIR/model --input x.npy --output y.npy` runs it.")
    p.add_argument("artifact", help="a compiled module directory (retarget compile -o)")
    p.add_argument("-o", "--output", required=True, metavar="DIR",
                   help="where to write the project")
    add_verify_option(p)
    p.set_defaults(func=run_deploy)


def run_deploy(args: argparse.Namespace) -> int:
    from ..deploy import deploy
    from ..runtime.module import Module
    module = Module.load(args.artifact, verify=not args.no_verify)
    out = deploy(module, args.output)
    print(f"wrote {out}: `make -C {out}` builds {out}/model; run it as "
          f"`{out}/model " + " ".join(f"--input {v.name}.npy" for v in module.graph.inputs)
          + " " + " ".join(f"--output {v.name}.npy" for v in module.graph.outputs) + "`")
    return 0
