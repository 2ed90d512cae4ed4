"""The loop-nest IR and what works on it: ops lowered to loop nests, the
buffering / loop-order / copy-insertion algorithms of swTVM, an interpreter that says what a
nest means, and a C printer. Target-neutral: the `c` and Sunway targets generate code from it.

- ir.py: Affine indices, Tensor / Access, expressions, Store / Copy / Loop, Kernel.
- interp.py: run a Kernel on NumPy arrays (the meaning every transformation preserves).
- verify.py: bounds, bindings, parallel-write and capacity checks; printer.py: readable text.
- schedule.py: split / reorder / parallel / distribute on loop bands.
- buffering.py: swTVM's Algorithms 1-5 (correlation, variable classes, buffer sizing under a
  capacity, loop order by fewest transfers, copy insertion); `buffer_kernel` is the entry.
"""
from .ir import (Access, Affine, Binary, Const, Copy, Expr, Kernel, Load, Loop, Select, Stmt,
                 Store, Tensor, Unary, aff, accesses, loads, walk)
from .interp import run_kernel
from .printer import format_kernel
from .verify import verify_kernel

__all__ = ["Access", "Affine", "Binary", "Const", "Copy", "Expr", "Kernel", "Load", "Loop",
           "Select", "Stmt", "Store", "Tensor", "Unary", "aff", "accesses", "loads", "walk",
           "run_kernel", "format_kernel", "verify_kernel"]
