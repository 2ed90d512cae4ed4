"""swTVM's buffering algorithms on the loop-nest IR: the paper's worked GEMM (Fig. 2) number by
number, then the property that buffering + reordering + copy insertion never change what a
kernel computes and never use more local memory than given."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import event, given, settings, strategies as st

from retarget.loopnest import (Binary, Const, Copy, Kernel, Load, Loop, Store, Tensor, Unary, aff,
                               loads, run_kernel, verify_kernel, walk)
from retarget.loopnest.buffering import (CapacityError, Unbufferable, VarClasses, buffer_bytes,
                                         buffer_kernel, classify, copy_depths, copy_transfers,
                                         correlation, merge_adjacent_copies, operands,
                                         order_outer_loops, plan_buffers)
from retarget.loopnest.schedule import Axis, distribute, nest, parallel, perfect_band

KB = 1024


# ---- kernels ---------------------------------------------------------------------------------
def axes(**extents: int) -> list[Axis]:
    return [Axis(v, n) for v, n in extents.items()]


def gemm(m, k, n, init=True) -> Kernel:
    """C[x, y] (+)= sum_k A[x, k] * B[k, y], loops x, y, k as in the paper's Fig. 2."""
    A, B, C = Tensor("A", (m, k)), Tensor("B", (k, n)), Tensor("C", (m, n))
    prod = Binary("*", Load(A["x", "k"]), Load(B["k", "y"]))
    red = Loop("k", k, (Store(C["x", "y"], prod, "+"),))
    body = (Store(C["x", "y"], Const(0.0)), red) if init else (red,)
    return Kernel("gemm", (A, B), (C,), (Loop("x", m, (Loop("y", n, body),)),))


def gemm_relu(m, k, n) -> Kernel:
    g = gemm(m, k, n)
    C, R = g.outputs[0], Tensor("R", (m, n))
    relu = Store(R["x", "y"], Binary("max", Load(C["x", "y"]), Const(0.0)))
    return Kernel("gemm_relu", g.inputs, (C, R), g.body + nest(axes(x=m, y=n), (relu,)))


def gemm_bias(m, k, n) -> Kernel:
    """C = bias broadcast, then C += A @ B: an init that is not a constant does not fold."""
    g = gemm(m, k, n)
    bias = Tensor("bias", (n,))
    init = Loop("x", m, (Loop("y", n, (Store(g.outputs[0]["x", "y"], Load(bias["y"])),)),))
    main = Loop("x", m, (Loop("y", n, (g.body[0].body[0].body[1],)),))
    return Kernel("gemm_bias", g.inputs + (bias,), g.outputs, (init, main))


def conv(c, f, oh, ow, kh, kw, s) -> Kernel:
    """out[ff, yy, xx] = sum inp[rc, yy*s + ry, xx*s + rx] * w[ff, rc, ry, rx] (Fig. 3)."""
    inp = Tensor("inp", (c, (oh - 1) * s + kh, (ow - 1) * s + kw))
    w, out = Tensor("w", (f, c, kh, kw)), Tensor("out", (f, oh, ow))
    window = inp["rc", aff("yy") * s + "ry", aff("xx") * s + "rx"]
    prod = Binary("*", Load(window), Load(w["ff", "rc", "ry", "rx"]))
    acc = Store(out["ff", "yy", "xx"], prod, "+")
    red = nest(axes(rc=c, ry=kh, rx=kw), (acc,))
    body = (Store(out["ff", "yy", "xx"], Const(0.0)),) + red
    return Kernel("conv", (inp, w), (out,), nest(axes(ff=f, yy=oh, xx=ow), body))


def elementwise(m, n) -> Kernel:
    x, b, out = Tensor("x", (m, n)), Tensor("b", (n,)), Tensor("out", (m, n))
    v = Binary("+", Binary("*", Load(x["i", "j"]), Load(b["j"])), Unary("tanh", Load(x["i", "j"])))
    return Kernel("ew", (x, b), (out,), nest(axes(i=m, j=n), (Store(out["i", "j"], v),)))


def stencil(n) -> Kernel:
    """y[i] = x[i] + x[i+1] * x[i+2]: three accesses, one box."""
    x, y = Tensor("x", (n + 2,)), Tensor("y", (n,))
    v = Binary("+", Load(x["i"]), Binary("*", Load(x[aff("i") + 1]), Load(x[aff("i") + 2])))
    return Kernel("stencil", (x,), (y,), (Loop("i", n, (Store(y["i"], v),)),))


