"""The alu_stage variant (VTAConfig.alu_stage, preset pynq_alu): requantisation on its own ALU
module fed by a g2a queue from the GEMM (compute) module. Results stay bit-exact, every
cross-module conflict (micro-op buffer included) is ordered by tokens, the published design's
streams are unchanged, and the cycle model overlaps the ALU with the GEMMs."""
import hashlib
from dataclasses import replace

import numpy as np
import pytest

import retarget
from retarget.errors import TargetError
from retarget.ops.reference import run_graph
from retarget.targets.vta.builder import StreamBuilder
from retarget.targets.vta.config import PRESETS, VTAConfig, load_config
from retarget.targets.vta.hazards import check_hazards
from retarget.targets.vta.isa import STAGE_ALU, STAGE_COMPUTE, STAGE_STORE, AluInsn, stage_of
from retarget.targets.vta.lower import (Conv2d, Dense, LoweringContext, Pool2d, Requant,
                                        RequantizeLayer, ResidualAdd, lower_conv2d, lower_dense,
                                        lower_pool2d, lower_requantize, lower_residual_add,
                                        reference, run_segment)
from retarget.targets.vta.sim import Simulator
from retarget.targets.vta.timing import simulate_timing

from retarget import zoo
from retarget.frontend.onnx import import_model

ALU = PRESETS["pynq_alu"]


def _three_layers(cfg, v, rng):
    ctx = LoweringContext(cfg)
    x = ctx.input("x", (1, 32, 14, 14))
    l1 = Conv2d("c1", (1, 32, 14, 14), 48, (3, 3), (1, 1), (1, 1, 1, 1),
                requant=Requant(8, 0, 127))
    w1 = rng.integers(-8, 8, (48, 32, 3, 3), dtype=np.int8)
    y = lower_conv2d(ctx, l1, x, w1, np.zeros(48, np.int32), vthreads=v)
    l2 = Conv2d("c2", (1, 48, 14, 14), 32, (1, 1), (2, 2), (0, 0, 0, 0),
                requant=Requant(7, -128, 127))
    w2 = rng.integers(-8, 8, (32, 48, 1, 1), dtype=np.int8)
    z = lower_conv2d(ctx, l2, y, w2, None, vthreads=v)
    l3 = Pool2d("p", "max", z.shape, (3, 3), (2, 2), (1, 1, 1, 1))
    p = lower_pool2d(ctx, l3, z, vthreads=v)
    return ctx.finish([p]), (l1, w1, l2, w2, l3)


# sha256 (first 16 hex digits) of stream + micro-op image, recorded before the variant existed
GOLDEN = {("pynq", 1): "85b849b91804717c", ("pynq", 2): "6a3baed24219189f",
          ("2x16", 1): "d8ac67fd6de02408", ("2x16", 2): "e3fdd4a07f9c3489"}


def test_default_streams_unchanged():
    rng = np.random.default_rng(0)
    for (name, v), want in GOLDEN.items():   # the order the golden values were drawn in
        seg, _ = _three_layers(PRESETS[name], v, rng)
        p = seg.program
        got = hashlib.sha256(p.stream() + p.uops.astype("<u4").tobytes()).hexdigest()[:16]
        assert got == want, (name, v)
        assert not any(stage_of(i, True) == STAGE_ALU and i.uop_end == i.uop_bgn
                       for i in p.insns)


def test_config_and_preset():
    assert VTAConfig().alu_stage is False
    assert load_config("pynq_alu").alu_stage is True
    assert replace(ALU, alu_stage=False, name="pynq") == PRESETS["pynq"]
    with pytest.raises(TargetError, match="alu_stage"):
        VTAConfig(alu_stage=1)


def test_builder_tokens_of_the_alu_stage():
    b = StreamBuilder(ALU)
    with pytest.raises(TargetError, match="alu=4"):
        b.dep_push(STAGE_COMPUTE, STAGE_STORE)      # compute -> store goes through the ALU
    b.dep_push(STAGE_COMPUTE, STAGE_ALU)
    b.dep_pop(STAGE_COMPUTE, STAGE_ALU)
    b.dep_push(STAGE_ALU, STAGE_STORE)              # an ALU token carrier
    assert isinstance(b.insns[-1], AluInsn) and b.insns[-1].deps.pop_prev
    assert b.insns[-1].deps.push_next
    b.dep_pop(STAGE_ALU, STAGE_STORE)
    b.dep_push(STAGE_STORE, STAGE_COMPUTE)
    b.dep_pop(STAGE_STORE, STAGE_COMPUTE)
    prog = b.finish()
    Simulator(ALU).run(prog.stream())
    simulate_timing(prog)
    check_hazards(prog)


