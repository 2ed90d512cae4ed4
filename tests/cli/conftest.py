"""Small model files shared by the CLI tests."""
from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from retarget import zoo

SIZE = 32
NUM_CLASSES = 10


@pytest.fixture(scope="session")
def resnet_file(tmp_path_factory):
    """A quarter-width ResNet-18 at 32x32 with 10 classes: a real classifier, fast to run."""
    path = tmp_path_factory.mktemp("models") / "resnet18.onnx"
    path.write_bytes(zoo.build_bytes("resnet18", size=SIZE, width=0.25,
                                     num_classes=NUM_CLASSES, seed=7))
    return path


@pytest.fixture(scope="session")
def dynamic_batch_file(tmp_path_factory):
    """The same kind of net with the batch dim left symbolic ('N'), as exporters write it."""
    model = zoo.build("mobilenet_v1", size=SIZE, width=0.25, num_classes=NUM_CLASSES)
    for vi in (model.graph.input[0], model.graph.output[0]):
        vi.type.tensor_type.shape.dim[0].dim_param = "N"
    path = tmp_path_factory.mktemp("models") / "mobilenet_dyn.onnx"
    onnx.save(model, str(path))
    return path


@pytest.fixture(scope="session")
def two_input_file(tmp_path_factory):
    """y = Relu(a + b): two named inputs, one output."""
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 3])
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    nodes = [helper.make_node("Add", ["a", "b"], ["s"], name="add"),
             helper.make_node("Relu", ["s"], ["y"], name="relu")]
    model = helper.make_model(helper.make_graph(nodes, "two_inputs", [a, b], [y]),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path_factory.mktemp("models") / "two_inputs.onnx"
    onnx.save(model, str(path))
    return path

