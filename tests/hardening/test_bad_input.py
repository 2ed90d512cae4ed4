"""Bad input anywhere a user can give it ends in one line naming the problem and exit code 2
(never a traceback, a hang, or a silent wrong answer): models, input and calibration files,
config values, data-sized ops, and the Gemm bias forms vta must accept."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper
from onnx import numpy_helper as nh

import retarget
from retarget import cli
from retarget.errors import InputError, ResourceLimitError
from retarget.frontend.onnx import import_model
from retarget.limits import tensor_limit
from retarget.ops.reference import run_graph

vi = helper.make_tensor_value_info


def model(nodes, ins, inits=(), outs=("y",)):
    m = helper.make_model(helper.make_graph(nodes, "g", ins, [vi(o, T.FLOAT, None) for o in outs],
                                            list(inits)),
                          opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def save(tmp_path, m, name="m.onnx"):
    path = tmp_path / name
    path.write_bytes(m.SerializeToString())
    return str(path)


def one_line_exit_2(argv, capsys, *words):
    code = cli.main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2, err
    assert len(err) == 1 and "Traceback" not in err[0], err
    for w in words:
        assert w.lower() in err[0].lower(), err[0]
    return err[0]


relu = [helper.make_node("Relu", ["x"], ["y"])]


@pytest.mark.parametrize("case,words", [
    ("negative_dim", ["negative dimension", "-3"]),
    ("string", ["STRING", "not support"]),
    ("unknown_dtype", ["#99", "not an ONNX type"]),
    ("attr_name", ["alpah", "Relu"]),
    ("attr_type", ["alpha", "must be a number"]),
])
def test_malformed_models(tmp_path, capsys, case, words):
    if case == "negative_dim":
        m = model(relu, [vi("x", T.FLOAT, [1, -3, 4])])
    elif case == "string":
        m = model([helper.make_node("Identity", ["x"], ["y"])], [vi("x", T.STRING, [2])])
    elif case == "unknown_dtype":
        m = model(relu, [vi("x", 99, [2])])
    elif case == "attr_name":
        m = model([helper.make_node("Relu", ["x"], ["y"], alpah=0.1)], [vi("x", T.FLOAT, [2])])
    else:
        m = model([helper.make_node("LeakyRelu", ["x"], ["y"], alpha="oops")],
                  [vi("x", T.FLOAT, [2])])
    one_line_exit_2(["run", save(tmp_path, m), "--random"], capsys, *words)


def _sized(op):
    """A model whose one `op` node would allocate terabytes from a few bytes of constants."""
    big = 1 << 20
    if op == "ConstantOfShape":
        return [helper.make_node(op, ["s"], ["y"])], [nh.from_array(np.array([big, big]), "s")]
    if op == "Expand":
        return ([helper.make_node(op, ["x", "s"], ["y"])], [nh.from_array(np.array([big, big]), "s")])
    if op == "Tile":
        return [helper.make_node(op, ["x", "s"], ["y"])], [nh.from_array(np.array([big * big]), "s")]
    if op == "Pad":
        return [helper.make_node(op, ["x", "s"], ["y"])], [nh.from_array(np.array([0, big * big]), "s")]
    if op == "Range":
        return ([helper.make_node(op, ["a", "b", "c"], ["y"])],
                [nh.from_array(np.array(v, np.float32), n) for n, v in (("a", 0), ("b", 1e13), ("c", 1))])
    raise AssertionError(op)


@pytest.mark.parametrize("op", ["ConstantOfShape", "Expand", "Tile", "Pad", "Range"])
def test_data_sized_ops_are_refused_before_allocating(tmp_path, capsys, op):
    nodes, inits = _sized(op)
    path = save(tmp_path, model(nodes, [vi("x", T.FLOAT, [1])], inits))
    one_line_exit_2(["run", path, "--random"], capsys, op, "tensor limit", "RETARGET_MAX_TENSOR_BYTES")


def test_resize_to_a_huge_size_is_refused():
    m = model([helper.make_node("Resize", ["x", "", "sc"], ["y"])], [vi("x", T.FLOAT, [1, 1, 4, 4])],
              [nh.from_array(np.array([1, 1, 1e6, 1e6], np.float32), "sc")])
    g = import_model(m)
    with pytest.raises(ResourceLimitError, match="Resize.*58.2 TiB"):
        run_graph(g, {"x": np.ones((1, 1, 4, 4), np.float32)})


def test_the_tensor_limit_is_configurable():
    m = model([helper.make_node("Tile", ["x", "s"], ["y"])], [vi("x", T.FLOAT, [4])],
              [nh.from_array(np.array([1000]), "s")])
    g = import_model(m, simplify=False)
    x = {"x": np.ones(4, np.float32)}
    assert run_graph(g, x)["y"].shape == (4000,)
    with tensor_limit(1000), pytest.raises(ResourceLimitError, match="Tile.*16000 bytes"):
        run_graph(g, x)


def test_huge_declared_input_with_random_and_npy_header(tmp_path, capsys):
    path = save(tmp_path, model(relu, [vi("x", T.FLOAT, [1 << 20, 1 << 20])]))
    one_line_exit_2(["run", path, "--random"], capsys, "input 'x'", "tensor limit")
    # a 128-byte .npy whose header declares a terabyte array
    npy = tmp_path / "big.npy"
    with open(npy, "wb") as fh:
        np.lib.format.write_array_header_1_0(fh, {"descr": "<f4", "fortran_order": False,
                                                  "shape": (1 << 20, 1 << 20)})
    small = save(tmp_path, model(relu, [vi("x", T.FLOAT, [2])]), "small.onnx")
    one_line_exit_2(["run", small, "--input", str(npy)], capsys, "big.npy", "tensor limit")


def test_bad_input_files(tmp_path, capsys):
    path = save(tmp_path, model(relu, [vi("x", T.FLOAT, [2])]))
    npz = tmp_path / "x.npz"
    np.savez(npz, x=np.ones(2, np.float32))
    (tmp_path / "cut.npz").write_bytes(npz.read_bytes()[:-20])
    one_line_exit_2(["run", path, "--input", str(tmp_path / "cut.npz")], capsys, "cut.npz")
    one_line_exit_2(["run", path, "--input", "/dev/zero"], capsys, "/dev/zero", "regular file")
    one_line_exit_2(["run", path, "--random", "--seed", "-5"], capsys, "--seed", "non-negative")
    err = one_line_exit_2(["run", path, "--input", "x=nox.npy"], capsys, "no such file")
    assert err.count("nox.npy") == 1, err      # the file is named once, not repeated


def test_run_output_on_every_path(tmp_path, capsys):
    path = save(tmp_path, model(relu, [vi("x", T.FLOAT, [1, 16])]))
    for extra in ([], ["--target", "vta"]):
        out = tmp_path / f"y{len(extra)}.npy"
        assert cli.main(["run", path, "--random", "--output", str(out)] + extra) == 0
        x = np.random.default_rng(0).standard_normal((1, 16)).astype(np.float32)
        assert np.load(out).shape == (1, 16)
        if not extra:
            np.testing.assert_array_equal(np.load(out), np.maximum(x, 0))


def test_input_shape_binds_when_compiling(tmp_path, capsys):
    path = save(tmp_path, model(relu, [vi("x", T.FLOAT, ["n", 16])]))
    assert cli.main(["run", path, "--target", "vta", "--input-shape", "x=3,16", "--random",
                     "--output", str(tmp_path / "y.npy")]) == 0
    assert np.load(tmp_path / "y.npy").shape == (3, 16)


@pytest.mark.parametrize("value", ["nan", "inf", "0", "-5"])
def test_config_numbers_must_be_finite_and_valid(tmp_path, capsys, value):
    path = save(tmp_path, model(relu, [vi("x", T.FLOAT, [1, 16])]))
    one_line_exit_2(["compile", path, "--target", "vta", "--config", f"clock_mhz={value}",
                     "-o", str(tmp_path / "o")], capsys, "clock_mhz")
    assert not (tmp_path / "o").exists()


def _gemm(bias):
    w = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)
    inits = [nh.from_array(w, "w")] + ([] if bias is None else [nh.from_array(bias, "b")])
    return model([helper.make_node("Gemm", ["x", "w"] + (["b"] if bias is not None else []), ["y"],
                                   transB=1)], [vi("x", T.FLOAT, [1, 16])], inits)


def _calib(n=3):
    return np.random.default_rng(1).standard_normal((n, 16)).astype(np.float32)


@pytest.mark.parametrize("bias", [np.full((1, 8), 0.5, np.float32), np.array(0.25, np.float32),
                                  np.arange(8, dtype=np.float32), np.ones((1, 1), np.float32)])
def test_gemm_bias_forms_run_on_vta_bit_exact(bias):
    g = import_model(_gemm(bias))
    m = retarget.compile(g, "vta", min_region_macs=0, calibration=_calib())
    assert [n.placement for n in m.report.nodes if n.op == "Gemm"] == ["vta"], m.report.table()
    x = {"x": _calib(1)}
    assert np.array_equal(m.run(x)["y"], run_graph(m.graph, x)["y"])


def test_a_bias_varying_by_row_stays_on_cpu_naming_the_gemm():
    w = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)
    b = np.arange(16, dtype=np.float32).reshape(2, 8)
    m = model([helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1)],
              [vi("x", T.FLOAT, [2, 16])], [nh.from_array(w, "w"), nh.from_array(b, "b")])
    g = import_model(m)
    mod = retarget.compile(g, "vta", min_region_macs=0, calibration=_calib(4))
    gemm = [n for n in mod.report.nodes if n.op == "Gemm"][0]
    assert gemm.placement == "cpu" and "Gemm" in gemm.reason and "differs between rows" in gemm.reason


@pytest.mark.parametrize("fill,words", [(np.nan, ["sample #0", "non-finite", "nan"]),
                                        (np.inf, ["sample #0", "non-finite", "inf"])])
def test_non_finite_calibration_is_refused_naming_input_and_sample(fill, words):
    g = import_model(_gemm(None))
    c = _calib()
    c[0, 3] = fill
    with pytest.raises(InputError) as e:
        retarget.compile(g, "vta", calibration=c)
    for w in words + ["'x'"]:
        assert w in str(e.value)


def test_empty_and_all_zero_calibration(tmp_path, capsys):
    g = import_model(_gemm(None))
    with pytest.raises(InputError, match="no samples"):
        retarget.compile(g, "vta", calibration=np.zeros((0, 16), np.float32))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        retarget.compile(g, "vta", calibration=np.zeros((2, 16), np.float32))
    assert any("zero in every sample" in str(w.message) for w in seen)
    text = tmp_path / "calib.txt"
    text.write_text("1 2 3\n")
    path = save(tmp_path, _gemm(None))
    one_line_exit_2(["compile", path, "--target", "vta", "--calibration", str(text), "-o",
                     str(tmp_path / "o")], capsys, "not a NumPy .npy or .npz")


def test_a_model_the_onnx_checker_refuses_says_what_it_found(tmp_path, capsys):
    m = model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", T.FLOAT, [2])])
    m.graph.node[0].attribute.append(helper.make_attribute("alpha", 1.0))
    m.graph.node[0].attribute.append(helper.make_attribute("alpha", 2.0))   # duplicated name
    err = one_line_exit_2(["run", save(tmp_path, m), "--random"], capsys)
    assert "truncated or corrupt" not in err
