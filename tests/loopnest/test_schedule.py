"""Schedule primitives: split, reorder, parallel, distribute, perfect bands. Each keeps what
the kernel computes (run before and after) and says clearly when it cannot apply."""
from __future__ import annotations

import numpy as np
import pytest

from retarget.errors import GraphError
from retarget.loopnest import (Binary, Const, Kernel, Load, Loop, Store, Tensor, aff, run_kernel,
                               verify_kernel)
from retarget.loopnest.schedule import (Axis, ScheduleError, distribute, nest, parallel,
                                        perfect_band, reorder, split)


def gemm(m=4, k=6, n=5, init=True) -> Kernel:
    A, B, C = Tensor("A", (m, k)), Tensor("B", (k, n)), Tensor("C", (m, n))
    prod = Binary("*", Load(A["i", "k"]), Load(B["k", "j"]))
    red = Loop("k", k, (Store(C["i", "j"], prod, "+"),))
    body = (Store(C["i", "j"], Const(0.0)), red) if init else (red,)
    return Kernel("gemm", (A, B), (C,), (Loop("i", m, (Loop("j", n, body),)),))


def run_gemm(k: Kernel) -> np.ndarray:
    rng = np.random.default_rng(1)
    A, B = k.inputs
    a = rng.standard_normal(A.shape).astype(np.float32)
    b = rng.standard_normal(B.shape).astype(np.float32)
    got = run_kernel(k, {"A": a, "B": b})["C"]
    np.testing.assert_allclose(got, a @ b, rtol=1e-5, atol=1e-5)
    return got


def loop_vars(stmts) -> list[tuple[str, int]]:
    out = []
    for s in stmts:
        if isinstance(s, Loop):
            out.append((s.var, s.extent))
            out += loop_vars(s.body)
    return out


def test_split_rewrites_indices_and_keeps_meaning():
    k = split(gemm(), "k", 3)
    assert loop_vars(k.body) == [("i", 4), ("j", 5), ("k_o", 2), ("k_i", 3)]
    band = perfect_band(k.body[0].body[0].body[1])
    assert band.vars == ("k_o", "k_i")
    assert band.body[0].value.a.access.index[1] == aff("k_o") * 3 + "k_i"
    verify_kernel(k)
    run_gemm(k)
    # factors 1 and the full extent are trivial but legal; custom names
    k2 = split(gemm(), "i", 4, outer="io", inner="ii")
    assert loop_vars(k2.body)[:2] == [("io", 1), ("ii", 4)]
    run_gemm(split(k2, "j", 1))


def test_split_errors_name_the_loop():
    with pytest.raises(ScheduleError, match=r"loop 'k'.*factor 4 does not divide its extent 6"):
        split(gemm(), "k", 4)
    with pytest.raises(ValueError, match="no loop 'q'"):
        split(gemm(), "q", 2)
    with pytest.raises(ScheduleError, match="positive int"):
        split(gemm(), "k", 0)
    with pytest.raises(ScheduleError, match=r"\['k_i'\] are already loop variables"):
        split(split(gemm(), "k", 2), "k_o", 1, outer="kk", inner="k_i")


def test_reorder_permutes_a_perfect_band():
    k = reorder(gemm(init=False), ["k", "j", "i"])
    assert loop_vars(k.body) == [("k", 6), ("j", 5), ("i", 4)]
    run_gemm(k)
    # a sub-band, with kinds travelling with their loops
    k = reorder(parallel(gemm(init=False), "i"), ["j", "k"])
    assert [lp for lp in loop_vars(k.body)] == [("i", 4), ("j", 5), ("k", 6)]
    k = reorder(parallel(gemm(init=False), "i"), ["k", "i", "j"])
    assert k.body[0].var == "k" and k.body[0].kind == "serial"
    assert k.body[0].body[0].kind == "parallel"


def test_reorder_errors():
    with pytest.raises(ScheduleError, match="not perfectly nested"):
        reorder(gemm(init=True), ["i", "j", "k"])     # C = 0 sits between j and k
    with pytest.raises(ScheduleError, match="not perfectly nested"):
        reorder(gemm(init=False), ["i", "k"])          # j sits between them
    with pytest.raises(ScheduleError, match=r"no loop \['z'\]"):
        reorder(gemm(init=False), ["i", "z"])
    with pytest.raises(ScheduleError, match="twice"):
        reorder(gemm(init=False), ["i", "i"])


def test_parallel_marks_the_loop_and_the_verifier_judges_it():
    k = parallel(gemm(), "i")
    assert k.body[0].kind == "parallel"
    verify_kernel(k)
    with pytest.raises(GraphError, match="would write the same elements"):
        verify_kernel(parallel(gemm(init=False), "k"))
    with pytest.raises(ScheduleError, match="no loop 'z'"):
        parallel(gemm(), "z")


def test_perfect_band_and_nest_round_trip():
    k = gemm(init=False)
    band = perfect_band(k.body)
    assert band.axes == (Axis("i", 4), Axis("j", 5), Axis("k", 6))
    assert len(band.body) == 1 and isinstance(band.body[0], Store)
    assert band.stmts() == k.body and nest(band.axes, band.body) == k.body
    assert perfect_band(band.body[0]).axes == ()
    with pytest.raises(ScheduleError, match="inside loop 'j'"):
        perfect_band(gemm(init=True).body)


def test_distribute_splits_the_init_off_a_reduction():
    k = distribute(gemm(init=True))
    assert len(k.body) == 2
    init, main = (perfect_band(s) for s in k.body)
    assert init.vars == ("i", "j") and init.body[0].value == Const(0.0)
    assert main.vars == ("i", "j", "k")
    verify_kernel(k)
    run_gemm(k)


def test_distribute_leaves_a_loop_alone_when_a_dependence_would_cross():
    x, y, z = Tensor("x", (5,)), Tensor("y", (6,)), Tensor("z", (5, 3))
    # y[i + 1] is written in iteration i and read by the inner loop of iteration i + 1:
    # after fission every write would come before every read
    body = (Loop("i", 5, (Store(y[aff("i") + 1], Load(x["i"])),
                          Loop("j", 3, (Store(z["i", "j"], Load(y["i"])),)))),)
    k = Kernel("dep", (x,), (y, z), body)
    assert distribute(k) == k
    with pytest.raises(ScheduleError, match="not a perfect loop nest"):
        perfect_band(distribute(k).body[0])
    # the same with y[i] in both places is legal
    body = (Loop("i", 5, (Store(y["i"], Load(x["i"])),
                          Loop("j", 3, (Store(z["i", "j"], Load(y["i"])),)))),)
    k = Kernel("ok", (x,), (y, z), body)
    d = distribute(k)
    assert len(d.body) == 2
    xs = np.arange(5, dtype=np.float32)
    for a, b in zip(run_kernel(k, {"x": xs}).values(), run_kernel(d, {"x": xs}).values()):
        np.testing.assert_array_equal(a, b)
