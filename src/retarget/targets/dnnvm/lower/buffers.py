"""On-chip buffer bookkeeping for the dnnvm lowering: the two slots of each buffer (double
buffering, and reuse of data already loaded), the weights a fused group keeps resident, and the
bands of a pooled conv group sharing the output buffer with its convs."""
from __future__ import annotations

from dataclasses import dataclass

from ...accel.layers import Pool2d
from ..config import DNNVMConfig
from ..isa import LOAD_E, POOL_E, Buf, Load, Pool
from ..program import Hazards
from ..timing import insn_cost
from .tiles import _in_extent


class _Ring:
    """Two slots of one on-chip buffer and what each holds (a key), for double buffering and
    for reusing data already loaded."""

    def __init__(self, slot_bytes: int):
        self.slot_bytes = slot_bytes
        self.keys: list[object] = [None, None]
        self.next = 0

    def place(self, key) -> tuple[int, bool]:
        """(slot, already there)."""
        for s in (0, 1):
            if key is not None and self.keys[s] == key:
                return s, True
        s = self.next
        self.next ^= 1
        self.keys[s] = key
        return s, False

    def addr(self, slot: int) -> int:
        return slot * self.slot_bytes


class _Resident:
    """Weights and biases a fused group keeps on chip for all its tiles: each block is loaded
    once, on first use, at the next free address of the whole buffer (both slots). The first
    load waits for every earlier reader of the buffer; `close` hands the buffers back to the
    rings (the next layer's loads wait for this group's last CONV)."""

    def __init__(self, low, uid: int):   # low: the Lowering whose buffers these are
        self.low, self.uid = low, uid
        self.addr: dict[tuple, int] = {}
        self.end = {Buf.WGT: 0, Buf.BIAS: 0}
        self.last_load: dict[Buf, int] = {}

    def get(self, buf: Buf, key, fields) -> tuple[int, object]:
        hkey = ("resident", self.uid, buf, key)
        if (buf, key) not in self.addr:
            hz = self.low.hz
            if buf not in self.last_load:
                for s in (0, 1):
                    hz.write((buf, s), LOAD_E)
            nbytes = fields["rows"] * fields["cols"] * fields["vec_bytes"]
            self.addr[(buf, key)] = self.end[buf]
            i = self.low.b.emit(Load(buf=int(buf), sram_addr=self.end[buf], **fields))
            self.end[buf] += nbytes
            hz.did_write(hkey, i)
            self.last_load[buf] = i
        return self.addr[(buf, key)], hkey

    def close(self, last_conv: int | None) -> None:
        hz = self.low.hz
        for buf, i in self.last_load.items():
            for s in (0, 1):
                hz.did_write((buf, s), i)
                if last_conv is not None:
                    hz.did_read((buf, s), last_conv)
            ring = self.low.rings[buf]
            ring.keys = [None, None]


@dataclass(frozen=True, slots=True)
class _PoolBand:
    """A band of pooled rows [y0, y0+rows) of channels [c0, c0+cc) of image n: its POOL (all
    but the output address) reading the chunk that IN slot in_slot holds under in_key."""
    insn: Pool
    in_key: tuple
    in_slot: int
    n: int
    y0: int
    rows: int
    c0: int
    cc: int


class _PoolBands:
    """The pool of a conv group with a pool: its bands of rows, each as many as half an
    output slot holds (the convs' accumulators have the other half), alternating between the
    two slots' upper halves, tracked apart from the slots (folded back at the end)."""

    def __init__(self, pool: Pool2d, cfg: DNNVMConfig, height: int, width: int):
        self.pool, self.cfg, self.height, self.width = pool, cfg, height, width
        self.half = cfg.out_buf_bytes // 4
        self._slot = 0

    def of(self, in_key, addr: int, slot: int, n: int, y0: int, th: int, ry: int, c0: int,
           cc: int) -> list[_PoolBand]:
        """The bands of a chunk loaded at `addr` holding input rows from `ry`."""
        p, w = self.pool, self.width
        kind = 0 if p.kind == "max" else 1
        step = min(th, self.half // (w * cc))
        out = []
        for b0 in range(y0, y0 + th, step):
            rows = min(step, y0 + th - b0)
            by, nby, zt, zb = _in_extent(b0, rows, 1, p.kernel[0], p.pads[0], self.height)
            insn = Pool(in_buf=int(Buf.IN), in_addr=addr + (by - ry) * w * cc, kind=kind,
                        kh=p.kernel[0], kw=p.kernel[1], sh=1, sw=1, in_h=nby, in_w=w,
                        channels=cc, out_h=rows, out_w=w, shift=p.shift if kind else 0,
                        lo=p.lo, hi=p.hi, pad_top=zt, pad_bottom=zb, pad_left=p.pads[1],
                        pad_right=p.pads[3], pad_value=-128 if kind == 0 else 0)
            out.append(_PoolBand(insn, in_key, slot, n, b0, rows, c0, cc))
        return out

    def work(self, band: _PoolBand) -> int:
        """The band's POOL cycles, as the cycle model counts them."""
        return insn_cost(self.cfg, band.insn)[3]

    def claim(self, hz: Hazards) -> None:
        """Before the group's first instruction: the first POOL waits for what earlier layers
        left in either slot (not for this group's convs, which use the lower halves)."""
        for s in (0, 1):
            hz.write((Buf.OUT, s), POOL_E)

    def next_slot(self) -> int:
        s, self._slot = self._slot, self._slot ^ 1
        return s

    def close(self, hz: Hazards) -> None:
        for s in (0, 1):
            hz.fold((Buf.OUT, s, "pooled"), (Buf.OUT, s))