def outer(n) -> Kernel:
    """out[i, j] = x[i] * x[j] + x[i]: x moves with two loops, so two buffers of it."""
    x, out = Tensor("x", (n,)), Tensor("out", (n, n))
    v = Binary("+", Binary("*", Load(x["i"]), Load(x["j"])), Load(x["i"]))
    return Kernel("outer", (x,), (out,), nest(axes(i=n, j=n), (Store(out["i", "j"], v),)))


def rowmax(m, n) -> Kernel:
    x, mx = Tensor("x", (m, n)), Tensor("mx", (m,))
    running = Store(mx["i"], Load(x["i", "j"]), "max")
    body = (Store(mx["i"], Const(-math.inf)), Loop("j", n, (running,)))
    return Kernel("rowmax", (x,), (mx,), (Loop("i", m, body),))


def random_inputs(k: Kernel, seed=0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {t.name: rng.standard_normal(t.shape).astype(t.dtype) for t in k.inputs}


def global_touches(k: Kernel) -> list[str]:
    """Stores and loads of global tensors outside copies: slave code may not have any."""
    out = []
    for s, _ in walk(k.body):
        if isinstance(s, Store):
            out += [str(a) for a in [s.dst] + [ld.access for ld in loads(s.value)]
                    if a.tensor.scope == "global"]
    return out


def check_same(k: Kernel, capacity: int, outputs=None, seed=0) -> tuple[Kernel, object]:
    """Buffer `k` in `capacity` bytes; check the result computes the same, fits, and only
    touches global memory through copies."""
    got_k, report = buffer_kernel(k, capacity)
    verify_kernel(got_k, capacity)
    assert got_k.local_bytes == report.local_bytes <= capacity
    assert report.local_bytes == sum(n.plan.total_bytes for n in report.nests)
    assert global_touches(got_k) == []
    ins = random_inputs(k, seed)
    want = run_kernel(k, ins, outputs)
    got = run_kernel(got_k, ins, outputs)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-5, err_msg=name)
    return got_k, report


# ---- the paper's worked example (Fig. 2): M = 1, K = N = 1024, float32, 64 KB LDM ---------------
def main_band(k: Kernel):
    return perfect_band(distribute(k).body[-1])


def test_correlation_and_classification_of_the_gemm():
    ops = {op.key: op for op in operands(main_band(gemm(1, 1024, 1024)))}
    assert correlation(ops.values()) == {"C": (frozenset("x"), frozenset("y")),
                                         "A": (frozenset("x"), frozenset("k")),
                                         "B": (frozenset("k"), frozenset("y"))}
    assert ops["C"].reads and ops["C"].writes and ops["C"].reduce == "+"
    assert not ops["A"].writes
    # the paper: x, y and k are numvar, sizevar and compvar
    every = frozenset("xyk")
    assert classify("xyk", list(ops.values()), every) == VarClasses(("y",), ("x",), ("k",))
    # UPDATE(UP) y (its whole range buffered): C's and B's curBufDim move up a dimension, so
    # k only sizes buffers now and x sizes C's while still counting A's copies
    assert classify("xyk", list(ops.values()), every - {"y"}) == VarClasses(("k",), (), ("x",))
    # UPDATE(DOWN) y restores the first classification
    assert classify("xyk", list(ops.values()), every) == VarClasses(("y",), ("x",), ("k",))


def test_buffer_sizes_of_the_paper_gemm():
    band = main_band(gemm(1, 1024, 1024))
    ops = operands(band)
    assert buffer_bytes(ops, {"y": 64, "k": 64}) == 16.5 * KB
    assert buffer_bytes(ops, {"y": 128, "k": 64}) == 32.75 * KB
    assert buffer_bytes(ops, {"y": 128, "k": 128}) == 65 * KB
    plan = plan_buffers(band.axes, ops, 64 * KB)
    assert dict(plan.extents) == {"x": 1, "y": 128, "k": 64}
    assert dict(plan.operand_bytes) == {"C": 512, "A": 256, "B": 32 * KB}
    # the paper's narrative: y = 64, then k = 64 (16.5 KB); expanding, y = 128 (32.75 KB),
    # then k = 128 would need 65 KB > 64 KB
    steps = [(s.phase, s.var, s.extent, s.bytes, s.fits) for s in plan.trace]
    assert steps[:4] == [("initial", "y", 64, 516, True), ("initial", "k", 64, 16.5 * KB, True),
                         ("expand", "y", 128, 32.75 * KB, True),
                         ("expand", "k", 128, 65 * KB, False)]
    assert all(not s.fits for s in plan.trace[3:])


