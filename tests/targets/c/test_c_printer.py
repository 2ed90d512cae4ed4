"""The C printer (loopnest/c_printer.py): hand-made kernels printed, compiled with gcc
(-Wall -Werror), called through ctypes and compared with the reference interpreter
(run_kernel) on random inputs; and what the printed text says."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

from retarget.errors import GraphError
from retarget.loopnest import (Kernel, Load, Loop, Store, Tensor, aff,
                               run_kernel, verify_kernel)
from retarget.loopnest.c_printer import (c_float, c_identifier, covered_box, kernel_work,
                                         outputs_needing_zero, print_kernel, print_unit)

from .handmade import (build, call, conv2d, elementwise, gemm, int_scale, maxpool,
                       random_inputs, tiled_scale, window_copy)

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")


def close(got: dict, want: dict, rtol=1e-5, atol=1e-6) -> None:
    assert got.keys() == want.keys()
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=rtol, atol=atol, err_msg=k)


KERNELS = {
    "gemm": gemm(6, 9, 7),
    "gemm_parallel": gemm(6, 9, 7, parallel=True),
    "conv_pad1": conv2d(3, 4, 7, 6, 3, 3, 1, 1),
    "conv_stride2": conv2d(2, 5, 9, 9, 3, 3, 2, 1),
    "conv_5x5_pad2": conv2d(2, 3, 6, 6, 5, 5, 1, 2),
    "maxpool": maxpool(3, 7, 8),
    "elementwise": elementwise(33),
    "tiled_scale_parallel": tiled_scale(8, 16, 2, parallel=True),
    "tiled_scale_serial": tiled_scale(8, 16, 4, parallel=False),
    "window_copy": window_copy(6, 10),
    "int_scale": int_scale(10),
}


@pytest.fixture(scope="module", params=[False, True], ids=["serial", "openmp"])
def compiled(request, tmp_path_factory):
    """Every kernel in one translation unit, built without and with -fopenmp."""
    kernels = []
    for name, k in KERNELS.items():
        verify_kernel(k)
        kernels.append(Kernel(name, k.inputs, k.outputs, k.body, k.locals))
    return build(kernels, tmp_path_factory.mktemp("unit"), openmp=request.param), kernels


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_printed_kernel_equals_the_interpreter(compiled, name):
    lib, kernels = compiled
    k = next(k for k in kernels if k.name == name)
    for seed in range(2):
        x = random_inputs(k, seed)
        close(call(lib, k, x), run_kernel(k, x))


def test_accumulating_output_starts_at_zero_like_run_kernel(tmp_path):
    k = gemm(4, 8, 5, init=False)
    assert outputs_needing_zero(k) == k.outputs
    assert outputs_needing_zero(gemm(4, 8, 5)) == ()
    lib = build([k], tmp_path)
    x = random_inputs(k)
    # the C output buffer starts as garbage (NaN); the memset makes it run_kernel's zeros
    close(call(lib, k, x), run_kernel(k, x))


def test_zero_init_analysis_recognises_covering_boxes():
    # two stores covering the two halves of the output (a concat) need no clearing
    A, B, Y = Tensor("A", (2, 3)), Tensor("B", (2, 3)), Tensor("Y", (4, 3))
    cat = Kernel("cat", (A, B), (Y,), (
        Loop("i", 2, (Loop("j", 3, (Store(Y["i", "j"], Load(A["i", "j"])),)),)),
        Loop("i", 2, (Loop("j", 3, (Store(Y[aff("i") + 2, "j"], Load(B["i", "j"])),)),))))
    assert outputs_needing_zero(cat) == ()
    # only one half: the other half must read as zero
    half = Kernel("half", (A,), (Y,), cat.body[:1])
    assert outputs_needing_zero(half) == (Y,)
    # a strided store (every other row) is not a box
    assert covered_box(Y[aff("i") * 2, "j"], {"i": 2, "j": 3}) is None
    # split loops (4*io + ii) sweep one contiguous range
    assert covered_box(Y[aff("io") * 2 + "ii", "j"], {"io": 2, "ii": 2, "j": 3}) == ((0, 4), (0, 3))


def test_conv_checks_only_the_dimensions_that_can_leave_the_tensor():
    text = print_kernel(conv2d(3, 4, 8, 8, 3, 3, 1, 1))
    # spatial coordinates are tested on both sides; the channel and the batch never
    assert "oh + r - 1 >= 0 && oh + r - 1 < 8 && ow + q - 1 >= 0 && ow + q - 1 < 8 ?" in text
    conditions = [line.split("+= (")[1].split("?")[0] for line in text.splitlines() if "?" in line]
    assert conditions and not any("c " in cond or "n " in cond for cond in conditions)
    # stride 2 without right padding overrun: only the lower bound can fail
    text = print_kernel(conv2d(3, 4, 8, 8, 3, 3, 2, 1))
    assert "2 * oh + r - 1 >= 0 && 2 * ow + q - 1 >= 0 ?" in text and "< 8" not in text
    # a load that can never be in bounds is just its fill; one that always is has no test
    X, Y = Tensor("X", (4,)), Tensor("Y", (4,))
    never = Kernel("never", (X,), (Y,), (Loop("i", 4, (Store(Y["i"], Load(X[aff("i") + 4], 0.5)),)),))
    assert "in0[" not in print_kernel(never) and "= 0.5f;" in print_kernel(never)
    always = Kernel("always", (X,), (Y,), (Loop("i", 4, (Store(Y["i"], Load(X["i"], 0.5)),)),))
    assert "?" not in print_kernel(always)


def test_parallel_pragma_only_on_the_outermost_parallel_loop_and_guarded():
    X, Y = Tensor("X", (4, 6)), Tensor("Y", (4, 6))
    k = Kernel("both", (X,), (Y,), (Loop("i", 4, (Loop("j", 6, (
        Store(Y["i", "j"], Load(X["i", "j"])),), "parallel"),), "parallel"),))
    text = print_kernel(k)
    assert text.count("#pragma omp parallel for") == 1
    assert "#ifdef _OPENMP\n    #pragma omp parallel for\n    #endif\n    for (int i = 0;" in text


def test_locals_are_per_thread_inside_parallel_loops_and_function_scope_otherwise():
    par = print_kernel(tiled_scale(8, 16, 2, parallel=True))
    assert par.index("float local0[32] RT_ALIGN64;") > par.index("for (int io = 0;")
    ser = print_kernel(tiled_scale(8, 16, 2, parallel=False))
    assert ser.index("float local0[32] RT_ALIGN64;") < ser.index("for (int io = 0;")
    # a whole-row box is one memcpy; a partial one a memcpy per row
    assert "memcpy(&local0[0], &in0[16 * (2 * io)], 32 * sizeof(float));" in par
    assert print_kernel(window_copy(6, 10)).count("memcpy(") == 2


@pytest.mark.parametrize("second", ["serial", "parallel"])
def test_a_local_shared_between_a_parallel_loop_and_anything_else_is_refused(second):
    # per-thread copies: what the first loop leaves in L is not what the second one reads
    X, Y, L = Tensor("X", (4,)), Tensor("Y", (4,)), Tensor("L", (4,), scope="local")
    k = Kernel("leak", (X,), (Y,), (
        Loop("i", 4, (Store(L["i"], Load(X["i"])),), "parallel"),
        Loop("j", 4, (Store(Y["j"], Load(L["j"])),), second)), (L,))
    with pytest.raises(GraphError, match="used in more than one place among the parallel"):
        print_kernel(k)


def test_large_tensors_index_in_ptrdiff_t():
    X = Tensor("X", (3, 1 << 30))
    Y = Tensor("Y", (3,))
    k = Kernel("big", (X,), (Y,), (Loop("i", 3, (Store(Y["i"], Load(X["i", 7])),)),))
    assert "in0[(ptrdiff_t)1073741824 * i + 7]" in print_kernel(k)


def test_names_and_literals():
    assert c_identifier("/layer1/conv.0") == "v_layer1_conv_0"
    assert c_identifier("int") == "int_1" and c_identifier("expf") == "expf_1"
    assert c_identifier("x", taken={"x", "x_1"}) == "x_2"
    assert c_float(0.1) == "0.1f" and c_float(2) == "2.0f" and c_float(-1.5) == "(-1.5f)"
    assert c_float(float("-inf")) == "(-INFINITY)" and c_float(float("nan")) == "NAN"
    text = print_unit([gemm(2, 3, 4)])
    assert text.startswith("#include <math.h>") and "void gemm(" in text
    assert "/* kernel gemm */" in text and "const float *restrict in0,  /* A: float32[2, 3] */" in text


def test_kernel_work_counts_statement_executions():
    # per execution: the store plus its value's loads (the reduction's read of C is the store)
    assert kernel_work(gemm(4, 8, 5)) == 4 * 5 * 1 + 4 * 5 * 8 * 3
    assert kernel_work(tiled_scale(8, 16, 2, False)) == 4 * (32 + 2 * 16 * 2 + 32)
