"""The VTA cycle model (targets/vta/timing.py) on hand-built streams with hand-computed cycle
counts, queue-depth stalls, deadlocks, a cross-check of its byte/MAC counters against the
behavioural simulator, and monotonicity properties.

The config used for hand counts has small, distinct timing numbers so that every term of every
formula shows up in the expected totals:
dma_latency=10, insn_overhead=1, gemm_pipeline=3, alu_ii=2, alu_pipeline=4, bus 8 B/cycle
(fetch: first instruction at cycle 10, then one every 16/8 = 2 cycles).
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from retarget.errors import TargetError
from retarget.targets.vta.config import preset
from retarget.targets.vta.isa import (NO_DEPS, AluInsn, AluOp, Deps, FinishInsn, GemmInsn,
                                      MemInsn, MemType, Opcode, encode_stream, layout_for)
from retarget.targets.vta.sim import Simulator
from retarget.targets.vta.sim.errors import DeadlockError, SimulationError
from retarget.targets.vta.timing import LayerSpan, insn_cost, simulate_timing

CFG = preset("pynq").with_(dma_latency=10, insn_overhead=1, gemm_pipeline=3, alu_ii=2,
                           alu_pipeline=4, name="hand")
FETCH0 = 10          # dispatch time of instruction 0
FETCH_II = 2         # cycles between dispatches


def load(mt=MemType.INP, y=2, x=4, deps=NO_DEPS, pads=(0, 0, 0, 0), sram=0):
    return MemInsn(Opcode.LOAD, deps, mt, sram, 0, y, x, x, *pads)


def store(y=2, x=4, deps=NO_DEPS):
    return MemInsn(Opcode.STORE, deps, MemType.OUT, 0, 0, y, x, x)


def gemm(iters=(3, 4), nuops=5, deps=NO_DEPS, reset=False):
    return GemmInsn(deps, reset, 0, nuops, iters[0], iters[1], 0, 0, 0, 0, 0, 0)


def alu(iters=(2, 3), nuops=2, deps=NO_DEPS):
    return AluInsn(deps, False, 0, nuops, iters[0], iters[1], 0, 0, 0, 0, AluOp.ADD, True, 1)


def finish(**deps):
    return FinishInsn(Deps(**deps))


# ---- single instructions -------------------------------------------------------------------

def test_single_load():
    # 2 rows of 4 INP elements of 16 B: 64 B per row = 8 beats; 1 + 10 + 16 = 27 cycles.
    r = simulate_timing([load(deps=Deps(push_next=True)), finish(pop_prev=True)], CFG)
    assert (r.start[0], r.end[0]) == (FETCH0, FETCH0 + 27)
    assert r.total_cycles == FETCH0 + 27 + 1          # FINISH: its overhead
    assert r.busy == {"load": 27, "compute": 1, "store": 0}
    assert r.bytes["inp"] == 128 and r.gemm_cycles == 0


def test_single_gemm_and_reset():
    # 3 x 4 iterations x 5 uops = 60 cycles at II=1, + 3 pipeline + 1 overhead.
    r = simulate_timing([gemm(), finish()], CFG)
    assert r.end[0] - r.start[0] == 64
    assert r.total_cycles == FETCH0 + 64 + 1
    assert r.gemm_cycles == 60 and r.macs == 60 * 16 * 16
    assert r.utilisation == pytest.approx(60 / (FETCH0 + 65))
    # A reset takes the same time but is not multiply work.
    rr = simulate_timing([gemm(reset=True), finish()], CFG)
    assert rr.total_cycles == r.total_cycles and rr.gemm_cycles == 0 and rr.macs == 0
    assert (r.reset_cycles, rr.reset_cycles) == (0, 60)


def test_single_alu():
    # 2 x 3 x 2 uops = 12 issues at II=2 + 4 pipeline + 1 overhead.
    r = simulate_timing([alu(), finish()], CFG)
    assert r.end[0] - r.start[0] == 12 * 2 + 4 + 1
    assert r.alu_cycles == 24


def test_padded_load_costs_one_cycle_per_pad_element():
    # y_pad 1/0, x_pad 1/1, 2 x 4 data: rows of 6, 3 rows = 18 written, 10 of them padding.
    ins = load(pads=(1, 0, 1, 1))
    assert insn_cost(CFG, ins).isolated_cycles == 1 + 10 + 16 + 10
    r = simulate_timing([ins, finish()], CFG)
    assert r.end[0] - r.start[0] == 37
    assert r.bytes["inp"] == 128              # padding is not DRAM traffic


def test_rows_round_up_to_bus_beats_and_acc8_uses_int8_elements():
    # WGT rows of 3 x 256 B = 96 beats; ACC_8BIT elements are 16 B in DRAM (int8).
    assert insn_cost(CFG, load(MemType.WGT, y=1, x=3)).beats == 96
    assert insn_cost(CFG, load(MemType.ACC_8BIT, y=2, x=1)).beats == 4
    assert insn_cost(CFG, load(MemType.ACC, y=2, x=1)).beats == 16
    # a config with a 128-bit bus halves the beats
    wide = CFG.with_(bus_bytes=16)
    assert insn_cost(wide, load(MemType.WGT, y=1, x=3)).beats == 48


def test_token_carrier_costs_only_overhead():
    r = simulate_timing([load(y=0, x=0, deps=Deps(push_next=True)), finish(pop_prev=True)], CFG)
    assert r.end[0] - r.start[0] == 1 and r.bytes["inp"] == 0


# ---- concurrency, tokens, queues ------------------------------------------------------------

def test_dependency_chain_serialises():
    """LOAD -> GEMM -> STORE -> FINISH through l2g, g2s, s2g: each starts when the previous
    ends, so the total is the sum of the isolated latencies."""
    ins = [load(deps=Deps(push_next=True)),
           gemm(deps=Deps(pop_prev=True, push_next=True)),
           store(deps=Deps(pop_prev=True, push_prev=True)),
           finish(pop_next=True)]
    r = simulate_timing(ins, CFG)
    assert list(r.start[1:]) == list(r.end[:-1])
    # LOAD 27, GEMM 64, STORE 1 + 10 + 2 rows x (4 x 16 B / 8) = 27, FINISH 1.
    assert r.total_cycles == FETCH0 + 27 + 64 + 27 + 1


def test_independent_modules_overlap():
    """Without tokens the LOAD and the GEMM run at the same time."""
    r = simulate_timing([load(), gemm(), finish()], CFG)
    assert r.start[1] == FETCH0 + FETCH_II and r.start[0] == FETCH0
    assert r.total_cycles == max(r.end[0], r.end[1]) + 1


def tiles_stream(n_tiles: int, contexts: int, load_rows: int = 2):
    """n tiles of (LOAD inp -> GEMM), the loads of tile t reusing SRAM context t % contexts:
    RAW l2g from each load to its GEMM, WAR g2l from each GEMM to the load that next reuses its
    context. contexts=1 is one thread; 2 is two virtual threads interleaved."""
    ins = []
    for t in range(n_tiles):
        ins.append(load(y=load_rows, deps=Deps(pop_next=t >= contexts, push_next=True)))
        ins.append(gemm(iters=(4, 4), nuops=4,
                        deps=Deps(pop_prev=True, push_prev=t + contexts < n_tiles)))
    ins.append(finish())
    return ins


def test_two_virtual_threads_hide_load_latency():
    n = 6
    one = simulate_timing(tiles_stream(n, 1), CFG)
    two = simulate_timing(tiles_stream(n, 2), CFG)
    L = 1 + 10 + 2 * 8           # 27
    G = 1 + 64 + 3               # 68
    # One context: LOAD and GEMM strictly alternate.
    assert one.total_cycles == FETCH0 + n * (L + G) + 1
    # Two contexts: after the first LOAD the GEMMs run back to back (G > L), loads hidden.
    assert two.total_cycles == FETCH0 + L + n * G + 1
    assert two.utilisation > one.utilisation
    assert one.gemm_cycles == two.gemm_cycles == n * 64


def test_shared_bus_serialises_concurrent_dma():
    """A LOAD (load module) and a STORE (store module) with no tokens between them start
    together but share the bus: the later request's data waits for the earlier one's."""
    r = simulate_timing([load(y=4), store(y=4), finish()], CFG)
    beats = 4 * 8
    assert r.start[1] == r.start[0] + FETCH_II
    assert r.end[0] == r.start[0] + 1 + 10 + beats
    assert r.end[1] == r.end[0] + beats          # its data phase starts when the bus frees
    assert r.end[1] - r.start[1] > insn_cost(CFG, store(y=4)).isolated_cycles


def test_command_queue_depth_stalls_fetch():
    """Three long GEMMs then a LOAD. With a 1-deep compute queue, GEMM 1 waits in the queue
    while GEMM 0 runs, so the fetch stage cannot place GEMM 2 until GEMM 1 starts (when GEMM 0
    ends) and the LOAD behind it is dispatched only then; with depth 8 it starts at once."""
    ins = [gemm(), gemm(), gemm(), load(), finish()]
    deep = simulate_timing(ins, CFG)
    assert deep.start[3] == FETCH0 + 3 * FETCH_II
    shallow = simulate_timing(ins, CFG.with_(cmd_queue_depth=1))
    assert shallow.dispatch[1] == FETCH0 + FETCH_II        # the slot freed when GEMM 0 started
    assert shallow.dispatch[2] == shallow.start[1] == shallow.end[0]
    assert shallow.start[3] == shallow.dispatch[3] == shallow.end[0] + FETCH_II
    assert shallow.total_cycles == deep.total_cycles       # the GEMMs were the critical path


def test_command_queue_deadlock():
    """The load queue fills with a LOAD waiting on a token whose producer comes later in the
    stream: with depth 1 the fetch stage never reaches the producer (real hardware hangs);
    with depth 8 the stream runs."""
    ins = [load(deps=Deps(pop_next=True)), load(), gemm(deps=Deps(push_prev=True)), finish()]
    assert simulate_timing(ins, CFG).total_cycles > 0
    with pytest.raises(DeadlockError, match="command queue is full") as e:
        simulate_timing(ins, CFG.with_(cmd_queue_depth=1))
    assert ("load", 0) in [(m, i) for m, i, _, _ in e.value.blocked]


def test_token_deadlock_names_blocked_instructions():
    ins = [load(deps=Deps(pop_next=True, push_next=True)), gemm(deps=Deps(pop_prev=True)),
           finish()]
    with pytest.raises(DeadlockError) as e:
        simulate_timing(ins, CFG)
    msg = str(e.value)
    assert "instruction #0" in msg and "g2l" in msg and "load module" in msg
    assert e.value.blocked[0][:2] == ("load", 0)
    # the behavioural simulator agrees that this stream deadlocks
    with pytest.raises(DeadlockError):
        Simulator(CFG, dram_bytes=1 << 16).run(ins)


def test_finish_waits_for_everything():
    r = simulate_timing([load(y=8), finish()], CFG)    # no tokens between them
    assert r.start[1] == r.end[0]


def test_malformed_streams():
    with pytest.raises(SimulationError, match="missing FINISH"):
        simulate_timing([gemm()], CFG)
    with pytest.raises(SimulationError, match="follow it"):
        simulate_timing([finish(), gemm()], CFG)
    with pytest.raises(SimulationError, match="no previous stage"):
        simulate_timing([load(deps=Deps(pop_prev=True)), finish()], CFG)
    with pytest.raises(SimulationError, match="non-negative"):
        simulate_timing([gemm(iters=(-1, 2)), finish()], CFG)
    with pytest.raises(TargetError, match="VTAConfig"):
        simulate_timing([finish()])


def test_bytes_input_matches_dataclasses():
    ins = tiles_stream(3, 2)
    a = simulate_timing(ins, CFG)
    b = simulate_timing(encode_stream(ins, layout_for(CFG)), CFG)
    assert a.total_cycles == b.total_cycles and np.array_equal(a.end, b.end)


# ---- layers and the builder ------------------------------------------------------------------

def test_counters_match_behavioural_simulator(blocked_gemm_stream):
    prog = blocked_gemm_stream(preset("pynq"))
    r = simulate_timing(prog)
    sim = Simulator(prog.config, dram_bytes=prog.dram_bytes)
    sim.dram[:] = prog.dram_image()
    c = sim.run(prog.insns).counters
    assert r.bytes == {"inp": c.inp_load_nbytes, "wgt": c.wgt_load_nbytes,
                       "acc": c.acc_load_nbytes, "uop": c.uop_load_nbytes,
                       "out": c.out_store_nbytes}
    assert r.gemm_cycles == c.gemm_counter
    assert r.alu_cycles == c.alu_counter * prog.config.alu_ii


def test_layers_aggregate_to_totals(blocked_gemm_stream):
    prog = blocked_gemm_stream(CFG, tiles=4)
    n = len(prog.insns)
    half = n // 2
    r = simulate_timing(prog, layers=[("a", 0, half), LayerSpan("b", half, n)])
    a, b = r.layer("a"), r.layer("b")
    assert a.gemm_cycles + b.gemm_cycles == r.gemm_cycles
    assert {k: a.bytes[k] + b.bytes[k] for k in a.bytes} == r.bytes
    assert {k: a.busy[k] + b.busy[k] for k in a.busy} == r.busy
    assert b.end_cycle == r.total_cycles and a.start_cycle == r.start.min()
    # one name per instruction gives the same spans
    names = ["a"] * half + ["b"] * (n - half)
    r2 = simulate_timing(prog, layers=names)
    assert [(x.name, x.first, x.stop) for x in r2.layers] == [("a", 0, half), ("b", half, n)]
    with pytest.raises(TargetError, match="one name"):
        simulate_timing(prog, layers=["a"])
    with pytest.raises(TargetError, match="non-empty range"):
        simulate_timing(prog, layers=[("a", 3, 3)])


def test_program_two_vthreads_faster_than_one(blocked_gemm_stream):
    cfg = preset("pynq")
    one = simulate_timing(blocked_gemm_stream(cfg, tiles=8, vthreads=1))
    two = simulate_timing(blocked_gemm_stream(cfg, tiles=8, vthreads=2))
    assert two.total_cycles < one.total_cycles


# ---- properties ------------------------------------------------------------------------------

@st.composite
def chain_streams(draw):
    """Random tile streams (1 or 2 contexts) with random load/store sizes and GEMM extents."""
    n = draw(st.integers(1, 5))
    ctx = draw(st.integers(1, 2))
    ins = []
    for t in range(n):
        ins.append(load(y=draw(st.integers(1, 4)), x=draw(st.integers(1, 6)),
                        deps=Deps(pop_next=t >= ctx, push_next=True)))
        ins.append(gemm(iters=(draw(st.integers(1, 4)), draw(st.integers(1, 4))),
                        nuops=draw(st.integers(1, 4)),
                        deps=Deps(pop_prev=True, push_prev=t + ctx < n, push_next=True)))
        ins.append(store(y=1, x=draw(st.integers(1, 4)), deps=Deps(pop_prev=True)))
    ins.append(finish())
    return ins


def _grow(insn, extra_rows):
    from dataclasses import replace
    return replace(insn, y_size=insn.y_size + extra_rows)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chain_streams(), st.data())
def test_more_bytes_never_fewer_cycles(ins, data):
    base = simulate_timing(ins, CFG)
    mem = [i for i, x in enumerate(ins) if isinstance(x, MemInsn)]
    k = data.draw(st.sampled_from(mem))
    grown = list(ins)
    grown[k] = _grow(ins[k], data.draw(st.integers(1, 3)))
    r = simulate_timing(grown, CFG)
    assert r.total_cycles >= base.total_cycles
    assert sum(r.bytes.values()) > sum(base.bytes.values())


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chain_streams(), st.sampled_from(["dma_latency", "insn_overhead", "gemm_pipeline"]),
       st.integers(1, 20))
def test_slower_hardware_never_fewer_cycles(ins, knob, extra):
    base = simulate_timing(ins, CFG)
    slow = simulate_timing(ins, CFG.with_(**{knob: getattr(CFG, knob) + extra}))
    assert slow.total_cycles >= base.total_cycles


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chain_streams())
def test_schedule_invariants(ins):
    r = simulate_timing(ins, CFG)
    for m in range(3):
        idx = np.flatnonzero(r.module == m)
        # in order, one at a time, never before dispatch
        assert np.all(r.start[idx][1:] >= r.end[idx][:-1])
        assert np.all(r.start[idx] >= r.dispatch[idx])
    assert r.gemm_cycles <= r.total_cycles
    # the shared bus caps traffic: bytes moved never exceed bus_bytes per cycle
    assert sum(r.bytes.values()) <= r.total_cycles * CFG.bus_bytes
