"""The Pareto plot of a sweep: every evaluated point by its first two objectives, the front
highlighted and joined by a staircase. SVG is written by hand (no dependency, the default, as
report/roofline.py does); a .png path uses matplotlib (the `plot` extra)."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence
from xml.sax.saxutils import escape

from ..errors import InputError
from ..report.roofline import pyplot
from .runner import OBJECTIVES, objective_values

W, H = 720, 480
LEFT, RIGHT, TOP, BOTTOM = 80, 30, 40, 60


def _label(obj: str) -> str:
    unit = OBJECTIVES[obj][1]
    return f"{obj} (ms)" if unit == "s" else f"{obj} ({unit})"


def _scale(obj: str, v: float) -> float:
    return v * 1e3 if OBJECTIVES[obj][1] == "s" else v


def _axes(points, objectives):
    xo, yo = objectives[0], objectives[1] if len(objectives) > 1 else objectives[0]
    xs = [_scale(xo, p[0]) for p in points]
    ys = [_scale(yo, p[1] if len(p) > 1 else p[0]) for p in points]
    return xo, yo, xs, ys


def _nice(lo: float, hi: float) -> tuple[float, float, list[float]]:
    if hi <= lo:
        hi = lo + 1 if lo == 0 else lo * 1.1
    span = hi - lo
    step = 10 ** math.floor(math.log10(span / 5))
    for m in (1, 2, 5, 10):
        if span / (step * m) <= 6:
            step *= m
            break
    a = math.floor(lo / step) * step
    b = math.ceil(hi / step) * step
    ticks, t = [], a
    while t <= b + step / 2:
        ticks.append(round(t, 10))
        t += step
    return a, b, ticks


def pareto_svg(records: Sequence[dict], front: Sequence[dict], objectives: Sequence[str],
               title: str = "Pareto front") -> str:
    ok = [r for r in records if r["status"] == "ok"]
    if not ok:
        raise InputError("pareto plot: no evaluated point to plot")
    pts = [objective_values(r, objectives) for r in ok]
    fpts = sorted(objective_values(r, objectives) for r in front)
    xo, yo, xs, ys = _axes(pts, objectives)
    _, _, fx, fy = _axes(fpts, objectives) if fpts else (None, None, [], [])
    x0, x1, xt = _nice(min(xs), max(xs))
    y0, y1, yt = _nice(min(ys), max(ys))
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM

    def px(x):
        return LEFT + pw * (x - x0) / (x1 - x0)

    def py(y):
        return TOP + ph * (1 - (y - y0) / (y1 - y0))

    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
         f'viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">',
         f'<rect width="{W}" height="{H}" fill="white"/>',
         f'<text x="{W / 2}" y="22" text-anchor="middle" font-size="15">{escape(title)}</text>']
    for t in xt:
        o.append(f'<line x1="{px(t):.1f}" y1="{TOP}" x2="{px(t):.1f}" y2="{TOP + ph}" '
                 f'stroke="#eee"/><text x="{px(t):.1f}" y="{TOP + ph + 16}" '
                 f'text-anchor="middle">{t:g}</text>')
    for t in yt:
        o.append(f'<line x1="{LEFT}" y1="{py(t):.1f}" x2="{LEFT + pw}" y2="{py(t):.1f}" '
                 f'stroke="#eee"/><text x="{LEFT - 6}" y="{py(t) + 4:.1f}" '
                 f'text-anchor="end">{t:g}</text>')
    o.append(f'<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" '
             f'stroke="#333"/>')
    o.append(f'<text x="{LEFT + pw / 2}" y="{H - 18}" text-anchor="middle">'
             f'{escape(_label(xo))}</text>')
    o.append(f'<text x="18" y="{TOP + ph / 2}" text-anchor="middle" '
             f'transform="rotate(-90 18 {TOP + ph / 2})">{escape(_label(yo))}</text>')
    for x, y in zip(xs, ys):
        o.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="#9aa" '
                 f'fill-opacity="0.6"/>')
    if fx:
        # the 2-D staircase through the front's points (a front over more objectives may
        # have points above it: they win on another objective)
        pts2 = sorted(zip(fx, fy))
        path, best = [], math.inf
        for x, y in pts2:
            if y < best:
                path.append((x, y))
                best = y
        segs = [f"M {px(path[0][0]):.1f} {py(path[0][1]):.1f}"]
        for x, y in path[1:]:
            segs.append(f"H {px(x):.1f} V {py(y):.1f}")
        o.append(f'<path d="{" ".join(segs)}" fill="none" stroke="#d62728" '
                 f'stroke-width="1.5"/>')
        for x, y in zip(fx, fy):
            o.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="5" fill="#d62728"/>')
    o.append(f'<text x="{LEFT + pw - 4}" y="{TOP + 16}" text-anchor="end">'
             f'{len(ok)} points, {len(front)} on the front over '
             f'{escape(", ".join(objectives))}</text>')
    o.append("</svg>")
    return "\n".join(o) + "\n"


def write_pareto(path: str | Path, records, front, objectives, title: str = "Pareto front"):
    path = Path(path)
    if path.suffix.lower() == ".svg":
        path.write_text(pareto_svg(records, front, objectives, title), encoding="utf-8")
        return
    if path.suffix.lower() != ".png":
        raise InputError(f"--plot {path}: give a .svg or .png file")
    try:
        plt = pyplot("--plot .png")
    except ImportError as e:
        raise InputError(str(e)) from None
    ok = [r for r in records if r["status"] == "ok"]
    if not ok:
        raise InputError("pareto plot: no evaluated point to plot")
    xo, yo, xs, ys = _axes([objective_values(r, objectives) for r in ok], objectives)
    _, _, fx, fy = _axes(sorted(objective_values(r, objectives) for r in front), objectives)
    fig, ax = plt.subplots(figsize=(7.2, 4.8))
    ax.scatter(xs, ys, s=10, c="#9aa", label="evaluated")
    ax.scatter(fx, fy, s=30, c="#d62728", label="Pareto front")
    ax.set_xlabel(_label(xo))
    ax.set_ylabel(_label(yo))
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


__all__ = ["pareto_svg", "write_pareto"]
