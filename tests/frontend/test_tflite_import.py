"""TFLite import: int8 models bit-exact with LiteRT's reference kernels, float models close to
LiteRT, layout transposes cancelled, refusals naming the operator and its index."""
import numpy as np
import pytest

pytest.importorskip("tflite")
pytest.importorskip("flatbuffers")

import retarget  # noqa: E402
from retarget.errors import UnsupportedOpError  # noqa: E402
from retarget.frontend import tflite as tfl  # noqa: E402
from retarget.frontend.tflite import load_tflite  # noqa: E402
from retarget.ops.quantized_tflite import quantize_affine  # noqa: E402
from retarget.zoo.tflite import MODELS, model_inputs, tflite_model  # noqa: E402


@pytest.fixture(scope="module")
def models():
    return {}


def _model(models, name, quantized=True):
    key = (name, quantized)
    if key not in models:
        models[key] = tflite_model(name, quantized=quantized)
    return models[key]


def _litert(buf, xs):
    pytest.importorskip("ai_edge_litert")
    from retarget.frontend.litert_check import run_litert
    return run_litert(buf, xs)


def _ours(graph, xs):
    return [next(iter(retarget.run(graph, {graph.inputs[0].name: x}).values())) for x in xs]


@pytest.mark.parametrize("name", list(MODELS))
def test_int8_model_is_bit_exact_with_litert_reference_kernels(models, name):
    buf = _model(models, name)
    # the calibration distribution quantised, and uniform int8 noise (saturating paths)
    xs = model_inputs(buf, 3, seed=1)
    xs += [np.random.default_rng(s).integers(-128, 128, x.shape).astype(np.int8)
           if x.dtype == np.int8 else 4 * x for s, x in enumerate(model_inputs(buf, 2))]
    ours, theirs = _ours(load_tflite(buf), xs), _litert(buf, xs)
    for a, b in zip(ours, theirs):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
    assert len(np.unique(np.concatenate([t.ravel() for t in theirs]))) > 8  # not saturated


@pytest.mark.parametrize("name", ["lenet", "mobilenet", "residual", "avgpool_softmax",
                                  "activations"])