def test_limits_cap_a_variable_and_the_rest_grow_into_the_room():
    band = main_band(gemm(1, 1024, 1024))
    ops = operands(band)
    plan = plan_buffers(band.axes, ops, 64 * KB, limits={"y": 16})
    assert plan.extent("y") == 16 and plan.total_bytes <= 64 * KB
    assert plan.extent("k") > 64            # k takes the room y leaves
    assert all(s.extent <= 16 for s in plan.trace if s.var == "y")


def test_loop_order_of_the_paper_gemm():
    # after the split y -> y_o * 128 + y_i, k -> k_o * 64 + k_i the outer loops are x (1),
    # y_o (8), k_o (16). A candidate placed just outside the buffered loops costs, per tensor,
    # every remaining iteration (1 * 8 * 16 = 128) if the tensor depends on it, else the other
    # loops' iterations: x: A 128 + B 128 + C 128 = 256 + 128; y_o: 256 + A's 16;
    # k_o: 256 + C's 8, the fewest, so k_o goes innermost.
    corr = {"C": frozenset({"x", "y_o"}), "A": frozenset({"x", "k_o"}),
            "B": frozenset({"k_o", "y_o"})}
    lo = order_outer_loops([("x", 1), ("y_o", 8), ("k_o", 16)], corr)
    assert dict(lo.steps[0]) == {"x": 256 + 128, "y_o": 256 + 16, "k_o": 256 + 8}
    # then only C's copy is left to place: x and y_o both cost 8; the tie keeps the order
    assert dict(lo.steps[1]) == {"x": 8, "y_o": 8}
    assert lo.order == ("x", "y_o", "k_o")
    # Algorithm 3: A's and B's copies go inside k_o, C's inside y_o (around the k_o loop)
    iters = {"C": corr["C"] | {"y_i"}, "A": corr["A"] | {"k_i"}, "B": corr["B"] | {"k_i", "y_i"}}
    assert copy_depths(lo.order, iters, frozenset({"y_i", "k_i"})) == {"C": 2, "A": 3, "B": 3}


def test_buffered_paper_gemm_is_fig2():
    k, report = buffer_kernel(gemm(1, 1024, 1024), 64 * KB)
    (nest,) = report.nests                    # the C = 0 nest was folded into the buffer
    assert nest.folded == ("C",) and nest.order.order == ("x", "y_o", "k_o")
    assert nest.inner == ("y_i", "k_i")
    assert {t.name: t.shape for t in k.locals} == {"C_local": (1, 128), "A_local": (1, 64),
                                                  "B_local": (64, 128)}
    assert k.local_bytes == 32.75 * KB
    x = k.body[0]
    assert (x.var, x.body[0].var) == ("x", "y_o")
    fill, ko, put = x.body[0].body             # fill C_local with 0; for k_o; put C_local
    assert isinstance(fill, Loop) and isinstance(ko, Loop) and ko.var == "k_o"
    get_a, get_b, compute = ko.body
    # the A box is one 64-float transfer, the B box 64 rows of 128 (not contiguous in B)
    assert copy_transfers(get_a) == (1, 64) and copy_transfers(get_b) == (64, 128)
    assert str(get_b) == "copy B_local[0, 0] <- B[64*k_o, 128*y_o] box [64, 128]"
    assert str(put) == "copy C[x, 128*y_o] <- C_local[0, 0] box [1, 128]"
    assert copy_transfers(put) == (1, 128)
    assert str(compute.body[0].body[0]) == \
        "C_local[0, y_i] += (A_local[0, k_i] * B_local[k_i, y_i])"


def test_without_init_the_accumulator_is_read_and_written():
    k = gemm(4, 20, 24, init=False)
    c0 = np.random.default_rng(3).standard_normal((4, 24)).astype(np.float32)
    got, report = check_same(k, 300, {"C": c0})
    copies = [s for s, _ in walk(got.body) if isinstance(s, Copy)]
    assert [c.dst.tensor.name for c in copies if c.src.tensor.name == "C"] == ["C_local"]
    assert [c.src.tensor.name for c in copies if c.dst.tensor.name == "C"] == ["C_local"]


