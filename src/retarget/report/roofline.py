"""Roofline plot of per-layer results (report/layers.py rows): log-log GOPS against arithmetic
intensity, the machine's roof min(peak, bandwidth x intensity), one marker per layer, and above
each marker a dash at the layer's compute ceiling (LayerRow.ceiling_gops) where that is below
the roof: the GOPS its resets and ALU passes leave the GEMM core, whatever the schedule.

SVG is written by hand (no dependency; the default). A .png path uses matplotlib, the optional
`plot` extra, and says so when it is missing.

    write_roofline("roofline.svg", {"1 thread": rows1, "2 threads": rows2})
"""
from __future__ import annotations

import math
from typing import Mapping, Sequence
from xml.sax.saxutils import escape

from .layers import LayerRow

_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")
W, H = 720, 480
LEFT, RIGHT, TOP, BOTTOM = 70, 170, 40, 60


def _series(data) -> dict[str, list[LayerRow]]:
    if isinstance(data, Mapping):
        return {str(k): list(v) for k, v in data.items()}
    return {"layers": list(data)}


def _decades(lo: float, hi: float) -> tuple[float, float]:
    """Axis range: whole powers of two around [lo, hi] (base 2 keeps the ridge readable)."""
    return 2.0 ** math.floor(math.log2(lo)), 2.0 ** math.ceil(math.log2(hi))


def _axes(series: dict[str, list[LayerRow]]):
    rows = [r for rs in series.values() for r in rs]
    if not rows:
        raise ValueError("roofline: no layers to plot")
    peak, bw = rows[0].peak_gops, rows[0].bandwidth_gbps
    finite = [r.intensity for r in rows if math.isfinite(r.intensity) and r.intensity > 0]
    ridge = peak / bw
    x_lo, x_hi = _decades(min(finite + [ridge]) / 2, max(finite + [ridge]) * 2)
    gops = [r.gops for r in rows if r.gops > 0]
    y_lo, y_hi = _decades(min(gops + [bw * x_lo]) / 1.5, peak * 1.5)
    return rows, peak, bw, ridge, (x_lo, x_hi), (y_lo, y_hi)


def roofline_svg(data, title: str = "Roofline") -> str:
    """The plot as SVG text. `data`: rows, or {series name: rows}."""
    series = _series(data)
    rows, peak, bw, ridge, (x_lo, x_hi), (y_lo, y_hi) = _axes(series)
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM

    def px(x: float) -> float:
        return LEFT + pw * (math.log2(x) - math.log2(x_lo)) / (math.log2(x_hi) - math.log2(x_lo))

    def py(y: float) -> float:
        return TOP + ph * (1 - (math.log2(y) - math.log2(y_lo)) / (math.log2(y_hi) - math.log2(y_lo)))

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
           f'viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="11">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{LEFT + pw / 2}" y="22" text-anchor="middle" font-size="14">'
           f'{escape(title)}</text>',
           f'<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="#444"/>']
    # grid and tick labels at powers of two
    e = math.log2(x_lo)
    while e <= math.log2(x_hi) + 1e-9:
        x = px(2 ** e)
        out.append(f'<line x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{TOP + ph}" stroke="#eee"/>')
        out.append(f'<text x="{x:.1f}" y="{TOP + ph + 16}" text-anchor="middle">{2 ** e:g}</text>')
        e += 1
    e = math.log2(y_lo)
    while e <= math.log2(y_hi) + 1e-9:
        y = py(2 ** e)
        out.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{LEFT + pw}" y2="{y:.1f}" stroke="#eee"/>')
        out.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{2 ** e:g}</text>')
        e += 1
    out.append(f'<text x="{LEFT + pw / 2}" y="{H - 18}" text-anchor="middle">arithmetic '
               'intensity (ops / DRAM byte)</text>')
    out.append(f'<text x="18" y="{TOP + ph / 2}" text-anchor="middle" '
               f'transform="rotate(-90 18 {TOP + ph / 2})">GOPS</text>')
    # the roof: bandwidth slope up to the ridge, then the compute peak
    x0 = max(x_lo, y_lo / bw)
    out.append(f'<polyline fill="none" stroke="black" stroke-width="2" points="'
               f'{px(x0):.1f},{py(bw * x0):.1f} {px(ridge):.1f},{py(peak):.1f} '
               f'{px(x_hi):.1f},{py(peak):.1f}"/>')
    out.append(f'<text x="{px(x_hi) - 4:.1f}" y="{py(peak) - 6:.1f}" text-anchor="end">peak '
               f'{peak:.1f} GOPS, {bw:.2f} GB/s</text>')
    for k, (name, rs) in enumerate(series.items()):
        colour = _COLOURS[k % len(_COLOURS)]
        for r in rs:
            if r.gops <= 0 or not math.isfinite(r.intensity):
                continue
            x, y = px(r.intensity), py(r.gops)
            if _ceiling_shown(r):
                yc = py(r.ceiling_gops)
                out.append(f'<line x1="{x - 7:.1f}" y1="{yc:.1f}" x2="{x + 7:.1f}" y2="{yc:.1f}" '
                           f'stroke="{colour}" stroke-width="2"><title>{escape(name)} '
                           f'{escape(r.name)}: compute ceiling {r.ceiling_gops:.2f} GOPS '
                           f'({100 * r.compute_ceiling:.0f}% of peak)</title></line>')
            out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{colour}">'
                       f'<title>{escape(name)} {escape(r.name)}: {r.gops:.2f} GOPS, '
                       f'{r.intensity:.1f} ops/B, {100 * r.roof_fraction:.0f}% of roof'
                       '</title></circle>')
            out.append(f'<text x="{x + 5:.1f}" y="{y - 5:.1f}" fill="{colour}" font-size="9">'
                       f'{escape(r.name)}</text>')
        ly = TOP + 10 + 18 * k
        out.append(f'<circle cx="{W - RIGHT + 16}" cy="{ly}" r="4" fill="{colour}"/>')
        out.append(f'<text x="{W - RIGHT + 26}" y="{ly + 4}">{escape(name)}</text>')
    ly = TOP + 10 + 18 * len(series)
    out.append(f'<line x1="{W - RIGHT + 9}" y1="{ly}" x2="{W - RIGHT + 23}" y2="{ly}" '
               'stroke="#444" stroke-width="2"/>')
    out.append(f'<text x="{W - RIGHT + 26}" y="{ly + 4}">compute ceiling</text>')
    out.append("</svg>")
    return "\n".join(out)


