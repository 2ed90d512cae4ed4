"""One definition per op. Importing this package fills the table `OPS`."""
from .registry import OPS, REQUIRED, OpDef, get_op, register, resolve_attrs
# Each module registers its ops on import.
from . import elementwise, tensor, reduce, nn, norm, linalg, resize, quantized  # noqa: F401,E401
from . import quantized_tflite  # noqa: F401

__all__ = ["OPS", "REQUIRED", "OpDef", "get_op", "register", "resolve_attrs"]
