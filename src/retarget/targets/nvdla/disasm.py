"""`retarget disasm` for a loadable: its hardware, memory list, address list, bindings and one
line per hardware layer (engine, shapes, the addresses it reads and writes by name, the SDP
converter and element-wise stages, its dependencies), so a compiled region can be read."""
from __future__ import annotations

from pathlib import Path

from ...errors import ModelLoadError
from .loadable import (CDP, CONV, ENGINES, HALF_EVEN, HAS_CVT, HAS_EW, MAGIC, MAX_POOL, NONE,
                       PDP, SUM_POOL, Loadable, LoadableError)


def _addr(ld: Loadable, i: int) -> str:
    return "-" if i == NONE else f"@{ld.addresses[i].name}" if 0 <= i < len(
        ld.addresses) else f"@<bad {i}>"


def format_layer(ld: Loadable, rec) -> str:
    r = {k: int(rec[k]) for k in rec.dtype.names}
    op = r["op"]
    src = f"{_addr(ld, r['src'])}[{r['src_n']}x{r['src_c']}x{r['src_h']}x{r['src_w']}]"
    dst = f"{_addr(ld, r['dst'])}[{r['dst_c']}x{r['dst_h']}x{r['dst_w']}"
    if r["dst_ch0"] or r["dst_ctotal"] != r["dst_c"]:
        dst += f" at ch {r['dst_ch0']}/{r['dst_ctotal']}"
    dst += "]"
    parts = [f"{ENGINES.get(op, '?'):4s} {src} -> {dst}"]
    if op in (CONV, PDP):
        parts.append(f"k{r['kernel_h']}x{r['kernel_w']} s{r['stride_h']}x{r['stride_w']} "
                     f"p{r['pad_t']},{r['pad_l']},{r['pad_b']},{r['pad_r']}")
    if op == CONV:
        parts.append(f"w={_addr(ld, r['wgt'])}" + (f" g{r['groups']}" if r["groups"] > 1 else "")
                     + (f" bias={_addr(ld, r['bias'])}" if r["bias"] != NONE else ""))
    if op == PDP:
        parts.append("max" if r["flags"] & MAX_POOL else "sum" if r["flags"] & SUM_POOL else "?")
    if op == CDP:
        parts.append(f"lrn size {r['kernel_h']} lut={_addr(ld, r['lut'])} >>{r['lut_shift']}")
    rnd = " half_even" if r["flags"] & HALF_EVEN else ""
    if r["flags"] & HAS_CVT:
        how = (f"m={_addr(ld, r['cvt_mul'])} s={_addr(ld, r['cvt_shift'])}"
               if r["cvt_mul"] != NONE else f"m={r['cvt_m']} s={r['cvt_s']}")
        parts.append(f"cvt({how} clip {r['cvt_lo']}..{r['cvt_hi']}{rnd})")
    if r["flags"] & HAS_EW:
        parts.append(f"ew(+{_addr(ld, r['ew'])} ma={r['ew_mul_a']} mb={r['ew_mul_b']} "
                     f"s={r['ew_shift']} clip {r['ew_lo']}..{r['ew_hi']})")
    return "  ".join(parts)


def disassemble(ld: Loadable, header: str = "") -> str:
    lines = [header] if header else []
    hw = ", ".join(f"{k}={v:g}" for k, v in ld.hardware.items())
    lines.append(f"config {ld.config_name}: {hw}")
    lines.append(f"memories ({len(ld.memories)}):")
    for m in ld.memories:
        lines.append(f"  M{m.id} {m.name:8s} {m.kind:8s} {m.size:>10} B at image {m.offset:#x}")
    lines.append(f"addresses ({len(ld.addresses)}):")
    for a in ld.addresses:
        lines.append(f"  A{a.id:<4} M{a.memory}+{a.offset:<#10x} {a.dtype:5s} "
                     f"{'x'.join(map(str, a.shape)):>16}  {a.name}")
    lines.append("inputs:  " + ", ".join(f"{v} -> A{a}" for v, a in ld.inputs))
    lines.append("outputs: " + ", ".join(f"{v} -> A{a}" for v, a in ld.outputs))
    lines.append(f"layers ({len(ld.layers)}):")
    for i, rec in enumerate(ld.layers):
        deps = ld.deps(i)
        lines.append(f"  L{i:<4} {ld.string(int(rec['name']))}")
        lines.append(f"        {format_layer(ld, rec)}"
                     + (f"  after {','.join(f'L{d}' for d in deps)}" if deps else ""))
    lines.append(f"weight blob: {len(ld.blob)} bytes")
    return "\n".join(lines)


def _loadable_file(path: Path) -> Path:
    return path / "program.loadable" if path.is_dir() else path


def recognizes(path: Path) -> bool:
    """A .loadable file (or a kernel directory holding program.loadable): by its magic."""
    try:
        with open(_loadable_file(path), "rb") as fh:
            return fh.read(len(MAGIC)) == MAGIC
    except OSError:
        return False


def disassemble_file(path: Path, *, config: str | None = None, uops: Path | None = None) -> str:
    """A loadable's memory list, address list and hardware layers (a loadable carries its own
    configuration: `config` and `uops` are unused)."""
    path = _loadable_file(path)
    try:
        ld = Loadable.from_bytes(path.read_bytes())
    except LoadableError as e:
        raise ModelLoadError(f"{path}: {e}") from None
    return disassemble(ld, f"{path}: nvdla loadable, {len(ld.layers)} hardware layers")


__all__ = ["disassemble", "disassemble_file", "format_layer", "recognizes"]
