"""Print a loop-nest Kernel as one C99 function: what the `c` target compiles, and
what the `sunway` target's CPE printer (targets/sunway/emit.py) builds on.

    void gemm(const float *restrict in0, const float *restrict in1, float *restrict out0)

Parameters follow `Kernel.params` (inputs, then outputs), named `in<i>` / `out<j>` whatever
the tensors are called (network value names are long and not C identifiers; a comment on
each parameter gives the tensor's name and type). The element type follows the tensor's dtype
(`float`, `double`, `int8_t`, `int32_t`, `int64_t`); every parameter is `restrict`: the
caller guarantees that what a kernel writes overlaps nothing else it is given.

What each IR construct becomes, and why:

- Indexing is flat and row-major (`Access.flat()`), terms ordered by stride, so the innermost
  loop variable with stride 1 comes last and the vectoriser sees a unit-stride access. Loop
  variables are `int`; where a flat offset could exceed INT_MAX (a tensor of more than 2^31
  elements) its terms are computed in `ptrdiff_t`.
- `Load(access, fill)`: `(cond ? x[i] : fill)` where `cond` tests only the dimensions that can
  leave the tensor, found with `Affine.bounds` over the enclosing loop extents (a convolution's
  zero padding tests the spatial dims, never the channel); a load that can never be in range
  is just `fill`.
- `Store` reductions: `+=`, and `max` / `min` through `rt_max*` / `rt_min*`, which mirror the
  IR's definition (Python's `max(a, b)`: `b` where `b > a`, else `a`) and compile to
  maxps/minps.
- Unary functions map to <math.h> (`expf`, `sqrtf`, `erff`, `tanhf`, `rintf` for round-half-
  even...); sigmoid, rsqrt and recip are inline expressions.
- `Copy`: loops over the box with one `memcpy` per contiguous run (the innermost dimension,
  merged with outer ones the box covers whole in both tensors).
- A `parallel` loop gets `#pragma omp parallel for`, guarded by `#ifdef _OPENMP` so the code
  also compiles without -fopenmp; only the outermost parallel loop of a nest gets it (a
  parallel loop inside one is printed serial).
- Local buffers are automatic arrays aligned to 64 bytes. The decision: a local used inside a
  parallel loop is declared at the top of that (outermost parallel) loop's body, so each
  thread has its own copy; its contents do not outlive the loop. A local used outside every
  parallel loop is declared at the top of the function. A local used in two of these places
  (two parallel loops, or one and the code outside) cannot carry data from one to the other
  and is refused. Automatic rather than `static`
  keeps the function reentrant (two threads may run the same model with different arenas);
  the buffering pass sizes locals to a cache level, far below a thread's stack, and
  `MAX_LOCAL_BYTES` is the bound the `c` target enforces.
- Output tensors the kernel reads (a reduction, a load) before plain stores have covered them
  start at zero, as `run_kernel` gives them: the function begins with a `memset`. The usual
  "init store, then accumulate" nest needs none; the check is per output and conservative
  (it recognises writes whose indices cover disjoint boxes of the tensor).

No function allocates: what a kernel needs is its parameters and its locals.
"""
from __future__ import annotations

import math
import re
from typing import Iterable, Mapping, Sequence

from ..errors import GraphError
from .ir import (Access, Affine, Binary, Const, Copy, Kernel, Load, Loop, Select, Store, Tensor,
                 Unary, accesses, loads, walk)

C_TYPES: Mapping[str, str] = {"float32": "float", "float64": "double", "int8": "int8_t",
                              "int32": "int32_t", "int64": "int64_t"}

# The largest total of local buffers one kernel may declare (automatic arrays live on a
# thread's stack; OpenMP worker threads commonly get 2-8 MiB).
MAX_LOCAL_BYTES = 1 << 20

INT_MAX = 2 ** 31 - 1

PRELUDE = """\
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* 64-byte alignment of local buffers (a cache line; an AVX-512 vector). */
#if defined(__GNUC__) || defined(__clang__)
#define RT_ALIGN64 __attribute__((aligned(64)))
#else
#define RT_ALIGN64
#endif

/* max / min as the loop-nest IR defines them (Python's max(a, b) / min(a, b)): b only where
   it is strictly larger / smaller. Written as a comparison so compilers vectorise it. */
static inline float rt_maxf(float a, float b) { return b > a ? b : a; }
static inline float rt_minf(float a, float b) { return b < a ? b : a; }
static inline double rt_max(double a, double b) { return b > a ? b : a; }
static inline double rt_min(double a, double b) { return b < a ? b : a; }
"""

