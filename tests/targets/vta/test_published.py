"""The published VTA unit tests (specs/vta.md, "The published unit tests"), rebuilt with our
StreamBuilder, encoded to binary, run on the behavioural simulator (targets/vta/sim) and checked
against plain NumPy, on the default config and on differently shaped cores."""
import numpy as np
import pytest

from retarget.targets.vta.builder import Program, StreamBuilder
from retarget.targets.vta.config import preset
from retarget.targets.vta.hazards import check_hazards
from retarget.targets.vta.isa import AluOp, MemType
from retarget.targets.vta.layout import pack_matrix, unpack_matrix

sim = pytest.importorskip("retarget.targets.vta.sim")

LOAD, COMPUTE, STORE = 1, 2, 3
CONFIGS = ["pynq", "1x32", "2x16", "1x64"]


def run(prog: Program, data: dict) -> tuple[np.ndarray, object]:
    """Encode the program, run its binary stream on a fresh simulator; (DRAM, SimResult)."""
    dram = prog.dram_image(data)
    result = sim.run_stream(prog.config, dram, prog.stream())
    assert result.tokens_left == {} or set(result.tokens_left) <= {"g2l", "s2g"}
    check_hazards(prog)   # every cross-module conflict is ordered by tokens
    return dram, result


def rng(seed):
    return np.random.default_rng(seed)


def elementwise_kernel(b, rows, cols, dst_base=0, src_base=0, name=""):
    """ALU kernel over a rows x cols grid of ACC entries: dst = dst_base + i*cols + j,
    src = src_base + i*cols + j (one loop over rows, `cols` micro-ops)."""
    return b.uop_kernel([(dst_base + j, src_base + j) for j in range(cols)],
                        [(rows, cols, cols)], name=name)


# ---- save / load -----------------------------------------------------------------------------

@pytest.mark.parametrize("cfg_name", CONFIGS)
def test_save_load_out(cfg_name):
    cfg = preset(cfg_name)
    n = m = 6
    x = rng(1).integers(1, 10, (n, m, cfg.batch, cfg.block_out)).astype(np.int32)
    b = StreamBuilder(cfg)
    b.alloc("x", x.shape, "int32")
    b.alloc("y", x.shape, "int8")
    b.load_2d(MemType.ACC, 0, "x", 0, m, n, m)
    b.alu(elementwise_kernel(b, n, m), AluOp.SHR, 0)
    b.dep_push(COMPUTE, STORE)
    b.dep_pop(COMPUTE, STORE)
    b.store_2d(0, "y", 0, m, n, m)
    prog = b.finish()
    dram, res = run(prog, {"x": x})
    np.testing.assert_array_equal(prog.read(dram, "y"), x.astype(np.int8))
    c = res.counters
    assert c.acc_load_nbytes == n * m * cfg.acc_elem_bytes
    assert c.out_store_nbytes == n * m * cfg.out_elem_bytes
    assert c.alu_counter == n * m and c.gemm_counter == 0


# ---- padded loads ----------------------------------------------------------------------------

PADS = [dict(y_pad_before=2), dict(x_pad_before=2), dict(y_pad_after=2), dict(x_pad_after=2),
        dict(y_pad_before=1, x_pad_before=1, y_pad_after=1, x_pad_after=1)]


def np_pad(x, p):
    return np.pad(x, [(p.get("y_pad_before", 0), p.get("y_pad_after", 0)),
                      (p.get("x_pad_before", 0), p.get("x_pad_after", 0)), (0, 0), (0, 0)])