# ---- meaning is preserved ----------------------------------------------------------------------
@pytest.mark.parametrize("capacity", [12, 100, 300, 1000, 5000])
def test_small_gemm_tiles_and_computes_the_same(capacity):
    got, report = check_same(gemm(4, 20, 24), capacity)
    plan = report.nests[0].plan
    if capacity < 5000:
        assert any(1 <= e < n for (_, e), (_, n) in zip(plan.extents, plan.ranges) if n > 1)
    if capacity == 12:
        assert set(dict(plan.extents).values()) == {1}


def test_gemm_with_an_epilogue_shares_the_capacity():
    got, report = check_same(gemm_relu(3, 8, 10), 400)
    assert len(report.nests) == 2 and report.nests[0].folded == ("C",)
    assert got.local_bytes <= 400


def test_an_init_that_does_not_fold_is_a_put_only_nest():
    got, report = check_same(gemm_bias(3, 6, 8), 200)
    assert len(report.nests) == 2 and report.nests[1].folded == ()
    init = got.body[: len(got.body) - 1]
    copies = [s for s, _ in walk(init) if isinstance(s, Copy)]
    assert {(c.src.tensor.name, c.dst.tensor.name) for c in copies} == {("bias", "bias_local"),
                                                                        ("C_local", "C")}


def test_loops_come_out_serial_and_the_outer_one_can_be_parallelised():
    k = parallel(gemm(1, 1024, 1024), "y")
    got, report = buffer_kernel(k, 64 * KB)
    assert all(s.kind == "serial" for s, _ in walk(got.body) if isinstance(s, Loop))
    verify_kernel(parallel(got, "y_o"))          # the put of C indexes y_o: disjoint writes


def test_a_statement_outside_any_loop_is_buffered_too():
    x, y = Tensor("x", (3,)), Tensor("y", (2,))
    k = Kernel("scalar", (x,), (y,), (Store(y[1], Binary("*", Load(x[2]), Const(2.0))),))
    got, report = check_same(k, 8)
    assert [str(s) for s in got.body] == ["copy x_local[0] <- x[2] box [1]",
                                          "y_local[0] = (x_local[0] * 2)",
                                          "copy y[1] <- y_local[0] box [1]"]


def test_strided_conv_boxes_cover_the_window():
    k = conv(2, 3, 3, 3, 3, 3, 2)
    got, report = check_same(k, 10 ** 5)
    inp_local = next(t for t in got.locals if t.name == "inp_local")
    assert inp_local.shape == k.inputs[0].shape       # everything fits: one box each
    got, report = check_same(k, 200)
    assert got.local_bytes <= 200


def test_stencil_and_outer_product():
    got, _ = check_same(stencil(8), 24)
    assert any(t.shape == (4,) for t in got.locals)   # x box: 2 outputs need 4 inputs
    got, _ = check_same(outer(6), 60)
    assert sorted(t.name for t in got.locals) == ["out_local", "x_2_local", "x_local"]


def test_max_reduction_folds_its_minus_infinity_init():
    got, report = check_same(rowmax(3, 7), 40)
    assert report.nests[0].folded == ("mx",)


# ---- property: any small nest, any capacity ------------------------------------------------------
@st.composite
def kernels(draw):
    """(kernel, the least capacity it can be buffered in, initial outputs or None)"""
    family = draw(st.sampled_from(["gemm", "gemm_acc", "gemm_relu", "gemm_bias", "conv", "ew",
                                   "stencil", "outer", "rowmax"]))
    d = lambda lo, hi: draw(st.integers(lo, hi))
    if family == "gemm":
        return gemm(d(1, 5), d(1, 8), d(1, 8)), 12, None
    if family == "gemm_acc":
        m, n = d(1, 4), d(1, 6)
        return gemm(m, d(1, 6), n, init=False), 12, {"C": np.full((m, n), 0.5, np.float32)}
    if family == "gemm_relu":
        return gemm_relu(d(1, 3), d(1, 4), d(1, 4)), 20, None
    if family == "gemm_bias":
        return gemm_bias(d(1, 3), d(1, 5), d(1, 5)), 20, None
    if family == "conv":
        return conv(d(1, 3), d(1, 2), d(1, 3), d(1, 3), d(1, 3), d(1, 3), d(1, 2)), 12, None
    if family == "ew":
        return elementwise(d(1, 4), d(1, 8)), 12, None
    if family == "stencil":
        return stencil(d(1, 12)), 16, None
    if family == "outer":
        return outer(d(1, 6)), 12, None
    return rowmax(d(1, 4), d(1, 8)), 8, None


