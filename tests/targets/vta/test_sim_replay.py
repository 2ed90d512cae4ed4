"""The simulator's replay of a stream it ran before (sim/replay.py) and its float32 GEMM: every
replayed run must equal a fresh, fully checked run of the same stream on the same DRAM."""
from __future__ import annotations

import numpy as np
import pytest

from retarget.device.allocator import Allocation
from retarget.device.base import TaskMemory
from retarget.targets.vta.isa import (NO_DEPS, AluInsn, AluOp, FinishInsn, GemmInsn, MemInsn,
                                      MemType, Opcode, encode_stream, layout_for)
from retarget.targets.vta.sim import Simulator, SimulationError
from retarget.targets.vta.sim import compute

from .test_sim import Rig, rand_int8, wrap32

K, N = 4, 2   # input blocks reduced, output blocks


def gemm_rig(cfg_name: str = "pynq", seed: int = 0):
    """acc[j] = sum_k inp[k] . wgt[j*K + k]^T, then >> 3, stored to DRAM: a stream whose input
    data, micro-ops and output all live in DRAM. Returns (rig, stream bytes, addresses)."""
    rig = Rig(cfg_name)
    c, rng = rig.cfg, np.random.default_rng(seed)
    uops = [(j, 0, 0) for j in range(N)]                                  # reset, 0..N-1
    uops += [(j, k, j * K + k) for j in range(N) for k in range(K)]       # mac, N..N+N*K-1
    uops += [(0, 0, 0)]                                                   # alu
    rig.load_uops(np.array(uops))
    uop_insn = rig.insns[-1]
    inp = rig.load(MemType.INP, 0, rand_int8(rng, (1, K, c.batch, c.block_in)))
    rig.load(MemType.WGT, 0, rand_int8(rng, (1, N * K, c.block_out, c.block_in)))
    mac_end = N + N * K
    rig.insns.append(GemmInsn(NO_DEPS, True, 0, N, 1, 1, 0, 0, 0, 0, 0, 0))
    rig.insns.append(GemmInsn(NO_DEPS, False, N, mac_end, 1, 1, 0, 0, 0, 0, 0, 0))
    rig.insns.append(AluInsn(NO_DEPS, False, mac_end, mac_end + 1, N, 1, 1, 0, 1, 0,
                             AluOp.SHR, True, 3))
    out = rig.reserve(N * c.out_elem_bytes, c.out_elem_bytes)
    rig.insns.append(MemInsn(Opcode.STORE, NO_DEPS, MemType.OUT, 0, out, 1, N, N, 0, 0, 0, 0))
    rig.insns.append(FinishInsn())
    stream = encode_stream(rig.insns, layout_for(c))
    return rig, stream, {"inp": inp.dram_base * c.inp_elem_bytes, "out": out * c.out_elem_bytes,
                         "uop": uop_insn.dram_base * 4}


def fresh_run(rig, stream):
    """The same stream on a new simulator over a copy of the DRAM: the checked path."""
    sim = Simulator(rig.cfg, dram=rig.sim.dram.copy())
    sim.run(stream)
    return sim


@pytest.mark.parametrize("cfg_name", ["pynq", "2x16"])
def test_replay_follows_new_input_data(cfg_name):
    rig, stream, at = gemm_rig(cfg_name)
    rng = np.random.default_rng(5)
    for _ in range(3):
        expect = fresh_run(rig, stream)
        result = rig.sim.run(stream)
        assert np.array_equal(rig.sim.dram, expect.dram)
        assert np.array_equal(rig.sim.mem.acc, expect.mem.acc)
        assert result.counters == expect.totals
        # new input data in DRAM for the next run
        n = K * rig.cfg.inp_elem_bytes
        rig.sim.dram[at["inp"]:at["inp"] + n] = rng.integers(0, 256, n, dtype=np.uint8)
    assert len(rig.sim._replays) == 1


def test_replay_replans_when_micro_ops_change():
    rig, stream, at = gemm_rig()
    rig.sim.run(stream)
    # Point every MAC micro-op at weight block 0: the recorded plan no longer applies.
    words = rig.sim.dram[at["uop"]:at["uop"] + 4 * (N + N * K + 1)].view("<u4")
    wgt_field = layout_for(rig.cfg).uop[2]
    words[N:N + N * K] &= np.uint32(~(wgt_field.max << wgt_field.lo) & 0xFFFFFFFF)
    expect = fresh_run(rig, stream)
    rig.sim.run(stream)
    assert np.array_equal(rig.sim.dram, expect.dram)
    assert np.array_equal(rig.sim.mem.acc, expect.mem.acc)


def test_replay_refuses_what_confinement_forbids():
    rig, stream, at = gemm_rig()
    rig.sim.run(stream)
    # A task given every byte but the output's: the replay must not run, and the checked path
    # stops at the STORE (instruction #6) naming the confinement.
    everything_but_out = (Allocation(0, at["out"], at["out"]),)
    rig.sim.mem.confine = TaskMemory(everything_but_out, lambda a: "outside")
    before = rig.sim.dram.copy()
    with pytest.raises(SimulationError, match=r"#6 .*memory confinement"):
        rig.sim.run(stream)
    assert np.array_equal(rig.sim.dram[at["out"]:], before[at["out"]:])
    rig.sim.mem.confine = TaskMemory((Allocation(0, rig.sim.dram.size, rig.sim.dram.size),),
                                     lambda a: "")
    rig.sim.run(stream)


def long_reduction_rig(r: int, rows: int):
    """acc[y] = sum over r micro-ops of inp[u] . wgt[u]^T for y < rows: with inputs and weights
    in [-128, -100] every product is near +2^14 (and odd ones are common), so the sums pass 2^24
    once r * BLOCK_IN exceeds ~1300 and float32 could no longer hold them exactly."""
    rig = Rig("pynq")
    c, rng = rig.cfg, np.random.default_rng(3)
    rig.load_uops(np.array([(0, u, u) for u in range(r)]))
    x = rng.integers(-128, -99, size=(1, r * rows, c.batch, c.block_in)).astype(np.int8)
    rig.load(MemType.INP, 0, x)
    w = rng.integers(-128, -99, size=(1, r, c.block_out, c.block_in)).astype(np.int8)
    rig.load(MemType.WGT, 0, w)
    rig.insns.append(GemmInsn(NO_DEPS, False, 0, r, rows, 1, 1, 0, r, 0, 0, 0))
    expect = wrap32(np.einsum("yubk,uok->ybo", x[0].reshape(rows, r, c.batch, c.block_in)
                              .astype(np.int64), w[0].astype(np.int64)))
    return rig, expect


def test_long_reductions_stay_exact():
    r = 2 * compute.EXACT_TERMS // 16       # 2048 products per output lane
    rig, expect = long_reduction_rig(r, rows=16)
    assert np.abs(expect).max() > 1 << 24
    rig.run()
    assert np.array_equal(rig.sim.mem.acc[:16].astype(np.int64), expect)


def test_unsplit_float32_would_round(monkeypatch):
    """The split is what keeps the long reduction exact: without it float32 rounds."""
    monkeypatch.setattr(compute, "EXACT_TERMS", 1 << 30)
    rig, expect = long_reduction_rig(2 * 1024 // 16, rows=16)
    rig.run()
    assert not np.array_equal(rig.sim.mem.acc[:16].astype(np.int64), expect)
