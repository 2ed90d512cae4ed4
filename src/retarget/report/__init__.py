"""Reports for people: per-layer cycle-model figures (layers.py), the
roofline plot (roofline.py), Perfetto traces (trace.py) and the whole-module report (module.py;
docs/reports.md)."""