def test_float_model_matches_litert(models, name):
    buf = _model(models, name, quantized=False)
    xs = model_inputs(buf, 2)
    for a, b in zip(_ours(load_tflite(buf), xs), _litert(buf, xs)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_per_tensor_and_per_channel_requantisation(models):
    per_channel = load_tflite(_model(models, "lenet"))
    per_tensor = load_tflite(_model(models, "lenet_per_tensor"))
    conv = [n for n in per_channel.nodes if n.op == "RequantizeQ31"][0]
    assert len(conv.inputs) == 3 and conv.inputs[1].const.shape == (4,)   # multipliers
    assert all(len(n.inputs) == 1 and n.attrs["multiplier"] >= 1 << 30
               for n in per_tensor.nodes if n.op == "RequantizeQ31")


def test_layout_transposes_cancel_between_convolutions(models):
    g = load_tflite(_model(models, "mobilenet"))
    # NHWC -> NCHW after the input, NCHW -> NHWC before the reshape: none between the 7 convs
    assert sum(n.op == "Transpose" for n in g.nodes) == 2
    assert sum(n.op == "Conv" for n in g.nodes) == 7
    raw = load_tflite(_model(models, "mobilenet"), simplify=False)
    assert sum(n.op == "Transpose" for n in raw.nodes) == 16


def test_unknown_operator_is_refused_with_its_index(models, monkeypatch):
    monkeypatch.delitem(tfl.HANDLERS, "MUL")
    with pytest.raises(UnsupportedOpError, match=r"TFLite operator 4 \(MUL\): not supported"):
        load_tflite(_model(models, "residual"))


def test_retarget_load_and_cli_read_tflite_files(models, tmp_path, capsys):
    path = tmp_path / "lenet.tflite"
    path.write_bytes(_model(models, "lenet"))
    g = retarget.load(path)
    assert any(n.op == "RequantizeQ31" for n in g.nodes)
    from retarget.cli import main
    assert main(["inspect", str(path)]) == 0
    assert "RequantizeQ31" in capsys.readouterr().out
    pytest.importorskip("ai_edge_litert")
    assert main(["run", str(path), "--random", "--check-litert"]) == 0
    assert "bit-exact with LiteRT's reference kernels" in capsys.readouterr().out


def test_not_a_flatbuffer_is_an_input_error():
    from retarget.errors import InputError
    with pytest.raises(InputError, match="not a TFLite flatbuffer"):
        load_tflite(b"\0" * 64)


def test_float_form_takes_and_returns_real_values(models):
    buf = _model(models, "residual")
    g = load_tflite(buf, form="float")
    assert g.inputs[0].type.dtype == "float32" and g.outputs[0].type.dtype == "float32"
    assert not tfl.is_int8_tflite(g) and tfl.is_int8_tflite(load_tflite(buf))
    quant = tfl.io_quantization(buf)
    q = quant[g.outputs[0].name]
    xs = model_inputs(buf, 2)
    for x, want in zip(xs, _ours(load_tflite(buf), xs)):
        y = next(iter(retarget.run(g, tfl.real_inputs(quant, {"input": x})).values()))
        got = quantize_affine(y, scale=q.s, zero_point=q.z, dtype="int8")
        # float arithmetic on the same weights: a few output steps from the int8 model
        assert np.abs(got.astype(int) - want.astype(int)).max() <= 6


def test_compile_for_an_accelerator_requantises_and_reports_the_deviation(models, tmp_path,
                                                                          capsys):
    from retarget.cli import main
    from retarget.report.deviation import tflite_deviation
    path = tmp_path / "lenet.tflite"
    path.write_bytes(_model(models, "lenet"))
    module = retarget.compile(str(path), "nvdla",
                              calibration=np.concatenate(model_inputs(path.read_bytes(), 4)))
    xs = [{"input": x} for x in model_inputs(path.read_bytes(), 3, seed=7)]
    dev = tflite_deviation(module, path, xs)
    assert len(dev) == 1 and dev[0].values == 30 and 0 < dev[0].max_lsb < 40
    # bit-exact with retarget's integer reference of the target's own format
    quant = tfl.io_quantization(path)
    for x in xs:
        feed = tfl.real_inputs(quant, x)
        np.testing.assert_array_equal(module.run(feed)["fully_connected_5"],
                                      retarget.run(module.graph, feed)["fully_connected_5"])
    with pytest.warns(UserWarning, match="no calibration inputs"):
        assert main(["compile", str(path), "--target", "vta"]) == 0
    out = capsys.readouterr().out
    assert "fully_connected_5: max |diff|" in out and "LSB" in out


def test_an_int8_tflite_graph_is_not_requantised_silently(models):
    from retarget.errors import TargetError
    with pytest.raises(TargetError, match="int8-tflite"):
        retarget.compile(load_tflite(_model(models, "lenet")), "vta")
    module = retarget.compile(load_tflite(_model(models, "lenet")), "cpu")
    x = model_inputs(_model(models, "lenet"), 1)[0]
    np.testing.assert_array_equal(module.run({"input": x})["fully_connected_5"],
                                  _litert(_model(models, "lenet"), [x])[0])


def test_float_calibration_samples_are_quantised_for_an_int8_input(models):
    buf = _model(models, "lenet")
    g, quant = load_tflite(buf), tfl.io_quantization(buf)
    q = quant["input"]
    real = np.full((2, 12, 12, 1), 3 * q.s, np.float32)
    samples = tfl.model_samples(g, real, quant)
    assert len(samples) == 2 and samples[0]["input"].dtype == np.int8
    assert (samples[0]["input"] == q.z + 3).all()


@pytest.mark.parametrize("seed", range(4))
def test_random_networks_are_bit_exact_with_litert(seed):
    """Other weights, activations and calibration ranges (so other multipliers, shifts and
    zero points) through every int8 kernel kind."""
    from retarget.zoo.tflite import Net, int8_model
    rng = np.random.default_rng(seed)
    acts = ["NONE", "RELU", "RELU6"]
    n = Net(f"random{seed}", (1, 7, 7, 3), seed=seed)
    a = n.conv("input", 6, 3, stride=1 + seed % 2, act=acts[seed % 3])
    b = n.conv(a, 0, 3, depthwise=True, act=acts[(seed + 1) % 3])
    c = n.add(a, b, act=acts[(seed + 2) % 3])
    c = n.mul(c, b)
    c = n.pool(c, "avg", k=2, stride=1, padding="SAME")
    c = n.reshape(c, (1, int(np.prod(n.shapes[c][1:]))))
    n.output(n.softmax(n.fc(c, 5, act=acts[seed % 3])))
    scale = float(rng.uniform(0.2, 5))
    buf = int8_model(n, (scale * rng.normal(size=(6, 7, 7, 3))).astype(np.float32),
                     per_channel=bool(seed % 2))
    xs = model_inputs(buf, 3, seed=seed)
    for ours, theirs in zip(_ours(load_tflite(buf), xs), _litert(buf, xs)):
        np.testing.assert_array_equal(ours, theirs)