_C_KEYWORDS = frozenset("""auto break case char const continue default do double else enum
extern float for goto if inline int long register restrict return short signed sizeof static
struct switch typedef union unsigned void volatile while _Bool _Complex _Imaginary""".split())
# Names the generated code refers to: a loop variable must not shadow them.
_RESERVED = _C_KEYWORDS | frozenset("""memcpy memset memmove size_t ptrdiff_t int8_t int32_t
int64_t INFINITY NAN RT_ALIGN64 rt_maxf rt_minf rt_max rt_min main""".split())

# float function, double function; "{x}" is the operand
_UNARY_C: Mapping[str, tuple[str, str]] = {
    "neg": ("(-{x})", "(-{x})"),
    "abs": ("fabsf({x})", "fabs({x})"),
    "exp": ("expf({x})", "exp({x})"),
    "log": ("logf({x})", "log({x})"),
    "sqrt": ("sqrtf({x})", "sqrt({x})"),
    "rsqrt": ("(1.0f / sqrtf({x}))", "(1.0 / sqrt({x}))"),
    "tanh": ("tanhf({x})", "tanh({x})"),
    "erf": ("erff({x})", "erf({x})"),
    "sigmoid": ("(1.0f / (1.0f + expf(-{x})))", "(1.0 / (1.0 + exp(-{x})))"),
    "floor": ("floorf({x})", "floor({x})"),
    "ceil": ("ceilf({x})", "ceil({x})"),
    "round": ("rintf({x})", "rint({x})"),      # round half to even, as NumPy's round
    "sin": ("sinf({x})", "sin({x})"),
    "cos": ("cosf({x})", "cos({x})"),
    "recip": ("(1.0f / {x})", "(1.0 / {x})"),
}
_MATH_NAMES = frozenset(re.findall(r"[a-z]+(?=\()", " ".join(a + b for a, b in _UNARY_C.values()))
                        + ["powf", "pow"])