@settings(max_examples=300, deadline=None)
@given(kernels(), st.data())
def test_buffering_never_changes_results_nor_overflows(case, data):
    k, least, outputs = case
    whole = 2 * sum(t.nbytes for t in k.params) + 64
    if data.draw(st.integers(0, 9), label="below the least") == 0:
        with pytest.raises(CapacityError, match="cannot hold"):
            buffer_kernel(k, data.draw(st.integers(1, least - 1), label="capacity"))
        return
    capacity = data.draw(st.integers(least, whole), label="capacity")
    _, report = check_same(k, capacity, outputs)
    tiled = any(e < r for n in report.nests
                for (_, e), (_, r) in zip(n.plan.extents, n.plan.ranges))
    event(f"{k.name}: {'tiled' if tiled else 'whole tensors buffered'}")


# ---- errors ------------------------------------------------------------------------------------
def test_capacity_too_small_even_for_one_element():
    with pytest.raises(CapacityError, match=r"11 bytes cannot hold one element.*\(12 bytes\)"):
        buffer_kernel(gemm(4, 20, 24), 11)
    band = main_band(gemm(4, 20, 24))
    with pytest.raises(CapacityError, match="needs 12 bytes"):
        plan_buffers(band.axes, operands(band), 8)


def test_unsupported_nests_say_why():
    x, y = Tensor("x", (5, 3)), Tensor("y", (5,))
    last_write = Kernel("last", (x,), (y,),
                        nest(axes(i=5, j=3), (Store(y["i"], Load(x["i", "j"])),)))
    with pytest.raises(Unbufferable, match=r"updated across iterations of \['j'\]"):
        buffer_kernel(last_write, 1000)
    xp, yp = Tensor("x", (5,)), Tensor("y", (5,))
    padded = Kernel("pad", (xp,), (yp,),
                    (Loop("i", 5, (Store(yp["i"], Load(xp[aff("i") + 1], 0.0)),)),))
    with pytest.raises(Unbufferable, match="out of bounds"):
        buffer_kernel(padded, 1000)
    z = Tensor("z", (5, 3))
    imperfect = Kernel("imp", (xp,), (yp, z), (Loop("i", 4, (
        Store(yp[aff("i") + 1], Load(xp["i"])),
        Loop("j", 3, (Store(z["i", "j"], Load(yp["i"])),)))),))
    with pytest.raises(Unbufferable, match="not a perfect loop nest"):
        buffer_kernel(imperfect, 1000)
    shifted = Kernel("shift", (xp,), (yp,), (Loop("i", 4, (
        Store(yp["i"], Binary("+", Load(yp[aff("i") + 1]), Load(xp["i"]))),)),))
    with pytest.raises(Unbufferable, match="more than one index"):
        buffer_kernel(shifted, 1000)
    buffered, _ = buffer_kernel(gemm(2, 2, 2), 1000)
    with pytest.raises(Unbufferable, match="already has local buffers"):
        buffer_kernel(buffered, 1000)
    assert isinstance(Unbufferable("x"), NotImplementedError)


def test_adjacent_copies_merge_when_contiguous_in_both():
    x, buf = Tensor("x", (4, 8)), Tensor("buf", (4, 8), scope="local")
    a = Copy(buf[0, 0], x[0, 0], (2, 8))
    b = Copy(buf[2, 0], x[2, 0], (2, 8))
    (merged,) = merge_adjacent_copies((a, b))
    assert merged.extents == (4, 8) and copy_transfers(merged) == (1, 32)
    # a gap, or different tensors, stay apart
    gap = Copy(buf[3, 0], x[3, 0], (1, 8))
    assert merge_adjacent_copies((a, gap)) == (a, gap)
    y = Tensor("y", (4, 8))
    other = Copy(buf[2, 0], y[2, 0], (2, 8))
    assert merge_adjacent_copies((a, other)) == (a, other)
    # inside a loop too
    body = merge_adjacent_copies((Loop("i", 2, (a, b)),))
    assert body[0].body == (merged,)
    # a box of half rows is one transfer per row
    assert copy_transfers(Copy(buf[0, 0], x[0, 0], (4, 4))) == (4, 4)
