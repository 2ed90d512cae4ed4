import logging

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

from retarget.errors import GraphError, InputError, ModelLoadError, UnsupportedOpError
from retarget.frontend.onnx import from_onnx_model, import_model, load_onnx, opset_of, to_onnx
from retarget.ir.types import TensorType
from retarget.passes.verify import verify
from retarget.ops.reference import run_graph

ort = pytest.importorskip("onnxruntime")


def _model(nodes, inputs, outputs, inits=(), opset=17):
    g = h.make_graph(nodes, "m", inputs, outputs, initializer=list(inits))
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = h.find_min_ir_version_for(m.opset_import)
    return m


def _small(opset=17, x_shape=(1, 4)):
    x = h.make_tensor_value_info("x", T.FLOAT, list(x_shape))
    y = h.make_tensor_value_info("y", T.FLOAT, [1, 4])
    w = numpy_helper.from_array(np.array([[1, -2, 3, -4]], np.float32), "w")
    nodes = [h.make_node("Constant", [], ["c"], name="const",
                         value=numpy_helper.from_array(np.full((1, 4), 0.5, np.float32))),
             h.make_node("Add", ["x", "w"], ["t"], name="add"),
             h.make_node("Mul", ["t", "c"], ["u"], name="mul"),
             h.make_node("Relu", ["u"], ["y"], name="relu")]
    return _model(nodes, [x], [y], [w], opset)


def _ort(model, feeds):
    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, feeds)


@pytest.mark.parametrize("opset", [11, 13, 17, 21])
def test_opsets_match_onnxruntime(opset, tmp_path):
    m = _small(opset)
    assert opset_of(m) == opset
    onnx.save(m, tmp_path / "m.onnx")
    g = load_onnx(tmp_path / "m.onnx")
    verify(g)
    x = np.array([[0.5, 1, -5, 6]], np.float32)
    assert np.allclose(run_graph(g, {"x": x})["y"], _ort(m, {"x": x})[0], rtol=1e-6)
    # The Constant node became a constant value, not a node.
    assert [n.op for n in g.nodes] == ["Add", "Mul", "Relu"]


def test_to_onnx_round_trip_runs_on_onnxruntime():
    g = import_model(_small())
    m = to_onnx(g)
    onnx.checker.check_model(m)
    x = np.array([[1, 2, 3, 4]], np.float32)
    assert np.array_equal(_ort(m, {"x": x})[0], run_graph(g, {"x": x})["y"])


def test_not_onnx_files(tmp_path):
    (tmp_path / "t.onnx").write_text("this is a text file\nnot a model\n")
    with pytest.raises(ModelLoadError, match="t.onnx.*text file"):
        load_onnx(tmp_path / "t.onnx")
    (tmp_path / "r.onnx").write_bytes(np.random.default_rng(0).bytes(4096))
    with pytest.raises(ModelLoadError, match="r.onnx.*(truncated or corrupt|not a readable)"):
        load_onnx(tmp_path / "r.onnx")
    (tmp_path / "e.onnx").write_bytes(b"")
    with pytest.raises(ModelLoadError, match="empty"):
        load_onnx(tmp_path / "e.onnx")
    with pytest.raises(FileNotFoundError):
        load_onnx(tmp_path / "missing.onnx")


@pytest.mark.parametrize("keep", [0.3, 0.6, 0.9, 0.99])
def test_truncated_file(tmp_path, keep):
    data = _small().SerializeToString()
    (tmp_path / "cut.onnx").write_bytes(data[:int(len(data) * keep)])
    with pytest.raises(ModelLoadError, match="truncated or corrupt"):
        load_onnx(tmp_path / "cut.onnx")