@pytest.mark.parametrize("cfg_name", CONFIGS)
@pytest.mark.parametrize("pads", PADS, ids=lambda p: ",".join(f"{k}={v}" for k, v in p.items()))
def test_padded_load_acc(cfg_name, pads):
    """3x5 blocks of int32 loaded into ACC with padding, stored (narrowed, wrapping) as int8."""
    cfg = preset(cfg_name)
    n, m = 3, 5
    x = rng(2).integers(-(1 << 20), 1 << 20, (n, m, cfg.batch, cfg.block_out)).astype(np.int32)
    ref = np_pad(x, pads).astype(np.int8)
    b = StreamBuilder(cfg)
    b.alloc("x", x.shape, "int32")
    b.alloc("y", ref.shape, "int8")
    b.load_2d(MemType.ACC, 0, "x", 0, m, n, m, **pads)
    b.dep_push(COMPUTE, STORE)
    b.dep_pop(COMPUTE, STORE)
    b.store_2d(0, "y", 0, ref.shape[1], ref.shape[0], ref.shape[1])
    prog = b.finish()
    dram, res = run(prog, {"x": x})
    np.testing.assert_array_equal(prog.read(dram, "y"), ref)
    assert res.counters.acc_load_nbytes == n * m * cfg.acc_elem_bytes   # padding excluded


@pytest.mark.parametrize("cfg_name", ["pynq", "2x16"])
@pytest.mark.parametrize("pads", PADS[-2:], ids=lambda p: ",".join(p))
def test_padded_load_inp(cfg_name, pads):
    """The load module's padding: INP loaded with pads, moved to ACC by a GEMM with identity
    weights, stored."""
    cfg = preset(cfg_name)
    n, m = 3, 5
    x = rng(3).integers(-128, 128, (n, m, cfg.batch, cfg.block_in)).astype(np.int8)
    ref = np_pad(x, pads)
    rows, cols = ref.shape[:2]
    b = StreamBuilder(cfg)
    b.alloc("x", x.shape, "int8")
    b.alloc("eye", (1, cfg.block_out, cfg.block_in), "int8")
    b.alloc("y", ref.shape, "int8")
    b.load_2d(MemType.INP, 0, "x", 0, m, n, m, **pads)
    b.load_2d(MemType.WGT, 0, "eye", 0, 1, 1, 1)
    b.dep_push(LOAD, COMPUTE)
    b.dep_pop(LOAD, COMPUTE)
    k = b.uop_kernel([(0, 0, 0)], [(rows * cols, 1, 1, 0)])
    b.gemm(k, reset=True)
    b.gemm(k)
    b.dep_push(COMPUTE, STORE)
    b.dep_pop(COMPUTE, STORE)
    b.store_2d(0, "y", 0, cols, rows, cols)
    prog = b.finish()
    dram, res = run(prog, {"x": x, "eye": np.eye(cfg.block_in, dtype=np.int8)[None]})
    np.testing.assert_array_equal(prog.read(dram, "y"), ref)
    assert res.counters.inp_load_nbytes == n * m * cfg.inp_elem_bytes
    assert res.counters.gemm_counter == rows * cols


# ---- GEMM ------------------------------------------------------------------------------------

def requant_ref(acc):
    return np.clip(acc >> 8, 0, 127).astype(np.int8)


