"""Malformed VTA streams: each gives a clear error naming the instruction, never a hang or a
bare NumPy traceback."""
from __future__ import annotations

import numpy as np
import pytest

from retarget.errors import DeviceError
from retarget.targets.vta.config import preset
from retarget.targets.vta.isa import (NO_DEPS, AluInsn, AluOp, Deps, FinishInsn, GemmInsn,
                                      MemInsn, MemType, Opcode, encode_stream, encode_uop_arrays,
                                      layout_for)
from retarget.targets.vta.sim import DeadlockError, SimulationError, Simulator

CONFIGS = ["pynq", "1x32", "2x16"]
DRAM = 1 << 20


def sim_for(cfg_name):
    return Simulator(preset(cfg_name), dram_bytes=DRAM)


def uop_load(sim, uops, sram_base=0, dram_elem=0):
    """Write micro-op words at DRAM element `dram_elem` (4 B each); the LOAD UOP for them."""
    u = np.asarray(uops, np.int64).reshape(-1, 3)
    words = encode_uop_arrays(u[:, 0], u[:, 1], u[:, 2], layout_for(sim.cfg))
    sim.dram[dram_elem * 4:(dram_elem + len(u)) * 4] = words.view(np.uint8)
    return MemInsn(Opcode.LOAD, NO_DEPS, MemType.UOP, sram_base, dram_elem, 1, len(u), len(u))


def gemm(bgn, end, io=1, ii=1, f=(0, 0, 0, 0, 0, 0), deps=NO_DEPS, reset=False):
    return GemmInsn(deps, reset, bgn, end, io, ii, *f)


def expect(sim, stream, cls, *fragments):
    with pytest.raises(cls) as info:
        sim.run(stream)
    msg = str(info.value)
    for frag in fragments:
        assert frag in msg, f"{frag!r} not in {msg!r}"
    assert isinstance(info.value, DeviceError)
    return info.value


# ---- unknown opcode / malformed objects ---------------------------------------------------------

@pytest.mark.parametrize("cfg_name", CONFIGS)
def test_unknown_opcode_in_a_binary_stream(cfg_name):
    sim = sim_for(cfg_name)
    insns = [uop_load(sim, [(0, 0, 0)]), gemm(0, 1), gemm(0, 1), FinishInsn()]
    data = bytearray(encode_stream(insns, layout_for(sim.cfg)))
    data[2 * 16] |= 0b111          # opcode bits of instruction 2 -> 7
    err = expect(sim, bytes(data), SimulationError, "instruction 2", "unknown opcode 7")
    assert err.index == 2


def test_unknown_instruction_object_and_truncated_stream():
    sim = sim_for("pynq")
    expect(sim, [FinishInsn(), "GEMM"], SimulationError, "instruction #1", "unknown opcode")
    expect(sim, bytes(40), SimulationError, "40 bytes", "16-byte")


def test_load_of_out_buffer_and_store_of_non_out():
    sim = sim_for("pynq")
    bad_load = MemInsn(Opcode.LOAD, NO_DEPS, MemType.OUT, 0, 0, 1, 1, 1)
    expect(sim, [bad_load, FinishInsn()], SimulationError, "instruction #0", "LOAD OUT")
    bad_store = MemInsn(Opcode.STORE, NO_DEPS, MemType.ACC, 0, 0, 1, 1, 1)
    expect(sim, [bad_store, FinishInsn()], SimulationError, "instruction #0",
           "only the OUT buffer")
    padded = MemInsn(Opcode.STORE, NO_DEPS, MemType.OUT, 0, 0, 1, 1, 1, 1, 0, 0, 0)
    expect(sim, [padded, FinishInsn()], SimulationError, "instruction #0", "padding")


