"""One definition per op. Importing this package fills the table `OPS`."""
from .registry import OPS, REQUIRED, OpDef, get_op, register, resolve_attrs
from . import elementwise  # noqa: F401  (registers ops)

__all__ = ["OPS", "REQUIRED", "OpDef", "get_op", "register", "resolve_attrs"]