@pytest.mark.parametrize("cfg_name", CONFIGS)
@pytest.mark.parametrize("vthreads", [1, 2])
def test_gemm(cfg_name, vthreads):
    """x: 1 x 4 blocks, w: (vthreads output blocks) x 4 blocks; >>8, max 0, min 127. With two
    virtual threads each thread owns one output block and its own half of INP/WGT/ACC; their
    instructions are interleaved with tokens between the stages."""
    cfg = preset(cfg_name)
    B, BI, BO = cfg.batch, cfg.block_in, cfg.block_out
    n, m = 4, vthreads
    x = rng(4).integers(-128, 128, (B, n * BI)).astype(np.int8)
    w = rng(5).integers(-128, 128, (m * BO, n * BI)).astype(np.int8)
    ref = requant_ref(x.astype(np.int32) @ w.astype(np.int32).T)
    b = StreamBuilder(cfg)
    b.alloc("x", (1, n, B, BI), "int8")
    b.alloc("w", (m, n, BO, BI), "int8")
    b.alloc("y", (1, m, B, BO), "int8")
    threads = range(vthreads)
    for t in threads:       # thread t: INP [t*n, t*n+n), WGT [t*n, t*n+n), ACC entry t
        b.load_2d(MemType.INP, t * n, "x", 0, n, 1, n)
        b.load_2d(MemType.WGT, t * n, "w", t * n, n, 1, n)
        b.dep_push(LOAD, COMPUTE)
    for t in threads:
        b.dep_pop(LOAD, COMPUTE)
        b.gemm(b.uop_kernel([(t, 0, 0)]), reset=True)
        b.gemm(b.uop_kernel([(t, t * n + k, t * n + k) for k in range(n)]))
    for op, imm in ((AluOp.SHR, 8), (AluOp.MAX, 0), (AluOp.MIN, 127)):
        for t in threads:
            b.alu(b.uop_kernel([(t, t)]), op, imm)
    for t in threads:
        b.dep_push(COMPUTE, STORE)
    for t in threads:
        b.dep_pop(COMPUTE, STORE)
        b.store_2d(t, "y", t, 1, 1, 1)
    prog = b.finish()
    data = {"x": pack_matrix(x, B, BI), "w": pack_matrix(w, BO, BI)}
    dram, res = run(prog, data)
    np.testing.assert_array_equal(unpack_matrix(prog.read(dram, "y")), ref)
    assert res.counters.gemm_counter == n * m
    assert res.counters.wgt_load_nbytes == n * m * cfg.wgt_elem_bytes


# ---- ALU -------------------------------------------------------------------------------------

ALU_CASES = [  # name, op, immediate (None: vector operand), numpy reference
    ("shl_imm", AluOp.SHR, "neg", lambda a, b, i: a << i),
    ("max_imm", AluOp.MAX, "imm", lambda a, b, i: np.maximum(a, i)),
    ("max_vec", AluOp.MAX, None, lambda a, b, i: np.maximum(a, b)),
    ("add_imm", AluOp.ADD, "imm", lambda a, b, i: a + i),
    ("add_vec", AluOp.ADD, None, lambda a, b, i: a + b),
    ("shr_imm", AluOp.SHR, "imm", lambda a, b, i: a >> i),
    ("min_vec", AluOp.MIN, None, lambda a, b, i: np.minimum(a, b)),
    ("mul_imm", AluOp.MUL, "imm", lambda a, b, i: a * i),
    ("mul_vec", AluOp.MUL, None, lambda a, b, i: a * b),
]


def alu_program(cfg, n, m, steps):
    """Load a (and b right after it) into ACC, apply `steps` [(op, imm or None)], store a."""
    b = StreamBuilder(cfg)
    shape = (n, m, cfg.batch, cfg.block_out)
    b.alloc("a", shape, "int32")
    b.alloc("b", shape, "int32")
    b.alloc("y", shape, "int8")
    b.load_2d(MemType.ACC, 0, "a", 0, m, n, m)
    b.load_2d(MemType.ACC, n * m, "b", 0, m, n, m)
    for op, imm in steps:
        b.alu(elementwise_kernel(b, n, m, 0, n * m), op, imm)
    b.dep_push(COMPUTE, STORE)
    b.dep_pop(COMPUTE, STORE)
    b.store_2d(0, "y", 0, m, n, m)
    return b.finish()


@pytest.mark.parametrize("cfg_name", CONFIGS)
@pytest.mark.parametrize("case", ALU_CASES, ids=lambda c: c[0])
def test_alu(cfg_name, case):
    name, op, imm_kind, fn = case
    cfg = preset(cfg_name)
    n = m = 8
    g = rng(6)
    shape = (n, m, cfg.batch, cfg.block_out)
    a = g.integers(-16, 16, shape).astype(np.int32)
    bv = g.integers(-16, 16, shape).astype(np.int32)
    imm = int(g.integers(1, 5))
    insn_imm = None if imm_kind is None else (-imm if imm_kind == "neg" else imm)
    prog = alu_program(cfg, n, m, [(op, insn_imm)])
    dram, res = run(prog, {"a": a, "b": bv})
    np.testing.assert_array_equal(prog.read(dram, "y"), fn(a, bv, imm).astype(np.int8))
    assert res.counters.alu_counter == n * m


