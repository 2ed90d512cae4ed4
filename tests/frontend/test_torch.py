import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from retarget.frontend.torch import from_torch  # noqa: E402
from retarget.passes.verify import verify  # noqa: E402
from retarget.ops.reference import run_graph  # noqa: E402


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(8)
        self.pool = nn.MaxPool2d(2)
        self.drop = nn.Dropout(0.5)
        self.fc = nn.Linear(8 * 4 * 4, 5)

    def forward(self, x):
        x = torch.relu(self.bn1(self.conv1(x)))
        x = self.pool(torch.relu(self.bn2(self.conv2(x))))
        return self.fc(self.drop(x.view(x.size(0), -1)))  # the Shape->...->Reshape chain


class Residual(nn.Module):
    def __init__(self, c=8):
        super().__init__()
        self.a = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn_a = nn.BatchNorm2d(c)
        self.b = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn_b = nn.BatchNorm2d(c)

    def forward(self, x):
        y = torch.relu(self.bn_a(self.a(x)))
        return torch.relu(x + self.bn_b(self.b(y)))


def _randomise_bn(module):
    # Fresh BatchNorm layers are the identity; give them real statistics so they matter.
    g = torch.Generator().manual_seed(0)
    for m in module.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.weight.data.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.bias.data.copy_(torch.randn(m.num_features, generator=g) * 0.1)


@pytest.mark.parametrize("make, shape", [(SmallCNN, (2, 3, 16, 16)), (Residual, (1, 8, 6, 6))])
def test_matches_module_output(make, shape):
    torch.manual_seed(0)
    module = make()
    _randomise_bn(module)
    module.train()  # from_torch must switch to eval itself, and switch back
    x = torch.randn(*shape)
    g = from_torch(module, x, input_names=["image"])
    assert module.training
    verify(g)
    assert [v.name for v in g.inputs] == ["image"]
    ops = {n.op for n in g.nodes}
    assert not ops & {"Shape", "Gather", "Concat", "Unsqueeze", "Identity", "Dropout"}, ops
    with torch.no_grad():
        want = module.eval()(x).numpy()
    got = run_graph(g, {"image": x.numpy()})[g.outputs[0].name]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_multiple_inputs_get_default_names():
    class AddTwo(nn.Module):
        def forward(self, a, b):
            return torch.relu(a + b)

    a, b = torch.randn(2, 3), torch.randn(2, 3)
    g = from_torch(AddTwo(), (a, b))
    assert [v.name for v in g.inputs] == ["input0", "input1"]
    out = run_graph(g, {"input0": a.numpy(), "input1": b.numpy()})[g.outputs[0].name]
    np.testing.assert_allclose(out, torch.relu(a + b).numpy(), rtol=1e-6)


def test_raw_pytorch_export_with_shape_chain_and_batchnorm():
    """A dynamic-batch export without PyTorch's own folding keeps BatchNormalization nodes and
    the Shape->Gather->Unsqueeze->Concat->Reshape chain of x.view(x.size(0), -1); importing it
    must fold the chain and still match the module."""
    import io
    import warnings

    import onnx

    from retarget.frontend.onnx import import_model

    torch.manual_seed(1)
    module = SmallCNN().eval()
    _randomise_bn(module)
    x = torch.randn(3, 3, 16, 16)
    buf = io.BytesIO()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (x,), buf, dynamo=False, input_names=["x"], opset_version=17,
                          do_constant_folding=False, dynamic_axes={"x": {0: "batch"}})
    model = onnx.load_from_string(buf.getvalue())
    exported = [n.op_type for n in model.graph.node]
    assert "Shape" in exported and "BatchNormalization" in exported
    g = import_model(model, input_shapes={"x": (3, 3, 16, 16)})
    ops = [n.op for n in g.nodes]
    assert "Shape" not in ops and "Gather" not in ops and "Concat" not in ops, ops
    assert ops.count("BatchNormalization") == 2
    with torch.no_grad():
        want = module(x).numpy()
    got = run_graph(g, {"x": x.numpy()})[g.outputs[0].name]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
