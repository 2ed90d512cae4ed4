"""Deploying a compiled module as a standalone C program (docs/deploy.md): project.py writes
the project, vta.py a VTA region's image, stream and tables, blob.py the constants' blob,
rt_deploy.[ch] the program's hand-written runtime, program.py builds and runs it."""
from .program import build_program, run_program
from .project import DEPLOYED_TARGETS, deploy, deployable

__all__ = ["DEPLOYED_TARGETS", "build_program", "deploy", "deployable", "run_program"]