@pytest.mark.parametrize("cfg_name", CONFIGS)
def test_relu(cfg_name):
    cfg = preset(cfg_name)
    n, m = 8, 10
    a = rng(7).integers(-256, 256, (n, m, cfg.batch, cfg.block_out)).astype(np.int32)
    prog = alu_program(cfg, n, m, [(AluOp.MAX, 0), (AluOp.MIN, 127)])
    dram, _ = run(prog, {"a": a, "b": np.zeros_like(a)})
    np.testing.assert_array_equal(prog.read(dram, "y"), np.clip(a, 0, 127).astype(np.int8))


@pytest.mark.parametrize("cfg_name", CONFIGS)
def test_shift_and_scale(cfg_name):
    cfg = preset(cfg_name)
    n = m = 8
    a = rng(8).integers(-256, 256, (n, m, cfg.batch, cfg.block_out)).astype(np.int32)
    s, k = 7, 2
    prog = alu_program(cfg, n, m, [(AluOp.ADD, s), (AluOp.SHR, k)])
    dram, _ = run(prog, {"a": a, "b": np.zeros_like(a)})
    np.testing.assert_array_equal(prog.read(dram, "y"), ((a + s) >> k).astype(np.int8))


# ---- blocked GEMM 256 x 256 x 64 -------------------------------------------------------------

