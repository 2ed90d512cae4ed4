"""Plain-text tables for the terminal: aligned columns, a rule under the header, optional
footer rows (totals) set off by a second rule.

    >>> print(format_table(["op", "count", "MACs"], [["Conv", 20, si(1.8e9)], ["Gemm", 1, si(5.12e5)]]))
    op    count  MACs
    ----  -----  ----
    Conv     20  1.8G
    Gemm      1  512K

Numbers (and strings that read as numbers, such as "1.8G" or "12.5%") are right-aligned,
everything else left-aligned, unless `align` says otherwise.
"""
from __future__ import annotations

import re
from typing import Any, Sequence

_NUMERIC = re.compile(r"^[-+]?[\d,]*\.?\d+(e[-+]?\d+)?\s?[kKMGTP%x]?$")


def si(value: float, digits: int = 3) -> str:
    """A count in SI form with `digits` significant digits: 950, 11.7M, 1.82G."""
    v = float(value)
    for unit, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(v) >= scale * 0.9995:
            return f"{v / scale:.{digits}g}{unit}"
    return f"{v:.{digits}g}" if v != int(v) else str(int(v))


def format_cell(value: Any, float_format: str = ".4g") -> str:
    """One cell as text: ints with thousands separators, floats by `float_format`."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int) or (hasattr(value, "dtype") and getattr(value.dtype, "kind", "") in "iu"):
        return f"{int(value):,}"
    if isinstance(value, float) or hasattr(value, "dtype"):
        return format(float(value), float_format)
    return str(value)


def _is_numeric(text: str) -> bool:
    return bool(_NUMERIC.match(text))


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *,
                 footer: Sequence[Sequence[Any]] = (), align: str | None = None,
                 title: str | None = None, float_format: str = ".4g", gap: int = 2) -> str:
    """The table as one string (no trailing newline).

    headers: column titles; rows, footer: sequences of cells (any value; see format_cell);
    align: one character per column, '<' left or '>' right (default: right for columns whose
    cells are all numeric); title: a line printed above the table."""
    ncol = len(headers)
    body = [[format_cell(c, float_format) for c in r] for r in rows]
    foot = [[format_cell(c, float_format) for c in r] for r in footer]
    for r in body + foot:
        if len(r) != ncol:
            raise ValueError(f"table row has {len(r)} cells, the header has {ncol}: {r}")
    if align is None:
        align = "".join(
            ">" if any(r[i] for r in body + foot)
            and all(_is_numeric(r[i]) for r in body + foot if r[i]) else "<"
            for i in range(ncol))
    elif len(align) != ncol or set(align) - {"<", ">"}:
        raise ValueError(f"align must be {ncol} characters of '<' or '>', got {align!r}")
    widths = [max([len(h)] + [len(r[i]) for r in body + foot]) for i, h in enumerate(headers)]
    sep = " " * gap

    def line(cells: Sequence[str]) -> str:
        return sep.join(f"{c:{a}{w}}" for c, a, w in zip(cells, align, widths)).rstrip()

    rule = sep.join("-" * w for w in widths)
    out = [title] if title else []
    out += [line(headers), rule] + [line(r) for r in body]
    if foot:
        out += [rule] + [line(r) for r in foot]
    return "\n".join(out)
