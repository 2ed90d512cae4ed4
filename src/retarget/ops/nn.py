"""nn ops (see registry.py for the conventions)."""
from __future__ import annotations
