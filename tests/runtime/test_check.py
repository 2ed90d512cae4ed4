"""runtime/check.py: the one output-vs-reference rule (`run --check`, `demo`, explore's spot
check) and the seeded random inputs they use."""
from __future__ import annotations

import numpy as np
import pytest

from retarget.errors import InputError
from retarget.ir.graph import Graph, Value
from retarget.ir.types import TensorType
from retarget.runtime.check import check_outputs, outputs_match, random_inputs
from retarget.targets.registry import get_target


def test_a_bit_exact_target_needs_equal_values_and_dtype():
    vta = get_target("vta")
    ref = np.arange(6, dtype=np.int8).reshape(2, 3)
    assert outputs_match(vta, ref.copy(), ref)
    assert not outputs_match(vta, ref + np.int8(1), ref)
    assert not outputs_match(vta, ref.astype(np.int32), ref)
    assert not outputs_match(vta, ref.reshape(3, 2), ref)


def test_a_float_target_uses_its_own_check_rtol():
    c = get_target("c")
    ref = np.full(4, 100.0, np.float32)
    within = ref * np.float32(1 + 0.5 * c.check_rtol)
    beyond = ref * np.float32(1 + 20 * c.check_rtol)
    assert outputs_match(c, within, ref)
    assert not outputs_match(c, beyond, ref)


def test_check_outputs_names_each_output_and_fails_a_missing_one():
    vta = get_target("vta")
    ref = {"y": np.zeros(3, np.int8), "z": np.ones(2, np.int8)}
    checks = check_outputs(vta, {"y": np.array([0, 0, 2], np.int8)}, ref)
    assert [(c.name, c.ok) for c in checks] == [("y", False), ("z", False)]
    assert checks[0].max_abs_diff == 2.0 and checks[0].verdict() == "MISMATCH"
    ok = check_outputs(vta, ref, ref)
    assert all(c.ok for c in ok) and ok[0].verdict() == "bit-exact vs the integer reference"


def test_random_inputs_are_seeded_typed_and_keep_given_arrays():
    x = Value("x", TensorType((2, 3), "float32"))
    ids = Value("ids", TensorType((4,), "int64"))
    g = Graph([], [x, ids], [], "g")
    given = {"ids": np.arange(4)}
    a, b = random_inputs(g, 3, given), random_inputs(g, 3, given)
    assert a["ids"] is given["ids"] and a["x"].dtype == np.float32 and a["x"].shape == (2, 3)
    np.testing.assert_array_equal(a["x"], b["x"])
    assert not np.array_equal(a["x"], random_inputs(g, 4)["x"])
    ints = random_inputs(g, 0)["ids"]
    assert ints.dtype == np.int64 and ints.min() >= 0 and ints.max() < 10
    with pytest.raises(InputError, match="non-negative"):
        random_inputs(g, -1)
