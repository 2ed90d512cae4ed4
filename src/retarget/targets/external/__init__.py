"""Handing offloaded regions to a compiler outside retarget (the BYOC/NVDLA route): the export
document (export.py) and the external-compiler target kind (compiler.py)."""
from .compiler import CompilerRun, ExternalCompilerTarget, run_compiler
from .export import export_regions, regions_to_json

__all__ = ["CompilerRun", "ExternalCompilerTarget", "export_regions", "regions_to_json",
           "run_compiler"]
