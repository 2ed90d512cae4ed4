"""The instruction-stream builder: dependency flags, token carriers, the micro-op kernel cache,
DRAM layout and Program I/O; the packing helpers; the disassembler and its command."""
import argparse

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from retarget.errors import InputError, TargetError
from retarget.targets.vta.builder import Program, StreamBuilder, UopLoop
from retarget.targets.vta.config import VTAConfig, preset
from retarget.targets.vta.disasm import disassemble, format_insn
from retarget.targets.vta.isa import (AluOp, Deps, FinishInsn, GemmInsn, IsaError, MemInsn,
                                      MemType, Opcode, decode_uops, layout_for)
from retarget.targets.vta.layout import (pack_matrix, pack_nchw, pack_oihw, unpack_matrix,
                                         unpack_nchw)

LOAD, COMPUTE, STORE = 1, 2, 3


def is_noop(insn, opcode, mtype):
    return (isinstance(insn, MemInsn) and insn.opcode is opcode and insn.memory_type is mtype
            and insn.x_size == 0)


def small_builder():
    b = StreamBuilder(preset("pynq"))
    b.alloc("x", (4, 16), "int8")
    b.alloc("y", (4, 16), "int8")
    return b


# ---- dependency flags and token carriers ---------------------------------------------------

def test_push_sets_flag_on_last_insn_of_stage():
    b = small_builder()
    b.load_2d(MemType.INP, 0, "x", 0, 4, 1, 4)
    b.dep_push(LOAD, COMPUTE)
    assert b.insns[-1].deps == Deps(push_next=True) and len(b.insns) == 1
    # a second push of the same kind cannot share the instruction: a LOAD INP no-op carries it
    b.dep_push(LOAD, COMPUTE)
    assert len(b.insns) == 2 and is_noop(b.insns[1], Opcode.LOAD, MemType.INP)
    assert b.insns[1].deps == Deps(push_next=True)
    assert b.stats["token_noops"] == 1


def test_push_from_other_stage_needs_carrier():
    b = small_builder()
    b.load_2d(MemType.INP, 0, "x", 0, 4, 1, 4)
    b.dep_push(COMPUTE, STORE)     # last insn is a load: compute needs its own carrier
    assert is_noop(b.insns[-1], Opcode.LOAD, MemType.UOP)
    assert b.insns[-1].deps == Deps(push_next=True)
    b.dep_push(STORE, COMPUTE)
    assert is_noop(b.insns[-1], Opcode.STORE, MemType.OUT)
    assert b.insns[-1].deps == Deps(push_prev=True)
    b.dep_push(COMPUTE, LOAD)      # compute -> load is push_prev of the compute module
    assert is_noop(b.insns[-1], Opcode.LOAD, MemType.UOP)
    assert b.insns[-1].deps == Deps(push_prev=True)


def test_pop_attaches_to_next_insn_of_stage():
    b = small_builder()
    b.dep_pop(LOAD, COMPUTE)
    b.dep_pop(STORE, COMPUTE)
    b.load_2d(MemType.INP, 0, "x", 0, 4, 1, 4)           # a load-stage insn: no pops
    assert b.insns[-1].deps == Deps()
    k = b.uop_kernel([(0, 0, 0)])
    b.gemm(k, reset=True)                                # LOAD UOP then GEMM, both compute
    assert b.insns[1].memory_type is MemType.UOP
    assert b.insns[1].deps == Deps(pop_prev=True, pop_next=True)
    assert b.insns[2].deps == Deps()


def test_double_pop_flushes_first_as_noop():
    b = small_builder()
    b.dep_pop(COMPUTE, LOAD)
    b.dep_pop(COMPUTE, LOAD)
    b.load_2d(MemType.WGT, 0, b.alloc("w", (1, 16, 16)), 0, 1, 1, 1)
    assert is_noop(b.insns[0], Opcode.LOAD, MemType.INP)
    assert b.insns[0].deps == Deps(pop_next=True)
    assert b.insns[1].deps == Deps(pop_next=True)