@pytest.mark.parametrize("v", [1, 2])
def test_layers_bit_exact_and_ordered(v):
    rng = np.random.default_rng(1)
    seg, (l1, w1, l2, w2, l3) = _three_layers(ALU, v, rng)
    assert any(stage_of(i, True) == STAGE_ALU for i in seg.program.insns)
    x = rng.integers(-128, 128, (1, 32, 14, 14), dtype=np.int8)
    run = run_segment(seg, {"x": x})
    want = reference(l3, reference(l2, reference(l1, x, w1, np.zeros(48, np.int32)), w2))
    assert np.array_equal(run.outputs["p/out"], want)
    assert check_hazards(seg.program) > 0
    # the same values as the published design's stream
    base, _ = _three_layers(PRESETS["pynq"], v, np.random.default_rng(1))
    assert np.array_equal(run_segment(base, {"x": x}).outputs["p/out"], want)


@pytest.mark.parametrize("v", [1, 2])
def test_alu_layers_and_dense(v):
    rng = np.random.default_rng(2)
    ctx = LoweringContext(ALU)
    shape = (2, 40, 9, 9)
    a, b = ctx.input("a", shape), ctx.input("b", shape)
    add = ResidualAdd("add", shape, 1, 0, 1, -128, 127)
    s = lower_residual_add(ctx, add, a, b, vthreads=v)
    pool = Pool2d("avg", "avg", shape, (2, 2), (2, 2))
    q = lower_pool2d(ctx, pool, s, vthreads=v)
    rq = RequantizeLayer("rq", q.nchw, Requant(tuple([1, 0, -1, 2] * 10), -20, 90))
    r = lower_requantize(ctx, rq, q, vthreads=v)
    seg = ctx.finish([r])
    xa = rng.integers(-128, 128, shape, dtype=np.int8)
    xb = rng.integers(-128, 128, shape, dtype=np.int8)
    run = run_segment(seg, {"a": xa, "b": xb})
    want = reference(rq, reference(pool, reference(add, xa, xb)))
    assert np.array_equal(run.outputs["rq/out"], want)
    check_hazards(seg.program)

    ctx = LoweringContext(ALU)
    x = ctx.input("x", (4, 64))
    d = Dense("fc", 4, 64, 40, Requant(6, -128, 127))
    w = rng.integers(-128, 128, (40, 64), dtype=np.int8)
    bias = rng.integers(-99, 99, 40).astype(np.int32)
    y = lower_dense(ctx, d, x, w, bias, vthreads=v)
    seg = ctx.finish([y])
    xin = rng.integers(-128, 128, (4, 64), dtype=np.int8)
    assert np.array_equal(run_segment(seg, {"x": xin}).outputs[y.buffer],
                          reference(d, xin, w, bias))
    check_hazards(seg.program)


def test_cycle_model_overlaps_alu_with_gemm():
    """A compute-bound layer (C11-like: 3x3, 128 -> 128 channels at 7x7): the ALU stage hides
    the requantisation behind the next tile's GEMMs."""
    layer = Conv2d("c", (1, 128, 7, 7), 128, (3, 3), (1, 1), (1, 1, 1, 1),
                   requant=Requant(8, 0, 127))
    rng = np.random.default_rng(3)
    w = rng.integers(-8, 8, (128, 128, 3, 3), dtype=np.int8)
    cycles = {}
    for cfg in (PRESETS["pynq"], ALU):
        ctx = LoweringContext(cfg)
        x = ctx.input("x", layer.in_shape)
        y = lower_conv2d(ctx, layer, x, w, None, vthreads=2)
        seg = ctx.finish([y])
        r = simulate_timing(seg.program)
        cycles[cfg.name] = r.total_cycles
        if cfg.alu_stage:
            assert set(r.busy) == {"load", "compute", "store", "alu"} and r.busy["alu"] > 0
            xin = rng.integers(-128, 128, layer.in_shape, dtype=np.int8)
            assert np.array_equal(run_segment(seg, {"x": xin}).outputs[y.buffer],
                                  reference(layer, xin, w))
    assert cycles["pynq_alu"] < 0.95 * cycles["pynq"], cycles


def test_resnet18_bit_exact_on_pynq_alu():
    """A small zoo ResNet-18 (as tests/targets/vta/e2e builds it) compiled for vta:pynq_alu."""
    g = import_model(zoo.build("resnet18", size=32, width=0.25, num_classes=10, seed=0))
    rng = np.random.default_rng(1)
    calib = [{v.name: rng.standard_normal(v.type.shape).astype(v.type.dtype) for v in g.inputs}
             for _ in range(2)]
    m = retarget.compile(g, "vta:pynq_alu", calibration=calib)
    rng = np.random.default_rng(2)
    x = {v.name: rng.standard_normal(v.type.shape).astype(v.type.dtype) for v in g.inputs}
    got = m.run(x)
    ref = run_graph(m.graph, x)
    for k in ref:
        assert got[k].dtype == ref[k].dtype and np.array_equal(got[k], ref[k]), k
    progs = [k.program for k in m.kernels.values()]
    assert progs
    for p in progs:
        assert p.config.alu_stage
        check_hazards(p)
    m.close()