def pyplot(what: str):
    """matplotlib.pyplot on the Agg backend, or an ImportError saying `what` needs it."""
    try:   # optional heavy dependency (the plot extra): imported only when used
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError(f"{what} needs matplotlib (pip install 'retarget[plot]'); write an "
                          f".svg instead, which needs nothing") from None
    return plt


def write_roofline(path: str, data, title: str = "Roofline") -> None:
    """Write the plot: SVG by hand for .svg, matplotlib for .png (optional `plot` extra)."""
    if path.endswith(".svg"):
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(roofline_svg(data, title))
        return
    if not path.endswith(".png"):
        raise ValueError(f"roofline: {path!r} must end in .svg or .png")
    plt = pyplot("a PNG roofline")
    series = _series(data)
    rows, peak, bw, ridge, (x_lo, x_hi), (y_lo, y_hi) = _axes(series)
    fig, ax = plt.subplots(figsize=(7.2, 4.8))
    x0 = max(x_lo, y_lo / bw)
    ax.plot([x0, ridge, x_hi], [bw * x0, peak, peak], "k-", lw=2)
    for name, rs in series.items():
        pts = [(r.intensity, r.gops, r.name) for r in rs
               if r.gops > 0 and math.isfinite(r.intensity)]
        line, = ax.plot([p[0] for p in pts], [p[1] for p in pts], "o", label=name)
        ceil = [(r.intensity, r.ceiling_gops) for r in rs
                if r.gops > 0 and math.isfinite(r.intensity) and _ceiling_shown(r)]
        ax.plot([c[0] for c in ceil], [c[1] for c in ceil], "_", markersize=14,
                markeredgewidth=2, color=line.get_color())
        for x, y, label in pts:
            ax.annotate(label, (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlim(x_lo, x_hi)
    ax.set_ylim(y_lo, y_hi)
    ax.set_xlabel("arithmetic intensity (ops / DRAM byte)")
    ax.set_ylabel("GOPS")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _ceiling_shown(r: LayerRow) -> bool:
    """A layer's compute ceiling is drawn when it has GEMM work and lies below its roof."""
    return r.macs > 0 and 0 < r.ceiling_gops < r.roof_gops


def roofline_points(rows: Sequence[LayerRow]) -> list[tuple[str, float, float, float]]:
    """(name, intensity, achieved GOPS, roof GOPS) per row: the plot's data, for tests/tables."""
    return [(r.name, r.intensity, r.gops, r.roof_gops) for r in rows]
