"""VTA behavioural simulator: semantics checked against plain NumPy and a slow per-micro-op
reference loop (kept here, in the tests only), on the default config and the 1x32 / 2x16 presets.

Streams are hand-built from the instruction dataclasses; data reaches the SRAMs only through
LOAD instructions from DRAM, results are read from the SRAMs or back from DRAM after STORE.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from retarget.targets.vta.config import preset
from retarget.targets.vta.isa import (NO_DEPS, AluInsn, AluOp, Deps, FinishInsn, GemmInsn,
                                      MemInsn, MemType, Opcode, encode_stream, encode_uop_arrays,
                                      layout_for)
from retarget.targets.vta.sim import Simulator

CONFIGS = ["pynq", "1x32", "2x16"]
INT32 = 1 << 32


def wrap32(v):
    v = np.asarray(v, dtype=np.int64)
    return ((v + (1 << 31)) % INT32 - (1 << 31)).astype(np.int64)


class Rig:
    """A simulator with a small DRAM, a bump allocator for data and the instruction list."""

    def __init__(self, cfg_name: str, dram_bytes: int = 1 << 22):
        self.cfg = preset(cfg_name)
        self.sim = Simulator(self.cfg, dram_bytes=dram_bytes)
        self.top = 0
        self.insns: list = []

    def elem_bytes(self, mtype: MemType) -> int:
        c = self.cfg
        return {MemType.INP: c.inp_elem_bytes, MemType.WGT: c.wgt_elem_bytes,
                MemType.ACC: c.acc_elem_bytes, MemType.ACC_8BIT: c.batch * c.block_out,
                MemType.UOP: 4, MemType.OUT: c.out_elem_bytes}[mtype]

    def place(self, data: np.ndarray, elem_bytes: int) -> int:
        """Copy `data` to DRAM at the next address aligned to elem_bytes; its element index."""
        raw = np.ascontiguousarray(data).view(np.uint8).reshape(-1)
        addr = -(-self.top // elem_bytes) * elem_bytes
        self.sim.dram[addr:addr + raw.size] = raw
        self.top = addr + raw.size
        return addr // elem_bytes

    def reserve(self, nbytes: int, elem_bytes: int) -> int:
        return self.place(np.zeros(nbytes, np.uint8), elem_bytes)

    def load(self, mtype: MemType, sram_base: int, data: np.ndarray, pads=(0, 0, 0, 0),
             deps: Deps = NO_DEPS) -> MemInsn:
        """data: [rows, cols, *element] in the DRAM element type."""
        eb = self.elem_bytes(mtype)
        base = self.place(data, eb)
        insn = MemInsn(Opcode.LOAD, deps, mtype, sram_base, base, data.shape[0], data.shape[1],
                       data.shape[1], *pads)
        self.insns.append(insn)
        return insn

    def load_uops(self, uops: np.ndarray, sram_base: int = 0, deps: Deps = NO_DEPS) -> None:
        uops = np.asarray(uops, dtype=np.int64).reshape(-1, 3)
        words = encode_uop_arrays(uops[:, 0], uops[:, 1], uops[:, 2], layout_for(self.cfg))
        self.load(MemType.UOP, sram_base, words.reshape(1, -1), deps=deps)

    def run(self, finish: bool = True):
        if finish:
            self.insns.append(FinishInsn())
        return self.sim.run(self.insns)


def rand_int8(rng, shape):
    return rng.integers(-128, 128, size=shape, dtype=np.int64).astype(np.int8)


# ---- slow references (the spec's loops, one micro-op at a time) ---------------------------------

def ref_gemm(acc, inp, wgt, uops, g: GemmInsn):
    acc = acc.astype(np.int64).copy()
    for y in range(g.iter_out):
        for x in range(g.iter_in):
            for u in range(g.uop_bgn, g.uop_end):
                d = uops[u][0] + y * g.dst_factor_out + x * g.dst_factor_in
                if g.reset:
                    acc[d] = 0
                    continue
                s = uops[u][1] + y * g.src_factor_out + x * g.src_factor_in
                w = uops[u][2] + y * g.wgt_factor_out + x * g.wgt_factor_in
                prod = inp[s].astype(np.int64) @ wgt[w].astype(np.int64).T   # [B, O]
                acc[d] = wrap32(acc[d] + prod)
    return acc


def ref_alu_lane(op: AluOp, a: int, b: int) -> int:
    if op is AluOp.MIN:
        return min(a, b)
    if op is AluOp.MAX:
        return max(a, b)
    if op is AluOp.ADD:
        return int(wrap32(a + b))
    if op is AluOp.MUL:
        return int(wrap32(a * b))
    if b >= 0:
        return a >> (b & 31)
    return int(wrap32(a << ((-b) & 31)))


def ref_alu(acc, uops, a: AluInsn):
    acc = acc.astype(np.int64).copy()
    for y in range(a.iter_out):
        for x in range(a.iter_in):
            for u in range(a.uop_bgn, a.uop_end):
                d = uops[u][0] + y * a.dst_factor_out + x * a.dst_factor_in
                s = uops[u][1] + y * a.src_factor_out + x * a.src_factor_in
                src = np.full(acc[d].shape, a.imm) if a.use_imm else acc[s].copy()
                acc[d] = [[ref_alu_lane(AluOp(a.alu_op), int(p), int(q)) for p, q in zip(r1, r2)]
                          for r1, r2 in zip(acc[d], src)]
    return acc


# ---- LOAD / STORE -------------------------------------------------------------------------------

PADS = [(0, 0, 0, 0), (2, 0, 0, 0), (0, 2, 0, 0), (0, 0, 2, 0), (0, 0, 0, 2), (1, 1, 1, 1),
        (3, 1, 0, 2), (15, 0, 0, 15)]


@pytest.mark.parametrize("cfg_name", CONFIGS)
@pytest.mark.parametrize("pads", PADS)
def test_padded_loads_every_buffer(cfg_name, pads):
    rig = Rig(cfg_name)
    c, rng = rig.cfg, np.random.default_rng(1)
    yp0, yp1, xp0, xp1 = pads
    ny, nx = 3, 5
    cases = {
        MemType.INP: (rand_int8(rng, (ny, nx, c.batch, c.block_in)), rig.sim.mem.inp),
        MemType.WGT: (rand_int8(rng, (ny, nx, c.block_out, c.block_in)), rig.sim.mem.wgt),
        MemType.ACC: (rng.integers(-2**31, 2**31, (ny, nx, c.batch, c.block_out)).astype(np.int32),
                      rig.sim.mem.acc),
    }
    base = 7
    for mtype, (data, _) in cases.items():
        rig.load(mtype, base, data, pads)
    rig.run()
    for mtype, (data, sram) in cases.items():
        want = np.pad(data, [(yp0, yp1), (xp0, xp1)] + [(0, 0)] * (data.ndim - 2))
        rows, width = want.shape[:2]
        got = sram[base:base + rows * width].reshape(want.shape)
        np.testing.assert_array_equal(got, want, err_msg=f"{mtype.name} pads {pads}")
        assert not sram[:base].any() and not sram[base + rows * width:].any()


@pytest.mark.parametrize("cfg_name", CONFIGS)
def test_acc_8bit_load_sign_extends_and_strided_rows(cfg_name):
    rig = Rig(cfg_name)
    c, rng = rig.cfg, np.random.default_rng(2)
    full = rand_int8(rng, (4, 6, c.batch, c.block_out))
    eb = rig.elem_bytes(MemType.ACC_8BIT)
    base = rig.place(full, eb)
    # Rows 1..3, columns 2..4 of a 4x6 DRAM matrix: x_stride 6 > x_size 3.
    rig.insns.append(MemInsn(Opcode.LOAD, NO_DEPS, MemType.ACC_8BIT, 0, base + 6 + 2, 3, 3, 6))
    res = rig.run()
    got = rig.sim.mem.acc[:9].reshape(3, 3, c.batch, c.block_out)
    np.testing.assert_array_equal(got, full[1:4, 2:5].astype(np.int32))
    # counted as upstream's Load_int8 counts it: the accumulator element, not the DRAM bytes
    assert res.counters.acc_load_nbytes == 9 * c.acc_elem_bytes


def test_zero_x_size_load_is_only_a_token_carrier():
    rig = Rig("pynq")
    rig.sim.mem.inp[:] = 5
    rig.insns.append(MemInsn(Opcode.LOAD, NO_DEPS, MemType.INP, 0, 10**6, 4, 0, 0, 3, 3, 3, 3))
    res = rig.run()
    assert (rig.sim.mem.inp == 5).all() and res.counters.inp_load_nbytes == 0


@pytest.mark.parametrize("cfg_name", CONFIGS)
def test_store_narrows_each_lane_to_its_low_8_bits(cfg_name):
    rig = Rig(cfg_name)
    c, rng = rig.cfg, np.random.default_rng(3)
    acc = rng.integers(-2**31, 2**31, (4, 5, c.batch, c.block_out)).astype(np.int32)
    acc[0, 0, 0, :4] = [127, 128, -129, 255]
    rig.load(MemType.ACC, 3, acc)
    eb = c.out_elem_bytes
    # Store 4 rows of 5 elements into a DRAM matrix 8 elements wide (x_stride 8).
    out_base = rig.reserve(4 * 8 * eb, eb)
    rig.insns.append(MemInsn(Opcode.STORE, NO_DEPS, MemType.OUT, 3, out_base, 4, 5, 8))
    res = rig.run()
    dram = rig.sim.dram[out_base * eb:(out_base + 32) * eb].view(np.int8)
    got = dram.reshape(4, 8, c.batch, c.block_out)
    want = (acc.astype(np.int64) & 0xFF).astype(np.uint8).view(np.int8)
    np.testing.assert_array_equal(got[:, :5], want)
    assert not got[:, 5:].any()  # the stride gap is untouched
    assert list(got[0, 0, 0, :4]) == [127, -128, 127, -1]
    assert res.counters.out_store_nbytes == 20 * eb
    assert res.counters.acc_load_nbytes == 20 * c.acc_elem_bytes


# ---- GEMM ---------------------------------------------------------------------------------------

def _gemm_rig(cfg_name, seed, n_inp=64, n_wgt=32, n_acc=64):
    rig = Rig(cfg_name)
    c, rng = rig.cfg, np.random.default_rng(seed)
    inp = rand_int8(rng, (1, n_inp, c.batch, c.block_in))
    wgt = rand_int8(rng, (1, n_wgt, c.block_out, c.block_in))
    acc = rng.integers(-1000, 1000, (1, n_acc, c.batch, c.block_out)).astype(np.int32)
    rig.load(MemType.INP, 0, inp)
    rig.load(MemType.WGT, 0, wgt)
    rig.load(MemType.ACC, 0, acc)
    return rig, rng, inp[0], wgt[0], acc[0]


@pytest.mark.parametrize("cfg_name", CONFIGS)
def test_gemm_matches_numpy_matmul(cfg_name):
    """acc[i] = sum_k inp[i*4+k] . wgt[k]^T as a kernel of 4 uops with an outer loop over i."""
    rig, _, inp, wgt, acc = _gemm_rig(cfg_name, 4)
    c = rig.cfg
    rig.load_uops([(0, k, k) for k in range(4)])
    rig.insns.append(GemmInsn(NO_DEPS, True, 0, 1, 16, 1, 1, 0, 0, 0, 0, 0))   # reset acc[0:16]
    rig.insns.append(GemmInsn(NO_DEPS, False, 0, 4, 16, 1, 1, 0, 4, 0, 0, 0))
    res = rig.run()
    x = inp.astype(np.int64).reshape(16, 4, c.batch, c.block_in)
    w = wgt[:4].astype(np.int64)
    want = np.einsum("ikbn,kon->ibo", x, w)
    np.testing.assert_array_equal(rig.sim.mem.acc[:16], want)
    np.testing.assert_array_equal(rig.sim.mem.acc[16:64], acc[16:])   # untouched
    assert res.counters.gemm_counter == 64


@pytest.mark.parametrize("cfg_name", CONFIGS)
def test_gemm_two_loops_and_reset_against_reference_loop(cfg_name):
    rig, rng, inp, wgt, acc = _gemm_rig(cfg_name, 5)
    uops = np.array([(0, 0, 0), (1, 3, 2), (0, 5, 1), (9, 2, 7)])   # dst 0 repeats
    rig.load_uops(uops, sram_base=10)
    reset = GemmInsn(NO_DEPS, True, 12, 13, 2, 3, 20, 1, 0, 0, 0, 0)
    mac = GemmInsn(NO_DEPS, False, 10, 14, 3, 4, 12, 2, 8, 3, 5, 2)
    rig.insns += [reset, mac]
    res = rig.run()
    uop_mem = np.zeros((rig.cfg.uop_depth, 3), np.int64)
    uop_mem[10:14] = uops
    want = ref_gemm(acc, inp, wgt, uop_mem, reset)
    want = ref_gemm(want, inp, wgt, uop_mem, mac)
    np.testing.assert_array_equal(rig.sim.mem.acc[:64], want)
    assert res.counters.gemm_counter == 3 * 4 * 4


def test_gemm_accumulator_wraps_around_int32():
    rig = Rig("pynq")
    c = rig.cfg
    inp = np.full((1, 1, 1, 16), -128, np.int8)
    wgt = np.full((1, 1, 16, 16), -128, np.int8)
    acc = np.full((1, 1, 1, 16), 2**31 - 1000, np.int32)
    rig.load(MemType.INP, 0, inp)
    rig.load(MemType.WGT, 0, wgt)
    rig.load(MemType.ACC, 0, acc)
    rig.load_uops([(0, 0, 0)])
    rig.insns.append(GemmInsn(NO_DEPS, False, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0))
    rig.run()
    assert (rig.sim.mem.acc[0] == wrap32(2**31 - 1000 + 16 * 128 * 128)).all()
    assert c.block_in == 16


# ---- ALU ----------------------------------------------------------------------------------------

ALU_CASES = [(AluOp.SHR, True, -3), (AluOp.SHR, True, 4), (AluOp.SHR, False, 0),
             (AluOp.MAX, True, 2), (AluOp.MAX, False, 0), (AluOp.MIN, True, -7),
             (AluOp.MIN, False, 0), (AluOp.ADD, True, 3), (AluOp.ADD, False, 0),
             (AluOp.MUL, True, -5), (AluOp.MUL, False, 0), (AluOp.SHR, True, -32768)]


@pytest.mark.parametrize("cfg_name", CONFIGS)
@pytest.mark.parametrize("op,use_imm,imm", ALU_CASES)
def test_alu_ops_match_numpy(cfg_name, op, use_imm, imm):
    """8x8 blocks: acc[0:64] = op(acc[0:64], imm or acc[64:128]) (the published ALU test)."""
    rig = Rig(cfg_name)
    c, rng = rig.cfg, np.random.default_rng(6)
    a = rng.integers(-16, 16, (8, 8, c.batch, c.block_out)).astype(np.int32)
    b = rng.integers(-40, 40, (8, 8, c.batch, c.block_out)).astype(np.int32)
    if op is AluOp.MUL:
        a = rng.integers(-2**31, 2**31, a.shape).astype(np.int32)   # products must wrap
    rig.load(MemType.ACC, 0, a)
    rig.load(MemType.ACC, 64, b)
    rig.load_uops([(0, 64, 0)])
    # Two loops: y over rows (8 entries apart), x over columns.
    rig.insns.append(AluInsn(NO_DEPS, False, 0, 1, 8, 8, 8, 1, 8, 1, op, use_imm, imm))
    res = rig.run()
    a64, b64 = a.astype(np.int64), (np.int64(imm) if use_imm else b.astype(np.int64))
    want = {AluOp.MIN: lambda: np.minimum(a64, b64), AluOp.MAX: lambda: np.maximum(a64, b64),
            AluOp.ADD: lambda: wrap32(a64 + b64), AluOp.MUL: lambda: wrap32(a64 * b64),
            AluOp.SHR: lambda: np.where(b64 >= 0, a64 >> (b64 & 31),
                                        wrap32(a64 << ((-b64) & 31)))}[op]()
    got = rig.sim.mem.acc[:64].reshape(a.shape)
    np.testing.assert_array_equal(got, np.broadcast_to(want, a.shape))
    assert res.counters.alu_counter == 64


@pytest.mark.parametrize("cfg_name", CONFIGS)
def test_relu_and_shift_and_scale_through_store(cfg_name):
    """(a + s) >> k, then clip to [0, 127] with MIN/MAX, stored as int8 (published tests)."""
    rig = Rig(cfg_name)
    c, rng = rig.cfg, np.random.default_rng(7)
    a = rng.integers(-256, 256, (8, 10, c.batch, c.block_out)).astype(np.int32)
    s = rng.integers(-256, 256, (8, 10, c.batch, c.block_out)).astype(np.int32)
    rig.load(MemType.ACC, 0, a)
    rig.load(MemType.ACC, 80, s)
    rig.load_uops([(0, 80, 0), (0, 0, 0)], sram_base=0)
    kern = dict(uop_bgn=0, uop_end=1, iter_out=80, iter_in=1, dst_factor_out=1, dst_factor_in=0,
                src_factor_out=1, src_factor_in=0)
    imm_kern = dict(kern, uop_bgn=1, uop_end=2)
    rig.insns += [
        AluInsn(NO_DEPS, False, **kern, alu_op=AluOp.ADD, use_imm=False, imm=0),
        AluInsn(NO_DEPS, False, **imm_kern, alu_op=AluOp.SHR, use_imm=True, imm=2),
        AluInsn(NO_DEPS, False, **imm_kern, alu_op=AluOp.MIN, use_imm=True, imm=127),
        AluInsn(NO_DEPS, False, **imm_kern, alu_op=AluOp.MAX, use_imm=True, imm=0),
    ]
    eb = c.out_elem_bytes
    out = rig.reserve(80 * eb, eb)
    rig.insns.append(MemInsn(Opcode.STORE, NO_DEPS, MemType.OUT, 0, out, 8, 10, 10))
    rig.run()
    want = np.clip((a.astype(np.int64) + s) >> 2, 0, 127).astype(np.int8)
    got = rig.sim.dram[out * eb:(out + 80) * eb].view(np.int8).reshape(want.shape)
    np.testing.assert_array_equal(got, want)


def test_alu_with_repeated_destination_runs_in_loop_order():
    """acc[0] += acc[1+i] for i < 6 and acc[j+1] = acc[j] * 2: results depend on order."""
    rig = Rig("pynq")
    rng = np.random.default_rng(8)
    a = rng.integers(-50, 50, (1, 16, 1, 16)).astype(np.int32)
    rig.load(MemType.ACC, 0, a)
    rig.load_uops([(0, 1, 0), (9, 8, 0)])
    reduce_ = AluInsn(NO_DEPS, False, 0, 1, 6, 1, 0, 0, 1, 0, AluOp.ADD, False, 0)
    chain = AluInsn(NO_DEPS, False, 1, 2, 5, 1, 1, 0, 1, 0, AluOp.ADD, False, 0)  # acc[9+y] += acc[8+y]
    rig.insns += [reduce_, chain]
    rig.run()
    uop_mem = np.zeros((rig.cfg.uop_depth, 3), np.int64)
    uop_mem[:2] = [(0, 1, 0), (9, 8, 0)]
    want = ref_alu(ref_alu(a[0], uop_mem, reduce_), uop_mem, chain)
    np.testing.assert_array_equal(rig.sim.mem.acc[:16], want)


# ---- tokens -------------------------------------------------------------------------------------

@pytest.mark.parametrize("cfg_name", CONFIGS)
def test_tokens_order_a_double_buffered_producer_consumer_stream(cfg_name):
    """Four tiles through two INP and two ACC halves: load -(l2g)-> compute -(g2s)-> store, with
    the WAR tokens back (g2l: input half free, s2g: acc half stored). The stream is written
    stage-grouped (all loads, then all compute, then all stores), an order that would overwrite
    halves still in use if it ran as written: only the tokens make the result right."""
    rig = Rig(cfg_name)
    c, rng = rig.cfg, np.random.default_rng(9)
    n_tiles, rows = 4, 8
    x = rand_int8(rng, (n_tiles, rows, c.batch, c.block_in))
    w = rand_int8(rng, (1, 1, c.block_out, c.block_in))
    eb_in, eb_out = c.inp_elem_bytes, c.out_elem_bytes
    x_base = rig.place(x, eb_in)
    out_base = rig.reserve(n_tiles * rows * eb_out, eb_out)
    rig.load(MemType.WGT, 0, w)
    rig.load_uops([(0, 0, 0), (rows, rows, 0)])     # uop b: acc half b <- inp half b
    loads, computes, stores = [], [], []
    for t in range(n_tiles):
        b = t % 2
        reused, reused_later = t >= 2, t + 2 < n_tiles
        loads.append(MemInsn(Opcode.LOAD, Deps(pop_next=reused, push_next=True), MemType.INP,
                             b * rows, x_base + t * rows, 1, rows, rows))
        loop = dict(uop_bgn=b, uop_end=b + 1, iter_out=rows, iter_in=1, dst_factor_out=1,
                    dst_factor_in=0, src_factor_out=1, src_factor_in=0)
        computes += [
            GemmInsn(Deps(pop_prev=True, pop_next=reused), True, **loop, wgt_factor_out=0,
                     wgt_factor_in=0),
            GemmInsn(NO_DEPS, False, **loop, wgt_factor_out=0, wgt_factor_in=0),
            AluInsn(Deps(push_prev=reused_later, push_next=True), False, **loop,
                    alu_op=AluOp.SHR, use_imm=True, imm=6),
        ]
        # The last store's token tells FINISH that everything is in DRAM.
        stores.append(MemInsn(Opcode.STORE, Deps(pop_prev=True,
                                                 push_prev=reused_later or t == n_tiles - 1),
                              MemType.OUT, b * rows, out_base + t * rows, 1, rows, rows))
    rig.insns += loads + computes + stores + [FinishInsn(Deps(pop_next=True))]
    res = rig.run(finish=False)
    y = np.einsum("tnbk,ok->tnbo", x.astype(np.int64), w[0, 0].astype(np.int64)) >> 6
    got = rig.sim.dram[out_base * eb_out:(out_base + n_tiles * rows) * eb_out].view(np.int8)
    np.testing.assert_array_equal(got.reshape(y.shape), y.astype(np.int8))
    assert res.counters.load_insns == 1 + n_tiles      # WGT + one INP per tile
    assert res.counters.compute_insns == 1 + 3 * n_tiles + 1   # UOP load, FINISH
    assert res.counters.store_insns == n_tiles
    assert res.tokens_left == {}


def test_binary_stream_runs_like_the_dataclass_list():
    rig = Rig("pynq")
    rng = np.random.default_rng(10)
    a = rng.integers(-100, 100, (1, 4, 1, 16)).astype(np.int32)
    rig.load(MemType.ACC, 0, a)
    rig.load_uops([(0, 0, 0)])
    rig.insns.append(AluInsn(NO_DEPS, False, 0, 1, 4, 1, 1, 0, 1, 0, AluOp.ADD, True, -7))
    rig.insns.append(FinishInsn())
    data = encode_stream(rig.insns, layout_for(rig.cfg))
    res = rig.sim.run(data)
    np.testing.assert_array_equal(rig.sim.mem.acc[:4], a[0] - 7)
    assert res.instructions == len(rig.insns)


# ---- properties: vectorised simulator == per-micro-op reference ---------------------------------

@st.composite
def kernels(draw, depth=24):
    n_uops = draw(st.integers(1, 5))
    uops = [(draw(st.integers(0, depth - 1)), draw(st.integers(0, depth - 1)),
             draw(st.integers(0, 15))) for _ in range(n_uops)]
    loops = [draw(st.integers(0, 3)) for _ in range(2)] + [draw(st.integers(0, 4)) for _ in range(6)]
    return uops, loops


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cfg_name=st.sampled_from(CONFIGS), k=kernels(), reset=st.booleans(),
       seed=st.integers(0, 2**16))
def test_property_gemm_equals_reference_loop(cfg_name, k, reset, seed):
    uops, (io, ii, dfo, dfi, sfo, sfi, wfo, wfi) = k
    rig, _, inp, wgt, acc = _gemm_rig(cfg_name, seed, n_inp=64, n_wgt=48, n_acc=64)
    rig.load_uops(uops, sram_base=3)
    g = GemmInsn(NO_DEPS, reset, 3, 3 + len(uops), io, ii, dfo, dfi, sfo, sfi, wfo, wfi)
    rig.insns.append(g)
    res = rig.run()
    uop_mem = np.zeros((rig.cfg.uop_depth, 3), np.int64)
    uop_mem[3:3 + len(uops)] = uops
    np.testing.assert_array_equal(rig.sim.mem.acc[:64], ref_gemm(acc, inp, wgt, uop_mem, g))
    assert res.counters.gemm_counter == (0 if reset else io * ii * len(uops))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cfg_name=st.sampled_from(CONFIGS), k=kernels(), op=st.sampled_from(list(AluOp)),
       use_imm=st.booleans(), imm=st.integers(-40, 40), seed=st.integers(0, 2**16))
def test_property_alu_equals_reference_loop(cfg_name, k, op, use_imm, imm, seed):
    uops, (io, ii, dfo, dfi, sfo, sfi, _, _) = k
    rig = Rig(cfg_name)
    c, rng = rig.cfg, np.random.default_rng(seed)
    acc = rng.integers(-2**20, 2**20, (1, 64, c.batch, c.block_out)).astype(np.int32)
    if op is AluOp.SHR and not use_imm:
        acc = rng.integers(-40, 40, acc.shape).astype(np.int32)   # amounts of both signs
    rig.load(MemType.ACC, 0, acc)
    rig.load_uops(uops)
    a = AluInsn(NO_DEPS, False, 0, len(uops), io, ii, dfo, dfi, sfo, sfi, op, use_imm, imm)
    rig.insns.append(a)
    rig.run()
    uop_mem = np.zeros((c.uop_depth, 3), np.int64)
    uop_mem[:len(uops)] = uops
    np.testing.assert_array_equal(rig.sim.mem.acc[:64], ref_alu(acc[0], uop_mem, a))


# ---- the fast paths' fallbacks give the same answers -------------------------------------------

def _mixed_gemm_and_alu(cfg_name, seed):
    """A GEMM with repeated destinations and uneven contribution counts, then an ALU chain."""
    rig, rng, inp, wgt, acc = _gemm_rig(cfg_name, seed)
    uops = [(0, 1, 2), (0, 3, 2), (1, 5, 7), (2, 2, 9), (0, 6, 1), (5, 0, 0)]
    rig.load_uops(uops)
    g = GemmInsn(NO_DEPS, False, 0, len(uops), 3, 4, 6, 1, 9, 2, 3, 1)
    a = AluInsn(NO_DEPS, False, 0, 3, 4, 2, 1, 2, 3, 1, AluOp.ADD, False, 0)
    rig.insns += [g, a]
    rig.run()
    uop_mem = np.zeros((rig.cfg.uop_depth, 3), np.int64)
    uop_mem[:len(uops)] = uops
    want = ref_alu(ref_gemm(acc, inp, wgt, uop_mem, g), uop_mem, a)
    np.testing.assert_array_equal(rig.sim.mem.acc[:64], want)


@pytest.mark.parametrize("patch", ["dense_gemm", "hash_collisions", "tiny_chunks"])
def test_fallback_paths_match_the_reference(monkeypatch, patch):
    import retarget.targets.vta.sim.compute as compute
    if patch == "dense_gemm":
        monkeypatch.setattr(compute, "MAX_PADDING_WASTE", 0.0)       # always per-uop einsum
    elif patch == "hash_collisions":
        monkeypatch.setattr(compute, "_ROW_HASH", np.zeros_like(compute._ROW_HASH))
    else:
        monkeypatch.setattr(compute, "MAX_TRIPLES_PER_CHUNK", 7)     # split over y
    for cfg_name in CONFIGS:
        _mixed_gemm_and_alu(cfg_name, 11)


def test_plan_cache_sees_new_micro_ops_under_the_same_instruction():
    """The same GEMM word after a LOAD UOP changed the kernel must use the new micro-ops."""
    rig, rng, inp, wgt, acc = _gemm_rig("pynq", 12)
    g = GemmInsn(NO_DEPS, False, 0, 2, 2, 1, 2, 0, 1, 0, 0, 0)
    rig.load_uops([(0, 0, 0), (1, 1, 1)])
    rig.insns.append(g)
    rig.load_uops([(10, 4, 3), (11, 5, 2)])
    rig.insns.append(g)
    rig.run()
    first = np.zeros((rig.cfg.uop_depth, 3), np.int64)
    first[:2] = [(0, 0, 0), (1, 1, 1)]
    second = first.copy()
    second[:2] = [(10, 4, 3), (11, 5, 2)]
    want = ref_gemm(ref_gemm(acc, inp, wgt, first, g), inp, wgt, second, g)
    np.testing.assert_array_equal(rig.sim.mem.acc[:64], want)
    assert rig.sim.plans.misses == 2
