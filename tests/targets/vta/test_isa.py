"""VTA ISA: golden bit layouts for the default config, round trips over configs, clear errors."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from retarget.targets.vta.config import VTAConfig, preset
from retarget.targets.vta.isa import (
    AluInsn, AluOp, Deps, FinishInsn, GemmInsn, IsaError, MemInsn, MemType, Opcode, Uop,
    STAGE_COMPUTE, STAGE_LOAD, STAGE_STORE, decode_insn, decode_stream, decode_uops, encode_insn,
    encode_stream, encode_uops, layout_for, stage_of)

PYNQ = layout_for(preset("pynq"))
CONFIGS = [preset("pynq"), preset("1x32"), preset("2x16"),
           VTAConfig(log_acc_buff_size=15, log_inp_buff_size=13, log_uop_buff_size=12,
                     log_wgt_buff_size=16, name="small")]


def words(b: bytes) -> tuple[int, int]:
    """(low, high) 64-bit words of an encoded instruction."""
    return int.from_bytes(b[:8], "little"), int.from_bytes(b[8:], "little")


# ---- golden words, hand-computed from the table in specs/vta.md ----------------------------

def test_golden_load():
    insn = MemInsn(Opcode.LOAD, Deps(push_next=True), MemType.INP, sram_base=5, dram_base=0x1234,
                   y_size=3, x_size=4, x_stride=7, y_pad_0=1, y_pad_1=2, x_pad_0=3, x_pad_1=4)
    # low: opcode 0 | push_next<<6 | INP(2)<<7 | 5<<10 | 0x1234<<26
    # high: 3 | 4<<16 | 7<<32 | 1<<48 | 2<<52 | 3<<56 | 4<<60
    assert words(encode_insn(insn, PYNQ)) == (0x48D0001540, 0x4321000700040003)


def test_golden_gemm():
    insn = GemmInsn(Deps(pop_prev=True), True, 1, 2, 3, 4, 1, 2, 3, 4, 5, 6)
    # low: 2 | 1<<3 | 1<<7 | 1<<8 | 2<<21 | 3<<35 | 4<<49
    # high: 1 | 2<<11 | 3<<22 | 4<<33 | 5<<44 | 6<<54
    assert words(encode_insn(insn, PYNQ)) == (0x000800180040018A, 0x0180500800C01001)


def test_golden_alu_and_finish():
    insn = AluInsn(Deps(), False, 0, 0, 0, 0, 0, 0, 0, 0, AluOp.MUL, True, -1)
    # MUL(4) at bit 108, use_imm at 111, imm 0xFFFF at [127:112]
    assert words(encode_insn(insn, PYNQ)) == (0x4, 0xFFFFC00000000000)
    assert words(encode_insn(FinishInsn(Deps(push_prev=True)), PYNQ)) == (0x3 | 1 << 5, 0)


def test_golden_uop():
    w = encode_uops([Uop(1, 2, 3), Uop(2047, 2047, 1023)], PYNQ)
    assert w.dtype == np.uint32
    assert list(w) == [1 | 2 << 11 | 3 << 22, 0xFFFFFFFF]


def test_bytes_are_low_word_first_little_endian():
    b = encode_insn(FinishInsn(), PYNQ)
    assert b[0] == 3 and b[1:] == bytes(15)


# ---- round trips ---------------------------------------------------------------------------

def deps_st():
    return st.builds(Deps, st.booleans(), st.booleans(), st.booleans(), st.booleans())


def u(layout, group, name):
    return st.integers(0, layout.field(group, name).max)


def insn_st(layout):
    mem = st.builds(
        MemInsn, st.sampled_from([Opcode.LOAD, Opcode.STORE]), deps_st(), st.sampled_from(MemType),
        *(u(layout, "mem", n) for n in ("sram_base", "dram_base", "y_size", "x_size", "x_stride",
                                        "y_pad_0", "y_pad_1", "x_pad_0", "x_pad_1")))
    cmp_names = ("uop_bgn", "uop_end", "iter_out", "iter_in", "dst_factor_out", "dst_factor_in",
                 "src_factor_out", "src_factor_in")
    gemm = st.builds(GemmInsn, deps_st(), st.booleans(),
                     *(u(layout, "gemm", n) for n in cmp_names + ("wgt_factor_out",
                                                                  "wgt_factor_in")))
    alu = st.builds(AluInsn, deps_st(), st.booleans(), *(u(layout, "alu", n) for n in cmp_names),
                    st.sampled_from(AluOp), st.booleans(), st.integers(-32768, 32767))
    return st.one_of(mem, gemm, alu, st.builds(FinishInsn, deps_st()))


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: c.name)
def test_roundtrip_insns(cfg):
    layout = layout_for(cfg)

    @settings(max_examples=150, deadline=None)
    @given(st.lists(insn_st(layout), max_size=8))
    def check(insns):
        data = encode_stream(insns, layout)
        assert len(data) == 16 * len(insns)
        assert decode_stream(data, layout) == insns

    check()


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: c.name)
def test_roundtrip_uops(cfg):
    layout = layout_for(cfg)
    f = {x.name: x for x in layout.uop}

    @settings(max_examples=100, deadline=None)
    @given(st.lists(st.tuples(st.integers(0, f["dst"].max), st.integers(0, f["src"].max),
                              st.integers(0, f["wgt"].max)), max_size=20))
    def check(triples):
        w = encode_uops([Uop(*t) for t in triples], layout)
        d, s, g = decode_uops(w, layout)
        assert [tuple(map(int, t)) for t in zip(d, s, g)] == triples

    check()


def test_layouts_never_cross_word_boundaries():
    for cfg in CONFIGS + [preset("1x64"), preset("ultra96")]:
        L = layout_for(cfg)
        for group in ("common", "mem", "gemm", "alu"):
            for f in getattr(L, group):
                assert f.lo // 64 == f.hi // 64, (cfg.name, f)
        assert max(f.hi for f in L.uop) < 32
        assert L.field("uop", "src").width >= max(L.field("gemm", "dst_factor_in").width,
                                                  L.field("gemm", "src_factor_in").width)


# ---- errors --------------------------------------------------------------------------------

def test_field_overflow_names_field():
    with pytest.raises(IsaError, match=r"instruction 1 \(GemmInsn\): field uop_bgn=8192 .*13-bit"):
        encode_stream([FinishInsn(), GemmInsn(Deps(), False, 8192, 0, 1, 1, 0, 0, 0, 0, 0, 0)],
                      PYNQ)
    with pytest.raises(IsaError, match="imm=40000"):
        encode_insn(AluInsn(Deps(), False, 0, 1, 1, 1, 0, 0, 0, 0, AluOp.ADD, True, 40000), PYNQ)
    with pytest.raises(IsaError, match="x_pad_0=16 .*4-bit"):
        encode_insn(MemInsn(Opcode.LOAD, Deps(), MemType.INP, 0, 0, 1, 1, 1, x_pad_0=16), PYNQ)
    with pytest.raises(IsaError, match="sram_base=-1"):
        encode_insn(MemInsn(Opcode.STORE, Deps(), MemType.OUT, -1, 0, 1, 1, 1), PYNQ)
    with pytest.raises(IsaError, match="micro-op 1: wgt_idx=1024"):
        encode_uops([Uop(0, 0, 0), Uop(0, 0, 1024)], PYNQ)


def test_decode_errors_name_instruction():
    good = encode_insn(FinishInsn(), PYNQ)
    bad_op = (5).to_bytes(16, "little")
    with pytest.raises(IsaError, match="instruction 2: unknown opcode 5"):
        decode_stream(good + good + bad_op, PYNQ)
    bad_mem = (Opcode.LOAD | 7 << 7).to_bytes(16, "little")
    with pytest.raises(IsaError, match="instruction 0: LOAD with unknown memory type 7"):
        decode_stream(bad_mem, PYNQ)
    bad_alu = (Opcode.ALU | 6 << 108).to_bytes(16, "little")
    with pytest.raises(IsaError, match="unknown alu_opcode 6"):
        decode_insn(bad_alu, PYNQ, 9)
    with pytest.raises(IsaError, match="not a whole number"):
        decode_stream(good + b"\0", PYNQ)


def test_stage_of():
    def ld(m):
        return MemInsn(Opcode.LOAD, Deps(), m, 0, 0, 1, 1, 1)
    assert stage_of(ld(MemType.INP)) == stage_of(ld(MemType.WGT)) == STAGE_LOAD
    assert stage_of(ld(MemType.UOP)) == stage_of(ld(MemType.ACC)) == STAGE_COMPUTE
    assert stage_of(MemInsn(Opcode.STORE, Deps(), MemType.OUT, 0, 0, 1, 1, 1)) == STAGE_STORE
    assert stage_of(FinishInsn()) == STAGE_COMPUTE