def c_identifier(text: str, taken: Iterable[str] = ()) -> str:
    """`text` as a C identifier: other characters become `_`, a leading digit gets a `v`
    prefix, and a name already in `taken` (or one the generated code uses) gets a suffix."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", text) or "v"
    if name[0].isdigit() or name.startswith("_"):
        name = "v" + name
    taken = set(taken)
    base, i = name, 1
    while name in taken or name in _RESERVED or name in _MATH_NAMES:
        name = f"{base}_{i}"
        i += 1
    return name


def c_comment(text: str) -> str:
    """`text` made safe inside a /* */ comment (no terminator, one line)."""
    return " ".join(str(text).replace("*/", "* /").replace("/*", "/ *").split())


def c_float(value: float, ctype: str = "float") -> str:
    """A literal of `value`: 9 significant digits round-trip a float, 17 a double."""
    v = float(value)
    if math.isnan(v):
        return "NAN"
    if math.isinf(v):
        return "INFINITY" if v > 0 else "(-INFINITY)"
    text = f"{v:.17g}" if ctype == "double" else f"{v:.9g}"
    if not re.search(r"[.e]", text):
        text += ".0"
    text = text if ctype == "double" else text + "f"
    return f"({text})" if text.startswith("-") else text


def _ctype(t: Tensor) -> str:
    try:
        return C_TYPES[t.dtype]
    except KeyError:
        raise GraphError(f"tensor {t.name!r}: dtype {t.dtype} has no C type here; "
                         f"supported: {', '.join(C_TYPES)}") from None


def _magnitude(a: Affine, extents: Mapping[str, int]) -> int:
    """An upper bound of |partial sums| of `a` over the loop ranges."""
    return abs(a.const) + sum(abs(c) * (extents[v] - 1) for v, c in a.terms)


def covered_box(acc: Access, extents: Mapping[str, int],
                box: Sequence[int] | None = None) -> tuple[tuple[int, int], ...] | None:
    """The box [lo, hi) per dimension that `acc` writes exactly once per element over the
    loop ranges (plus a Copy's `box`), or None when its elements do not form such a box (a
    strided or diagonal index, a variable used in two dimensions). A variable's whole range
    is swept by the loops enclosing the access."""
    used: set[str] = set()
    out = []
    for d, idx in enumerate(acc.index):
        swept = {v for v, _ in idx.terms if extents[v] > 1}
        if used & swept:
            return None
        used |= swept
        terms = [(c, extents[v]) for v, c in idx.terms if v in swept]
        if box is not None and box[d] > 1:
            terms.append((1, box[d]))
        # a mixed-radix sum (1*a + e_a*b + e_a*e_b*c ...) sweeps a contiguous range once
        span = 1
        for c, e in sorted(terms):
            if c != span:
                return None
            span *= e
        out.append((idx.const, idx.const + span))
    return tuple(out)


def _boxes_cover(boxes: list[tuple[tuple[int, int], ...]], shape: tuple[int, ...]) -> bool:
    """Whether pairwise-disjoint boxes inside `shape` add up to all of it."""
    total, size = 0, math.prod(shape)
    for i, b in enumerate(boxes):
        if any(lo < 0 or hi > n for (lo, hi), n in zip(b, shape)):
            return False
        for other in boxes[:i]:
            if all(lo < ohi and olo < hi for (lo, hi), (olo, ohi) in zip(b, other)):
                return False
        total += math.prod(hi - lo for lo, hi in b)
    return total == size


def outputs_needing_zero(kernel: Kernel) -> tuple[Tensor, ...]:
    """Outputs whose initial contents the kernel can observe: read (a reduction or a load)
    before plain stores / copies have covered the whole tensor, or never wholly written.
    `run_kernel` starts outputs at zero, so the C function must clear these first."""
    need = []
    for t in kernel.outputs:
        boxes: list = []
        covered = False
        for s, loops in walk(kernel.body):
            if isinstance(s, Loop):
                continue
            reads = any(a.tensor.name == t.name for a, rw in accesses(s) if rw == "r")
            if reads:
                break
            dst = s.dst
            if dst.tensor.name != t.name:
                continue
            extents = {lp.var: lp.extent for lp in loops}
            b = covered_box(dst, extents, s.extents if isinstance(s, Copy) else None)
            if b is None:
                break
            boxes.append(b)
            if _boxes_cover(boxes, t.shape):
                covered = True
                break
        if not covered:
            need.append(t)
    return tuple(need)


class _KernelPrinter:
    def __init__(self, kernel: Kernel):
        self.k = kernel
        self.names: dict[str, str] = {}      # tensor name -> C identifier
        for i, t in enumerate(kernel.inputs):
            self.names[t.name] = f"in{i}"
        for j, t in enumerate(kernel.outputs):
            self.names[t.name] = f"out{j}"
        for i, t in enumerate(kernel.locals):
            self.names[t.name] = f"local{i}"
        taken = set(self.names.values())
        self.vars: dict[str, str] = {}       # loop variable -> C identifier
        for s, _ in walk(kernel.body):
            if isinstance(s, Loop) and s.var not in self.vars:
                self.vars[s.var] = c_identifier(s.var, taken)
                taken.add(self.vars[s.var])
        self.taken = taken
        wide = any(t.dtype == "float64" for t in kernel.params + kernel.locals)
        self.ftype = "double" if wide else "float"
        self.lines: list[str] = []
        self.depth = 0
        self.local_scope = self._place_locals()

    # ---- where locals live ------------------------------------------------------------------
    def _place_locals(self) -> dict[str, bool]:
        """local name -> True when it is declared at function scope, False when in the body
        of the outermost parallel loop that uses it (see the module docstring)."""
        local_names = {t.name for t in self.k.locals}
        homes: dict[str, set] = {n: set() for n in local_names}   # None: function scope

        def visit(stmts, home) -> None:
            for s in stmts:
                if isinstance(s, Loop):
                    visit(s.body, id(s) if home is None and s.kind == "parallel" else home)
                    continue
                for acc, _ in accesses(s):
                    if acc.tensor.name in local_names:
                        homes[acc.tensor.name].add(home)

        visit(self.k.body, None)
        for name, where in homes.items():
            if len(where) > 1:
                raise GraphError(f"kernel {self.k.name!r}: local {name!r} is used in more than "
                                 "one place among the parallel loops and the code outside "
                                 "them; locals are per-thread inside a parallel loop, so no "
                                 "data can flow from one of those places to another")
        return {name: not where or None in where for name, where in homes.items()}

    # ---- output -----------------------------------------------------------------------------
    def emit(self, line: str) -> None:
        self.lines.append("    " * self.depth + line if line else "")

    def declare_locals(self, names: Iterable[str]) -> None:
        for t in self.k.locals:
            if t.name in names:
                self.emit(f"{_ctype(t)} {self.names[t.name]}[{t.size}] RT_ALIGN64;"
                          f"  /* {c_comment(t.name)}{list(t.shape)} */")

    # ---- indices ----------------------------------------------------------------------------
    def affine(self, a: Affine, extents: Mapping[str, int]) -> str:
        wide = _magnitude(a, extents) > INT_MAX
        parts = []
        for v, c in sorted(a.terms, key=lambda vc: (-abs(vc[1]), vc[0])):
            name = self.vars[v]
            if wide:
                term = f"(ptrdiff_t){abs(c)} * {name}"
            else:
                term = name if abs(c) == 1 else f"{abs(c)} * {name}"
            parts.append(("- " if c < 0 else "+ ") + term)
        if a.const or not parts:
            parts.append(("- " if a.const < 0 else "+ ") + str(abs(a.const)))
        text = " ".join(parts)
        return text[2:] if text.startswith("+ ") else "-" + text[2:]

    def flat(self, acc: Access, extents: Mapping[str, int]) -> str:
        """The row-major offset as the sum of stride * index over dimensions (the reader
        sees each coordinate; the compiler folds it all the same)."""
        wide = _magnitude(acc.flat(), extents) > INT_MAX
        parts = []
        for idx, stride in zip(acc.index, acc.tensor.strides):
            if not idx.terms and idx.const == 0:
                continue
            text = self.affine(idx, extents)
            bare = len(idx.terms) + (idx.const != 0) == 1 and not text.startswith("-")
            if stride == 1:    # the innermost dimension: after the wide terms, if any
                parts.append(text if bare or not parts else f"({text})")
            else:
                scale = f"(ptrdiff_t){stride}" if wide else str(stride)
                parts.append(f"{scale} * {text}" if bare and (not idx.terms or idx.terms[0][1] == 1)
                             else f"{scale} * ({text})")
        return " + ".join(parts) if parts else "0"

    def ref(self, acc: Access, extents: Mapping[str, int]) -> str:
        return f"{self.names[acc.tensor.name]}[{self.flat(acc, extents)}]"

    def in_bounds(self, acc: Access, extents: Mapping[str, int]) -> list[str] | None:
        """The C conditions under which `acc` is inside its tensor: only the dimensions that
        can leave it are tested; None when it never is inside."""
        conds = []
        for idx, n in zip(acc.index, acc.tensor.shape):
            lo, hi = idx.bounds(extents)
            if hi < 0 or lo >= n:
                return None
            text = self.affine(idx, extents)
            if lo < 0:
                conds.append(f"{text} >= 0")
            if hi >= n:
                conds.append(f"{text} < {n}")
        return conds

    # ---- expressions ------------------------------------------------------------------------
    def expr(self, e, extents: Mapping[str, int]) -> str:
        f = self.ftype
        if isinstance(e, Load):
            if e.fill is None:
                return self.ref(e.access, extents)
            conds = self.in_bounds(e.access, extents)
            if conds is None:
                return c_float(e.fill, f)      # never inside the tensor
            if not conds:
                return self.ref(e.access, extents)
            return f"({' && '.join(conds)} ? {self.ref(e.access, extents)} : {c_float(e.fill, f)})"
        if isinstance(e, Const):
            return c_float(e.value, f)
        if isinstance(e, Unary):
            template = _UNARY_C[e.fn][1 if f == "double" else 0]
            return template.format(x=self.expr(e.x, extents))
        if isinstance(e, Binary):
            a, b = self.expr(e.a, extents), self.expr(e.b, extents)
            if e.op in ("max", "min"):
                return f"rt_{e.op}{'f' if f == 'float' else ''}({a}, {b})"
            if e.op == "pow":
                return f"pow{'f' if f == 'float' else ''}({a}, {b})"
            return f"({a} {e.op} {b})"
        if isinstance(e, Select):
            return (f"({self.expr(e.a, extents)} {e.cmp} {self.expr(e.b, extents)} ? "
                    f"{self.expr(e.then, extents)} : {self.expr(e.other, extents)})")
        raise TypeError(f"not an expression: {e!r}")

    # ---- statements -------------------------------------------------------------------------
    def stmts(self, body, extents: dict[str, int], in_parallel: bool) -> None:
        for s in body:
            if isinstance(s, Loop):
                self.loop(s, extents, in_parallel)
            elif isinstance(s, Store):
                self.store(s, extents)
            elif isinstance(s, Copy):
                self.copy(s, extents)
            else:
                raise TypeError(f"not a statement: {s!r}")

    def loop(self, s: Loop, extents: dict[str, int], in_parallel: bool) -> None:
        v = self.vars[s.var]
        opens_parallel = s.kind == "parallel" and not in_parallel
        if opens_parallel:
            self.emit("#ifdef _OPENMP")
            self.emit("#pragma omp parallel for")
            self.emit("#endif")
        self.emit(f"for (int {v} = 0; {v} < {s.extent}; {v}++) {{")
        self.depth += 1
        if opens_parallel:
            used = {acc.tensor.name for st, _ in walk(s.body) if not isinstance(st, Loop)
                    for acc, _ in accesses(st)}
            self.declare_locals({n for n in used if self.local_scope.get(n) is False})
        self.stmts(s.body, {**extents, s.var: s.extent}, in_parallel or opens_parallel)
        self.depth -= 1
        self.emit("}")

    def store(self, s: Store, extents: Mapping[str, int]) -> None:
        dst = self.ref(s.dst, extents)
        value = self.expr(s.value, extents)
        if value.startswith("(") and _balanced_outer(value):
            value = value[1:-1]
        if s.reduce is None:
            self.emit(f"{dst} = {value};")
        elif s.reduce == "+":
            self.emit(f"{dst} += {value};")
        else:
            fn = f"rt_{s.reduce}{'f' if self.ftype == 'float' else ''}"
            self.emit(f"{dst} = {fn}({dst}, {value});")

    def copy(self, c: Copy, extents: Mapping[str, int]) -> None:
        src_t, dst_t = c.src.tensor, c.dst.tensor
        self.emit(f"/* {c_comment(str(c))} */")
        rank = len(c.extents)
        if rank == 0:   # a scalar: one run of one element (a DMA on sunway, like any run)
            self.move(dst_t, self.flat(c.dst, extents), src_t, self.flat(c.src, extents), 1)
            return
        # The contiguous run: the innermost dimension, merged outward while every dimension
        # inside it is covered whole in both tensors (a dimension of extent 1 never breaks
        # a run, and needs no loop).
        run, first_run_dim = c.extents[-1], rank - 1
        whole = c.extents[-1] == src_t.shape[-1] == dst_t.shape[-1]
        for d in range(rank - 2, -1, -1):
            if not (whole or c.extents[d] == 1):
                break
            run *= c.extents[d]
            first_run_dim = d
            whole = whole and c.extents[d] == src_t.shape[d] == dst_t.shape[d]
        inner = dict(extents)
        box_vars: dict[int, str] = {}
        for d in range(first_run_dim):
            if c.extents[d] == 1:
                continue
            name = c_identifier(f"b{d}", self.taken)
            self.taken.add(name)
            self.vars[name] = name
            box_vars[d] = name
            inner[name] = c.extents[d]
            self.emit(f"for (int {name} = 0; {name} < {c.extents[d]}; {name}++) {{")
            self.depth += 1

        def run_start(acc: Access) -> str:
            index = tuple(i + Affine.of(box_vars[d]) if d in box_vars else i
                          for d, i in enumerate(acc.index))
            return self.flat(Access(acc.tensor, index), inner)

        self.move(dst_t, run_start(c.dst), src_t, run_start(c.src), run)
        for _ in box_vars:
            self.depth -= 1
            self.emit("}")

    def move(self, dst_t: Tensor, d_at: str, src_t: Tensor, s_at: str, run: int) -> None:
        """One contiguous run of a copy: `run` elements from flat offset `s_at` of `src_t`
        to `d_at` of `dst_t`."""
        d_name, s_name = self.names[dst_t.name], self.names[src_t.name]
        if run == 1:
            self.emit(f"{d_name}[{d_at}] = {s_name}[{s_at}];")
        elif src_t.dtype == dst_t.dtype:
            move = "memmove" if src_t.name == dst_t.name else "memcpy"
            self.emit(f"{move}(&{d_name}[{d_at}], &{s_name}[{s_at}], "
                      f"{run} * sizeof({_ctype(dst_t)}));")
        else:   # a converting copy: element by element
            r = c_identifier("e", self.taken)
            self.taken.add(r)
            self.emit(f"for (int {r} = 0; {r} < {run}; {r}++) {{")
            self.emit(f"    {d_name}[{d_at} + {r}] = ({_ctype(dst_t)}){s_name}[{s_at} + {r}];")
            self.emit("}")

    # ---- the function -----------------------------------------------------------------------
    def function(self, name: str, static: bool, comment: str | None) -> str:
        k = self.k
        if k.local_bytes > MAX_LOCAL_BYTES:
            raise GraphError(f"kernel {k.name!r}: local buffers take {k.local_bytes} bytes, more "
                             f"than the {MAX_LOCAL_BYTES} bytes a C kernel may keep on its stack")
        self.emit(f"/* kernel {c_comment(k.name)}{': ' + c_comment(comment) if comment else ''} */")
        params = []
        for t in k.params:
            const = "const " if t in k.inputs else ""
            params.append((f"{const}{_ctype(t)} *restrict {self.names[t.name]}",
                           f"/* {c_comment(t.name)}: {t.dtype}{list(t.shape)} */"))
        self.emit(f"{'static ' if static else ''}void {name}(")
        for i, (decl, note) in enumerate(params):
            self.emit(f"    {decl}{',' if i < len(params) - 1 else ')'}  {note}")
        if not params:
            self.lines[-1] += "void)"
        self.emit("{")
        self.depth = 1
        self.declare_locals({n for n, at_top in self.local_scope.items() if at_top})
        for t in outputs_needing_zero(k):
            self.emit(f"memset({self.names[t.name]}, 0, {t.nbytes});  "
                      f"/* read before it is wholly written: starts at zero */")
        self.stmts(k.body, {}, False)
        self.depth = 0
        self.emit("}")
        return "\n".join(self.lines) + "\n"


def _balanced_outer(text: str) -> bool:
    """Whether the first "(" of `text` closes at its last character."""
    depth = 0
    for i, ch in enumerate(text):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0:
            return i == len(text) - 1
    return False


def kernel_function_name(kernel: Kernel) -> str:
    return c_identifier(kernel.name)


def print_kernel(kernel: Kernel, *, name: str | None = None, static: bool = False,
                 comment: str | None = None) -> str:
    """The kernel as one C99 function named `name` (default: its name as an identifier),
    `static` for a translation unit that keeps it private. Needs PRELUDE above it."""
    return _KernelPrinter(kernel).function(name or kernel_function_name(kernel), static, comment)


def print_unit(kernels: Sequence[Kernel]) -> str:
    """A self-contained translation unit: PRELUDE and each kernel as an exported function
    (names from `kernel.name`, which must be distinct)."""
    names = [kernel_function_name(k) for k in kernels]
    if len(set(names)) != len(names):
        raise GraphError(f"kernels {names} do not have distinct C names")
    return PRELUDE + "".join("\n" + print_kernel(k, name=n) for k, n in zip(kernels, names))


def kernel_work(kernel: Kernel) -> int:
    """Statement executions (stores plus copied elements) of one run of the kernel: a
    measure of its work, for limits."""
    total = 0
    for s, loops in walk(kernel.body):
        if isinstance(s, Loop):
            continue
        n = math.prod(lp.extent for lp in loops)
        total += n * (s.elements if isinstance(s, Copy) else 1 + sum(1 for _ in loads(s.value)))
    return total


__all__ = ["C_TYPES", "MAX_LOCAL_BYTES", "PRELUDE", "c_comment", "c_float", "c_identifier",
           "covered_box", "kernel_function_name", "kernel_work", "outputs_needing_zero",
           "print_kernel", "print_unit"]
