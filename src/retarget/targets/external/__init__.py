"""Handing offloaded regions to a compiler outside retarget (the BYOC/NVDLA route)."""
from .export import export_regions, regions_to_json

__all__ = ["export_regions", "regions_to_json"]