def test_push_commits_pending_pop_first():
    b = small_builder()
    b.store_2d(0, "y", 0, 4, 1, 4)
    b.dep_pop(COMPUTE, STORE)
    b.dep_push(STORE, COMPUTE)     # pop must come before the push: a carrier with both
    assert len(b.insns) == 2
    assert b.insns[1].deps == Deps(pop_prev=True, push_prev=True)


def test_bad_stage_pairs():
    b = small_builder()
    with pytest.raises(TargetError, match="adjacent stages"):
        b.dep_push(LOAD, STORE)
    with pytest.raises(TargetError, match="adjacent stages"):
        b.dep_pop(STORE, 4)


def test_finish_drains_and_appends_finish():
    b = small_builder()
    b.load_2d(MemType.INP, 0, "x", 0, 4, 1, 4)
    prog = b.finish()
    # as in the published runtime: store -> compute push (a STORE carrier, since the last insn
    # is a load), then load -> compute push (the last insn is now that STORE: a LOAD carrier),
    # then one compute carrier popping both, then FINISH.
    assert prog.insns[0].deps == Deps()
    assert is_noop(prog.insns[1], Opcode.STORE, MemType.OUT)
    assert prog.insns[1].deps == Deps(push_prev=True)
    assert is_noop(prog.insns[2], Opcode.LOAD, MemType.INP)
    assert prog.insns[2].deps == Deps(push_next=True)
    assert is_noop(prog.insns[3], Opcode.LOAD, MemType.UOP)
    assert prog.insns[3].deps == Deps(pop_prev=True, pop_next=True)
    assert isinstance(prog.insns[4], FinishInsn) and prog.insns[4].deps == Deps()
    assert len(prog.insns) == 5
    with pytest.raises(TargetError, match="finished"):
        b.load_2d(MemType.INP, 0, "x", 0, 4, 1, 4)


# ---- micro-op kernel cache -------------------------------------------------------------------

def tiny_uop_cfg():
    # 16-entry uop buffer so that kernels get evicted quickly
    return VTAConfig(log_uop_buff_size=6, name="tiny-uop")


def uop_loads(insns):
    return [i for i in insns if isinstance(i, MemInsn) and i.memory_type is MemType.UOP
            and i.x_size > 0]


def test_kernel_cache_hits_and_misses():
    b = StreamBuilder(tiny_uop_cfg())
    k1 = b.uop_kernel([(i, i, 0) for i in range(6)], name="k1")
    k2 = b.uop_kernel([(i, 0, 0) for i in range(6)], name="k2")
    b.alu(k1, AluOp.ADD, 1)
    b.alu(k1, AluOp.MAX, 0)                 # resident: no reload
    b.alu(k2, AluOp.ADD, 1)
    b.alu(b.uop_kernel([(i, i, 0) for i in range(6)], name="same-as-k1"), AluOp.MIN, 3)
    assert b.stats["uop_cache_misses"] == 2 and b.stats["uop_cache_hits"] == 2
    loads = uop_loads(b.insns)
    assert [(m.sram_base, m.x_size) for m in loads] == [(0, 6), (6, 6)]
    alus = [i for i in b.insns if not isinstance(i, MemInsn)]
    assert [(a.uop_bgn, a.uop_end) for a in alus] == [(0, 6), (0, 6), (6, 12), (0, 6)]


