"""A readable text form of a Kernel, for error messages, `--dump` and tests:

    kernel gemm(A: float32[4, 8], B: float32[8, 5]) -> (C: float32[4, 5])
      parallel for i in 0..4:
        for j in 0..5:
          C[i, j] = 0
          for k in 0..8:
            C[i, j] += (A[i, k] * B[k, j])
"""
from __future__ import annotations

from .ir import Kernel, Loop, Tensor


def _decl(t: Tensor) -> str:
    return f"{t.name}: {t.dtype}[{', '.join(map(str, t.shape))}]"


def _lines(stmts, depth: int, out: list[str]) -> None:
    pad = "  " * depth
    for s in stmts:
        if isinstance(s, Loop):
            kind = "parallel for" if s.kind == "parallel" else "for"
            out.append(f"{pad}{kind} {s.var} in 0..{s.extent}:")
            _lines(s.body, depth + 1, out)
        else:
            out.append(f"{pad}{s}")


def format_kernel(k: Kernel) -> str:
    out = [f"kernel {k.name}({', '.join(map(_decl, k.inputs))}) -> "
           f"({', '.join(map(_decl, k.outputs))})"]
    out += [f"  local {_decl(t)}" for t in k.locals]
    _lines(k.body, 1, out)
    return "\n".join(out)