def test_all_unsupported_ops_in_one_error():
    x = h.make_tensor_value_info("x", T.FLOAT, [1, 4, 8])
    y = h.make_tensor_value_info("y", T.FLOAT, [1, 4, 8])
    nodes = [h.make_node("Relu", ["x"], ["a"], name="ok"),
             # String-processing ops: outside what a tensor compiler for accelerators supports.
             h.make_node("StringNormalizer", ["a"], ["b"], name="sn1"),
             h.make_node("MyCustom", ["b"], ["c"], name="custom", domain="com.example"),
             h.make_node("TfIdfVectorizer", ["c"], ["y"], name="tfidf")]
    m = _model(nodes, [x], [y])
    m.opset_import.append(h.make_opsetid("com.example", 1))
    with pytest.raises(UnsupportedOpError) as e:
        import_model(m)
    msg = str(e.value)
    assert "3 node(s)" in msg and "StringNormalizer 'sn1'" in msg and "TfIdfVectorizer 'tfidf'" in msg
    assert "com.example.MyCustom 'custom'" in msg and "'ok'" not in msg
    # Unknown attributes on known ops are collected into the same single error.
    m.graph.node[0].attribute.append(h.make_attribute("bogus", 1))
    with pytest.raises(UnsupportedOpError, match=r"sn1.*Relu 'ok' \(bogus\)"):
        import_model(m)


def test_cycle_and_undefined_input_name_node_op_value():
    x = h.make_tensor_value_info("x", T.FLOAT, [1, 4])
    y = h.make_tensor_value_info("y", T.FLOAT, [1, 4])
    cyc = _model([h.make_node("Add", ["x", "b"], ["a"], name="n_a"),
                  h.make_node("Relu", ["a"], ["b"], name="n_b"),
                  h.make_node("Relu", ["b"], ["y"], name="n_y")], [x], [y])
    with pytest.raises(GraphError, match="cycle.*n_a|cycle.*n_b"):
        import_model(cyc)
    undef = _model([h.make_node("Add", ["x", "ghost"], ["y"], name="add")], [x], [y])
    with pytest.raises(GraphError, match="Add 'add'.*'ghost'.*not defined"):
        import_model(undef)


def test_unsorted_nodes_are_sorted():
    x = h.make_tensor_value_info("x", T.FLOAT, [1, 4])
    y = h.make_tensor_value_info("y", T.FLOAT, [1, 4])
    m = _model([h.make_node("Relu", ["a"], ["y"], name="second"),
                h.make_node("Neg", ["x"], ["a"], name="first")], [x], [y])
    g = import_model(m)
    assert [n.name for n in g.nodes] == ["first", "second"]


def _dynamic(dims):
    x = h.make_tensor_value_info("x", T.FLOAT, dims)
    y = h.make_tensor_value_info("y", T.FLOAT, dims)
    return _model([h.make_node("Relu", ["x"], ["y"], name="relu")], [x], [y])


def test_dynamic_batch_bound_to_one_with_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="retarget.frontend.onnx"):
        g = import_model(_dynamic(["N", 3, 8, 8]))
    assert g.inputs[0].type == TensorType((1, 3, 8, 8), "float32")
    assert any("'x'" in r.getMessage() and "bound to 1" in r.getMessage() for r in caplog.records)


def test_input_shapes_bind_dynamic_dims_and_are_checked():
    g = import_model(_dynamic(["N", 3, "H", "W"]), input_shapes={"x": (2, 3, 5, 7)})
    assert g.outputs[0].type == TensorType((2, 3, 5, 7), "float32")
    with pytest.raises(InputError, match=r"'x'.*dim 2 \('H'\).*input_shapes="):
        import_model(_dynamic(["N", 3, "H", "W"]))
    with pytest.raises(InputError, match=r"'x'.*static dim 1 = 3"):
        import_model(_dynamic(["N", 3, 8, 8]), input_shapes={"x": (1, 4, 8, 8)})
    with pytest.raises(InputError, match="rank"):
        import_model(_dynamic(["N", 3, 8, 8]), input_shapes={"x": (1, 3, 8)})
    with pytest.raises(InputError, match="unknown input.*'z'"):
        import_model(_dynamic([1, 3]), input_shapes={"z": (1, 3)})


def test_initializers_listed_as_inputs_are_constants():
    m = _small()
    w_info = h.make_tensor_value_info("w", T.FLOAT, [1, 4])
    m.graph.input.append(w_info)  # how old exporters wrote weights
    g = from_onnx_model(m)
    assert [v.name for v in g.inputs] == ["x"]
    assert {v.name for v in g.constants()} == {"w", "c"}