def test_negative_field_and_bad_alu_fields():
    sim = sim_for("pynq")
    expect(sim, [gemm(0, 1, io=-1), FinishInsn()], SimulationError, "instruction #0",
           "iter_out=-1")
    u = uop_load(sim, [(0, 0, 0)])
    reset_alu = AluInsn(NO_DEPS, True, 0, 1, 1, 1, 0, 0, 0, 0, AluOp.ADD, True, 1)
    expect(sim, [u, reset_alu, FinishInsn()], SimulationError, "instruction #1", "reset")
    big_imm = AluInsn(NO_DEPS, False, 0, 1, 1, 1, 0, 0, 0, 0, AluOp.ADD, True, 40000)
    expect(sim, [u, big_imm, FinishInsn()], SimulationError, "instruction #1", "imm 40000")
    bad_op = AluInsn(NO_DEPS, False, 0, 1, 1, 1, 0, 0, 0, 0, 7, True, 1)
    expect(sim, [u, bad_op, FinishInsn()], SimulationError, "instruction #1",
           "unknown ALU opcode 7")


# ---- SRAM index out of range ---------------------------------------------------------------------

@pytest.mark.parametrize("cfg_name", CONFIGS)
def test_gemm_index_out_of_range_names_the_iteration(cfg_name):
    sim = sim_for(cfg_name)
    depth = sim.cfg.acc_depth
    # dst = 5 + y * (depth // 4): y = 4 reaches depth + 5.
    stream = [uop_load(sim, [(5, 0, 0)]), gemm(0, 1, io=6, f=(depth // 4, 0, 0, 0, 0, 0)),
              FinishInsn()]
    err = expect(sim, stream, SimulationError, "instruction #1", "GEMM",
                 "acc SRAM index out of range", f"index {depth + 5}", f"depth {depth}",
                 "y=4, x=0, uop 0", "dst_idx=5")
    assert err.index == 1


@pytest.mark.parametrize("cfg_name", CONFIGS)
def test_inp_wgt_and_alu_src_out_of_range(cfg_name):
    sim = sim_for(cfg_name)
    c = sim.cfg
    expect(sim, [uop_load(sim, [(0, c.inp_depth - 1, 0)]), gemm(0, 1, ii=2, f=(0, 0, 0, 1, 0, 0)),
                 FinishInsn()], SimulationError, "instruction #1", "inp SRAM index out of range",
           f"index {c.inp_depth}", "x=1")
    expect(sim, [uop_load(sim, [(0, 0, c.wgt_depth - 2)]), gemm(0, 1, io=3, f=(0, 0, 0, 0, 1, 0)),
                 FinishInsn()], SimulationError, "instruction #1", "wgt SRAM index out of range",
           "y=2")
    alu = AluInsn(NO_DEPS, False, 0, 1, 2, 1, 0, 0, c.acc_depth, 0, AluOp.MAX, False, 0)
    expect(sim, [uop_load(sim, [(0, 1, 0)]), alu, FinishInsn()], SimulationError,
           "instruction #1", "ALU", "acc SRAM index out of range", "src_idx=1")


@pytest.mark.parametrize("cfg_name", CONFIGS)
def test_load_store_and_uop_range_out_of_sram(cfg_name):
    sim = sim_for(cfg_name)
    c = sim.cfg
    load = MemInsn(Opcode.LOAD, NO_DEPS, MemType.INP, c.inp_depth - 4, 0, 2, 2, 2, 1, 0, 0, 0)
    expect(sim, [load, FinishInsn()], SimulationError, "instruction #0", "LOAD INP",
           "inp SRAM index out of range", f"depth {c.inp_depth}")
    store = MemInsn(Opcode.STORE, NO_DEPS, MemType.OUT, c.acc_depth - 1, 0, 1, 2, 2)
    expect(sim, [store, FinishInsn()], SimulationError, "instruction #0", "STORE",
           "out SRAM index out of range")
    expect(sim, [gemm(c.uop_depth - 1, c.uop_depth + 1), FinishInsn()], SimulationError,
           "instruction #0", "uop SRAM index out of range")
    uops_too_far = MemInsn(Opcode.LOAD, NO_DEPS, MemType.UOP, c.uop_depth - 1, 0, 1, 2, 2)
    expect(sim, [uops_too_far, FinishInsn()], SimulationError, "uop SRAM index out of range")


# ---- DRAM address outside memory -----------------------------------------------------------------

@pytest.mark.parametrize("cfg_name", CONFIGS)
def test_dram_address_outside_memory(cfg_name):
    sim = sim_for(cfg_name)
    c = sim.cfg
    last_row = DRAM // c.inp_elem_bytes - 3
    load = MemInsn(Opcode.LOAD, NO_DEPS, MemType.INP, 0, last_row, 2, 2, 8)  # row 2 overruns
    expect(sim, [FinishInsn(Deps()), load][::-1], SimulationError, "instruction #0",
           "DRAM address outside memory", f"{DRAM} bytes")
    store = MemInsn(Opcode.STORE, NO_DEPS, MemType.OUT, 0, DRAM // c.out_elem_bytes, 1, 1, 1)
    expect(sim, [gemm(0, 0), store, FinishInsn()], SimulationError, "instruction #1", "STORE",
           "DRAM address outside memory")


# ---- missing FINISH, deadlock, FINISH too early ---------------------------------------------------

def test_missing_finish():
    sim = sim_for("pynq")
    expect(sim, [uop_load(sim, [(0, 0, 0)]), gemm(0, 1)], SimulationError, "missing FINISH",
           "instruction #1")
    expect(sim, [], SimulationError, "missing FINISH")


@pytest.mark.parametrize("cfg_name", CONFIGS)
def test_token_deadlock_is_reported_not_a_hang(cfg_name):
    sim = sim_for(cfg_name)
    # Compute waits for a load token nobody pushes; the load waits for a compute token that
    # only the blocked compute instruction would push.
    load = MemInsn(Opcode.LOAD, Deps(pop_next=True, push_next=True), MemType.INP, 0, 0, 1, 1, 1)
    g = gemm(0, 0, deps=Deps(pop_prev=True, push_prev=True))
    store = MemInsn(Opcode.STORE, Deps(pop_prev=True), MemType.OUT, 0, 0, 1, 1, 1)
    err = expect(sim, [load, g, store, FinishInsn()], DeadlockError, "deadlock",
                 "load module blocked at instruction #0", "waiting on g2l",
                 "compute module blocked at instruction #1", "waiting on l2g",
                 "store module blocked at instruction #2", "waiting on g2s")
    assert [(m, i, q) for m, i, _, q in err.blocked] == [
        ("load", 0, ("g2l",)), ("compute", 1, ("l2g",)), ("store", 2, ("g2s",))]
    assert err.queues == {"l2g": 0, "g2l": 0, "g2s": 0, "s2g": 0}


def test_deadlock_after_progress_and_flags_a_module_cannot_have():
    sim = sim_for("pynq")
    push = gemm(0, 0, deps=Deps(push_next=True))
    store = MemInsn(Opcode.STORE, Deps(pop_prev=True), MemType.OUT, 0, 0, 1, 1, 1)
    store2 = MemInsn(Opcode.STORE, Deps(pop_prev=True), MemType.OUT, 0, 0, 1, 1, 1)
    fin = FinishInsn(Deps(pop_next=True))  # waits on s2g, never pushed
    err = expect(sim, [push, store, store2, fin], DeadlockError, "after 2 instruction(s)",
                 "store module blocked at instruction #2", "compute module blocked at "
                 "instruction #3", "waiting on s2g")
    assert err.index == 3 or err.index == 2
    bad = MemInsn(Opcode.LOAD, Deps(pop_prev=True), MemType.WGT, 0, 0, 1, 1, 1)
    expect(sim, [bad, FinishInsn()], SimulationError, "instruction #0", "pop_prev",
           "load module has no previous stage")


def test_finish_before_pending_instructions_is_an_error():
    sim = sim_for("pynq")
    store = MemInsn(Opcode.STORE, Deps(pop_prev=True), MemType.OUT, 0, 0, 1, 1, 1)
    # The store waits for a compute token; FINISH (earlier) can run at once and ends the run.
    expect(sim, [FinishInsn(), gemm(0, 0, deps=Deps(push_next=True)), store], SimulationError,
           "instruction #0 (FINISH", "had not run", "instruction #1", "instruction #2")