def blocked_gemm(cfg, batch, channel, block, vthreads):
    """out = clip((A @ W^T) >> 8, 0, 127) for A: batch x channel, W: channel x channel, tiled
    in `block`-sized tiles over batch, output and input channels. Output tiles are dealt to
    `vthreads` virtual threads in turn; each thread owns a 1/vthreads slice of INP, WGT and ACC,
    and the threads' instructions are interleaved phase by phase. Tokens: l2g (RAW on inputs),
    g2l (WAR: a thread's next load waits for its previous GEMM), g2s (RAW on results), s2g (WAR:
    a thread's next reset waits for its previous store)."""
    B, BI, BO = cfg.batch, cfg.block_in, cfg.block_out
    tb, kb, ob = block // B, block // BI, block // BO        # tile size in blocks
    rows, kin, kout = batch // B, channel // BI, channel // BO
    inp_tile, wgt_tile, acc_tile = tb * kb, ob * kb, tb * ob
    assert vthreads * max(inp_tile, acc_tile) <= min(cfg.inp_depth, cfg.acc_depth)
    b = StreamBuilder(cfg)
    b.alloc("a", (rows, kin, B, BI), "int8")
    b.alloc("w", (kout, kin, BO, BI), "int8")
    b.alloc("out", (rows, kout, B, BO), "int8")
    tiles = [(r, c) for r in range(rows // tb) for c in range(kout // ob)]
    loads = gemm_phases = 0
    for first in range(0, len(tiles), vthreads):
        group = list(enumerate(tiles[first:first + vthreads]))   # (thread, tile)
        for t, _ in group:
            if first:                       # WAR: the thread's previous store has read ACC
                b.dep_pop(STORE, COMPUTE)
            b.gemm(b.uop_kernel([(t * acc_tile + j, 0, 0) for j in range(ob)],
                                [(tb, ob, 0)]), reset=True)
        for kt in range(kin // kb):
            for t, (r, c) in group:
                if loads >= vthreads:       # WAR: the thread's previous GEMM has read INP/WGT
                    b.dep_pop(COMPUTE, LOAD)
                b.load_2d(MemType.INP, t * inp_tile, "a", r * tb * kin + kt * kb, kb, tb, kin)
                b.load_2d(MemType.WGT, t * wgt_tile, "w", c * ob * kin + kt * kb, kb, ob, kin)
                b.dep_push(LOAD, COMPUTE)
                loads += 1
            for t, _ in group:
                b.dep_pop(LOAD, COMPUTE)
                b.gemm(b.uop_kernel(
                    [(t * acc_tile, t * inp_tile + k, t * wgt_tile + k) for k in range(kb)],
                    [(tb, ob, kb, 0), (ob, 1, 0, kb)]))
                b.dep_push(COMPUTE, LOAD)
                gemm_phases += 1
        for op, imm in ((AluOp.SHR, 8), (AluOp.MAX, 0), (AluOp.MIN, 127)):
            for t, _ in group:
                b.alu(b.uop_kernel([(t * acc_tile + j, t * acc_tile + j) for j in range(ob)],
                                   [(tb, ob, ob)]), op, imm)
        for t, _ in group:
            b.dep_push(COMPUTE, STORE)
        for t, (r, c) in group:
            b.dep_pop(COMPUTE, STORE)
            b.store_2d(t * acc_tile, "out", r * tb * kout + c * ob, ob, tb, kout)
            b.dep_push(STORE, COMPUTE)
    return b.finish()


@pytest.mark.parametrize("cfg_name", CONFIGS)
@pytest.mark.parametrize("vthreads", [1, 2])
def test_blocked_gemm_256x256x64(cfg_name, vthreads):
    cfg = preset(cfg_name)
    batch = channel = 256
    block = 64
    g = rng(9)
    a = g.integers(-128, 128, (batch, channel)).astype(np.int8)
    w = g.integers(-128, 128, (channel, channel)).astype(np.int8)
    prog = blocked_gemm(cfg, batch, channel, block, vthreads)
    data = {"a": pack_matrix(a, cfg.batch, cfg.block_in),
            "w": pack_matrix(w, cfg.block_out, cfg.block_in)}
    dram, res = run(prog, data)
    got = unpack_matrix(prog.read(dram, "out"))
    np.testing.assert_array_equal(got, requant_ref(a.astype(np.int32) @ w.astype(np.int32).T))
    c = res.counters
    assert res.macs(cfg) == batch * channel * channel
    # A is re-read once per output-channel tile, W once per batch tile (int8: 1 byte each)
    assert c.inp_load_nbytes == (channel // block) * batch * channel
    assert c.wgt_load_nbytes == (batch // block) * channel * channel
    assert c.out_store_nbytes == batch * channel
    # kernels repeat across tiles: after the first group every kernel is a cache hit
    assert prog.stats["uop_cache_hits"] > prog.stats["uop_cache_misses"]


# ---- token discipline ------------------------------------------------------------------------

@pytest.mark.parametrize("vthreads", [1, 2])
def test_blocked_gemm_tokens_order_every_conflict(vthreads):
    """The simulator runs a stream in program order, so a missing token cannot change its
    results; the static check must accept the blocked GEMM and reject it without its WAR pops."""
    from retarget.targets.vta.hazards import HazardError, check_hazards
    from retarget.targets.vta.isa import Deps
    cfg = preset("pynq")
    prog = blocked_gemm(cfg, 128, 128, 64, vthreads)
    assert check_hazards(prog) > 0
    # drop the first WAR pop of the load module (compute -> load): a load may now overwrite
    # INP while a GEMM still reads it
    i = next(k for k, insn in enumerate(prog.insns)
             if getattr(insn, "memory_type", None) is MemType.INP and insn.deps.pop_next)
    broken = list(prog.insns)
    broken[i] = type(broken[i])(**{**{f: getattr(broken[i], f) for f in broken[i].__slots__},
                                   "deps": Deps(push_next=broken[i].deps.push_next)})
    bad = Program(prog.config, broken, prog.uops, prog.uop_base, prog.buffers, prog.dram_bytes)
    with pytest.raises(HazardError, match="no token path"):
        check_hazards(bad)