def test_duplicate_output_definition():
    x = h.make_tensor_value_info("x", T.FLOAT, [1, 4])
    y = h.make_tensor_value_info("y", T.FLOAT, [1, 4])
    m = _model([h.make_node("Relu", ["x"], ["y"], name="r1"),
                h.make_node("Neg", ["x"], ["y"], name="r2")], [x], [y])
    with pytest.raises(GraphError, match="Neg 'r2'.*'y'.*already defined by Relu 'r1'"):
        import_model(m)


def test_flatten_chain_simplified_and_exported():
    """The Shape->Gather->Unsqueeze->Concat->Reshape chain from x.view(x.size(0), -1)."""
    x = h.make_tensor_value_info("x", T.FLOAT, ["batch", 2, 3])
    y = h.make_tensor_value_info("y", T.FLOAT, ["batch", 6])
    i64 = lambda name, v: numpy_helper.from_array(np.array(v, np.int64), name)  # noqa: E731
    nodes = [h.make_node("Shape", ["x"], ["s"]), h.make_node("Gather", ["s", "zero"], ["g"], axis=0),
             h.make_node("Unsqueeze", ["g", "ax"], ["u"]),
             h.make_node("Concat", ["u", "m1"], ["cat"], axis=0),
             h.make_node("Reshape", ["x", "cat"], ["r"]), h.make_node("Identity", ["r"], ["y"])]
    m = _model(nodes, [x], [y], [i64("zero", 0), i64("ax", [0]), i64("m1", [-1])])
    g = import_model(m, input_shapes={"x": (3, 2, 3)})
    assert [n.op for n in g.nodes] == ["Reshape"] and g.outputs[0].name == "y"
    xs = np.arange(18, dtype=np.float32).reshape(3, 2, 3)
    assert np.array_equal(run_graph(g, {"x": xs})["y"], _ort(m, {"x": xs})[0])
    assert np.array_equal(_ort(to_onnx(g), {"x": xs})[0], xs.reshape(3, 6))


@pytest.mark.parametrize("name", ["resnet18", "alexnet", "mobilenet_v2"])
def test_zoo_models_import_and_match_onnxruntime(name, tmp_path):
    from retarget import zoo
    m = zoo.build(name, size=32 if name != "alexnet" else 64, num_classes=10, width=0.25, batch=1)
    onnx.save(m, tmp_path / "m.onnx")
    g = load_onnx(tmp_path / "m.onnx")
    verify(g)
    ops = {n.op for n in g.nodes}
    assert not ops & {"Shape", "Gather", "Unsqueeze", "Concat", "Identity", "Dropout"}, ops
    name_in = g.inputs[0].name
    x = np.random.default_rng(0).standard_normal(g.inputs[0].type.shape).astype(np.float32)
    want = _ort(m, {name_in: x})[0]
    got = run_graph(g, {name_in: x})[g.outputs[0].name]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    # Exported back, the simplified graph still runs on onnxruntime with the same result.
    np.testing.assert_allclose(_ort(to_onnx(g), {name_in: x})[0], want, rtol=1e-4, atol=1e-4)


def test_constant_node_forms():
    y = h.make_tensor_value_info("y", T.INT64, [3])
    nodes = [h.make_node("Constant", [], ["a"], name="ca", value_ints=[1, 2, 3]),
             h.make_node("Constant", [], ["b"], name="cb", value_int=10),
             h.make_node("Add", ["a", "b"], ["y"], name="add")]
    g = import_model(_model(nodes, [], [y]))
    assert g.nodes == [] and g.outputs[0].name == "y"  # everything folded
    assert g.outputs[0].const.tolist() == [11, 12, 13] and g.outputs[0].const.dtype == np.int64
    sparse = h.make_node("Constant", [], ["y"], name="sp", value_strings=["a"])
    with pytest.raises(UnsupportedOpError, match="Constant 'sp'.*value_strings"):
        import_model(_model([sparse], [], [y]))