def test_kernel_cache_ring_eviction():
    b = StreamBuilder(tiny_uop_cfg())
    ks = [b.uop_kernel([(i, j, 0) for i in range(6)], name=f"k{j}") for j in range(3)]
    for k in ks:
        b.alu(k, AluOp.ADD, 1)
    # k0 at [0,6), k1 at [6,12); k2 does not fit at 12 -> wraps to 0 and evicts k0
    assert [(m.sram_base, m.x_size) for m in uop_loads(b.insns)] == [(0, 6), (6, 6), (0, 6)]
    assert b.stats["uop_cache_evictions"] == 1
    b.alu(ks[1], AluOp.ADD, 1)             # still resident
    b.alu(ks[0], AluOp.ADD, 1)             # evicted: reloaded at 6, evicting k1
    assert b.stats["uop_cache_hits"] == 1 and b.stats["uop_cache_misses"] == 4
    assert uop_loads(b.insns)[-1].sram_base == 6
    prog = b.finish()
    # the DRAM image holds each distinct kernel once; reloads read the same words
    assert len(prog.uops) == 18
    dram_bases = [m.dram_base - prog.uop_base // 4 for m in uop_loads(prog.insns)]
    assert dram_bases == [0, 6, 12, 0]
    d, s, _ = decode_uops(prog.uops, layout_for(prog.config))
    assert list(s[12:18]) == [2] * 6 and list(d[12:18]) == list(range(6))


def test_kernel_loops_and_recorder():
    b = small_builder()
    with b.record_kernel("mm") as k:
        with k.loop(3, 4, 1, 2):
            with k.loop(2, 1, 0, 1):
                k.push(0, 0, 0)
                k.push(1, 5, 7)
    kern = k.kernel
    assert kern.loops == (UopLoop(3, 4, 1, 2), UopLoop(2, 1, 0, 1))
    assert kern.max_indices() == (1 + 8 + 1, 5 + 2, 7 + 4 + 1)
    b.gemm(kern)
    g = b.insns[-1]
    assert isinstance(g, GemmInsn) and (g.iter_out, g.iter_in) == (3, 2)
    assert (g.dst_factor_out, g.dst_factor_in, g.src_factor_out, g.src_factor_in,
            g.wgt_factor_out, g.wgt_factor_in) == (4, 1, 1, 0, 2, 1)
    with pytest.raises(TargetError, match="at most 2"):
        b.uop_kernel([(0, 0)], [(1, 0, 0)] * 3)


def test_kernel_reach_checked():
    b = small_builder()
    k = b.uop_kernel([(0, 0, 0)], [(2048, 1, 0)], name="too-far")
    with pytest.raises(TargetError, match="kernel .too-far. reaches dst index 2048 but ACC has depth 2048"):
        b.gemm(b.uop_kernel([(0, 0, 0)], [(2049, 1, 0)], name="too-far"))
    b.alu(k, AluOp.ADD, 1)  # exactly the depth is fine
    with pytest.raises(TargetError, match="wgt index 1024 but WGT has depth 1024"):
        b.gemm(b.uop_kernel([(0, 0, 1024)]))


# ---- loads / stores --------------------------------------------------------------------------

def test_load_fields_and_dram_addressing():
    cfg = preset("2x16")
    b = StreamBuilder(cfg)
    b.alloc("pad", (100,), "int8")
    x = b.alloc("x", (3, 4, 2, 16), "int8")
    assert x.offset % b.align == 0
    b.load_2d(MemType.INP, 7, x, 4, 4, 2, 4, x_pad_before=1, y_pad_after=2)
    m = b.insns[-1]
    assert m.dram_base == x.offset // cfg.inp_elem_bytes + 4
    assert (m.sram_base, m.y_size, m.x_size, m.x_stride) == (7, 2, 4, 4)
    assert (m.y_pad_0, m.y_pad_1, m.x_pad_0, m.x_pad_1) == (0, 2, 1, 0)


def test_load_store_errors():
    b = small_builder()
    with pytest.raises(TargetError, match=r"INP elements \[0, 5\).*outside buffer 'x'"):
        b.load_2d(MemType.INP, 0, "x", 0, 5, 1, 5)
    with pytest.raises(TargetError, match=r"SRAM \[2046, 2050\).*depth 2048"):
        b.load_2d(MemType.INP, 2046, "x", 0, 4, 1, 4)
    with pytest.raises(IsaError, match="x_pad_0=16"):
        b.load_2d(MemType.INP, 0, "x", 0, 4, 1, 4, x_pad_before=16)
    with pytest.raises(TargetError, match="STORE supports only OUT"):
        b.store_2d(0, "y", 0, 4, 1, 4, mem_type=MemType.ACC)
    with pytest.raises(TargetError, match="cannot load memory type OUT"):
        b.load_2d(MemType.OUT, 0, "x", 0, 4, 1, 4)
    with pytest.raises(TargetError, match="no DRAM buffer 'z'"):
        b.store_2d(0, "z", 0, 4, 1, 4)
    with pytest.raises(TargetError, match="allocated twice"):
        b.alloc("x", (1,))


def test_program_dram_image_read_and_save(tmp_path):
    b = StreamBuilder(preset("pynq"))
    b.alloc("a", (2, 16), "int8")
    b.alloc("acc", (2, 16), "int32")
    b.load_2d(MemType.ACC, 0, "acc", 0, 2, 1, 2)
    b.alu(b.uop_kernel([(0, 0), (1, 0)]), AluOp.ADD, 3)
    b.store_2d(0, "a", 0, 2, 1, 2)
    prog = b.finish()
    acc = np.arange(32, dtype=np.int32).reshape(2, 16) - 16
    img = prog.dram_image({"acc": acc})
    assert img.size == prog.dram_bytes and img.dtype == np.uint8
    assert (prog.read(img, "acc") == acc).all()
    assert (img[prog.uop_base:prog.uop_base + 8].view("<u4") == prog.uops).all()
    with pytest.raises(InputError, match="expected shape"):
        prog.dram_image({"acc": acc[:1]})
    with pytest.raises(InputError, match="do not fit int8"):
        prog.dram_image({"a": np.full((2, 16), 300)})
    prog.save(str(tmp_path / "p"))
    back = Program.load(str(tmp_path / "p"))
    assert back.insns == prog.insns and (back.uops == prog.uops).all()
    assert back.buffers == prog.buffers and back.uop_base == prog.uop_base
    assert (tmp_path / "p.insn.bin").stat().st_size == 16 * len(prog.insns)


# ---- layout packing --------------------------------------------------------------------------

@settings(max_examples=40, deadline=None)
@given(st.integers(1, 5), st.integers(1, 9), st.integers(1, 3), st.integers(1, 3),
       st.sampled_from([1, 2]), st.sampled_from([4, 8]))
def test_pack_roundtrip(n, c, h, w, batch, block):
    x = np.random.default_rng(n * 100 + c).integers(-128, 128, (n, c, h, w))
    p = pack_nchw(x, batch, block)
    assert p.shape == (-(-n // batch), -(-c // block), h, w, batch, block)
    assert (unpack_nchw(p, n, c) == x).all()
    # one packed element holds (batch entries) x (block channels) at one pixel
    assert p[(n - 1) // batch, (c - 1) // block, h - 1, w - 1, (n - 1) % batch, (c - 1) % block] \
        == x[n - 1, c - 1, h - 1, w - 1]
    pw = pack_oihw(x, batch, block)
    assert pw[(n - 1) // batch, (c - 1) // block, 0, 0, (n - 1) % batch, (c - 1) % block] \
        == x[n - 1, c - 1, 0, 0]
    m = x.reshape(n, -1)
    assert (unpack_matrix(pack_matrix(m, batch, block), *m.shape) == m).all()


# ---- disassembler ----------------------------------------------------------------------------

def test_disasm_listing_and_cli(tmp_path, capsys):
    b = small_builder()
    b.load_2d(MemType.INP, 0, "x", 0, 4, 1, 4, y_pad_before=1)
    b.dep_push(LOAD, COMPUTE)
    b.dep_pop(LOAD, COMPUTE)
    b.gemm(b.uop_kernel([(0, 0, 0)], [(4, 1, 1, 0)]))
    b.alu(b.uop_kernel([(0, 0)]), AluOp.SHR, 8)
    prog = b.finish()
    text = disassemble(prog.insns)
    lines = text.splitlines()
    assert lines[0].startswith("0  LOAD   INP") and "[push_next]" in lines[0]
    assert "pad_y=1/0" in lines[0]
    assert "LOAD   UOP      [pop_prev]" in lines[1]
    assert "GEMM" in lines[2] and "iter=4x1" in lines[2] and "dst=(1,0) src=(1,0)" in lines[2]
    assert "ALU    SHR" in text and "imm=8" in text
    assert lines[-1].split()[1] == "FINISH"
    assert "(no-op token carrier)" in text
    assert format_insn(FinishInsn(Deps(push_prev=True))).startswith("FINISH")

    prog.save(str(tmp_path / "p"))
    from retarget.cli import disasm_cmd
    parser = argparse.ArgumentParser()
    disasm_cmd.register(parser.add_subparsers())
    args = parser.parse_args(["disasm", str(tmp_path / "p.insn.bin"), "--uops",
                              str(tmp_path / "p.uop.bin"), "--config", "pynq"])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert f"{len(prog.insns)} instructions, config pynq" in out
    assert "# micro-ops: 2" in out and "u0  dst=0 src=0 wgt=0" in out
    assert out.count("\n") == 1 + len(prog.insns) + 1 + 2
    # without --config / --uops: both come from the files Program.save wrote beside the stream
    other = StreamBuilder(preset("1x32"))
    other.alloc("x", (4, 32), "int8")
    other.load_2d(MemType.INP, 0, "x", 0, 4, 1, 4)
    other.alu(other.uop_kernel([(0, 0)]), AluOp.SHR, 8)
    other = other.finish()
    other.save(str(tmp_path / "q"))
    (tmp_path / "kernel").mkdir()
    other.save(str(tmp_path / "kernel" / "program"))      # an artifact's kernel directory
    for path, meta in ((tmp_path / "q.insn.bin", "q.json"), (tmp_path / "kernel", "program.json")):
        args = parser.parse_args(["disasm", str(path)])
        assert args.func(args) == 0
        out = capsys.readouterr().out
        assert "config 1x32" in out and f"from {meta}" in out and "# micro-ops: 1" in out

    (tmp_path / "bad.bin").write_bytes(bytes([6]) + bytes(15))
    # a raw file nothing saved beside it identifies: refused unless --target says whose it is
    args = parser.parse_args(["disasm", str(tmp_path / "bad.bin")])
    with pytest.raises(TargetError, match="give --target"):
        args.func(args)
    args = parser.parse_args(["disasm", str(tmp_path / "bad.bin"), "--target", "vta"])
    with pytest.raises(IsaError, match="instruction 0: unknown opcode 6"):
        args.func(args)


# ---- static token check --------------------------------------------------------------------

@pytest.mark.parametrize("with_tokens", [True, False])
def test_hazard_check_raw(with_tokens):
    from retarget.targets.vta.hazards import HazardError, check_hazards
    b = StreamBuilder()
    b.alloc("x", (1, 4, 1, 16))
    b.alloc("w", (1, 4, 16, 16))
    b.alloc("y", (1, 1, 1, 16))
    b.load_2d(MemType.INP, 0, "x", 0, 4, 1, 4)
    b.load_2d(MemType.WGT, 0, "w", 0, 4, 1, 4)
    if with_tokens:
        b.dep_push(LOAD, COMPUTE)
        b.dep_pop(LOAD, COMPUTE)
    b.gemm(b.uop_kernel([(0, 0, 0)]), reset=True)
    b.gemm(b.uop_kernel([(0, k, k) for k in range(4)]))
    b.alu(b.uop_kernel([(0, 0)]), AluOp.SHR, 8)
    if with_tokens:
        b.dep_push(COMPUTE, STORE)
        b.dep_pop(COMPUTE, STORE)
    b.store_2d(0, "y", 0, 1, 1, 1)
    prog = b.finish()
    if with_tokens:
        assert check_hazards(prog) > 0
    else:
        with pytest.raises(HazardError, match=r"instruction 5 \(GEMM.*reads inp\[0\].*"
                                              r"instruction 0 \(LOAD   INP.*no token path"):
            check_hazards(prog)


def test_hazard_check_deadlock():
    from retarget.targets.vta.hazards import HazardError, check_hazards
    b = small_builder()
    b.dep_pop(COMPUTE, LOAD)          # nothing ever pushes compute -> load
    b.load_2d(MemType.INP, 0, "x", 0, 4, 1, 4)
    with pytest.raises(HazardError, match="token deadlock: blocked at instruction 0"):
        check_hazards(b.finish())
