"""The happy paths of `retarget inspect` and `retarget run`, in-process and as a subprocess."""
from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import onnx
import pytest

from retarget import cli

ort = pytest.importorskip("onnxruntime")

SIZE, NUM_CLASSES = 32, 10


def _image(batch=1, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal((batch, 3, SIZE, SIZE)).astype(dtype)


def _ort(path, feeds):
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _count(text: str) -> int:
    return int(text.replace(",", ""))


def _expected_macs(path) -> dict[str, int]:
    """Conv and Gemm MACs computed here from ONNX's own shape inference, independently of
    retarget's op table."""
    model = onnx.shape_inference.infer_shapes(onnx.load(str(path)))
    shapes = {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim]
              for vi in list(model.graph.value_info) + list(model.graph.output)
              + list(model.graph.input)}
    inits = {t.name: list(t.dims) for t in model.graph.initializer}
    macs = {"Conv": 0, "Gemm": 0}
    for n in model.graph.node:
        if n.op_type == "Conv":
            cout, cin_g, kh, kw = inits[n.input[1]]
            batch, _, oh, ow = shapes[n.output[0]]
            macs["Conv"] += batch * cout * oh * ow * cin_g * kh * kw
        elif n.op_type == "Gemm":
            out_f, in_f = inits[n.input[1]]
            macs["Gemm"] += shapes[n.output[0]][0] * out_f * in_f
    return macs


def _by_op_row(out: str, op: str) -> list[str]:
    rows = [line.split() for line in out.splitlines() if line.split()[:1] == [op]]
    assert rows, f"no by-op row for {op} in:\n{out}"
    return rows[-1]  # the by-op table comes after the per-layer one


def test_inspect_prints_layers_totals_and_ops(resnet_file, capsys):
    assert cli.main(["inspect", str(resnet_file)]) == 0
    out = capsys.readouterr().out
    assert "input: float32[1,3,32,32]" in out and "output: float32[1,10]" in out
    # 16 filters of 3x7x7 = 2,352 weights; 16x16x16 outputs x 147 taps = 602,112 MACs.
    assert re.search(r"/conv1/Conv\s+Conv\s+\[1,16,16,16\]\s+2,352\s+602,112", out), out
    expected = _expected_macs(resnet_file)
    for op in ("Conv", "Gemm"):
        row = _by_op_row(out, op)
        assert _count(row[3]) == expected[op], row
    conv = _by_op_row(out, "Conv")
    assert _count(conv[1]) == 20
    # Parameters: every float initializer (BN running statistics included).
    model = onnx.load(str(resnet_file))
    n_params = sum(int(np.prod(t.dims)) for t in model.graph.initializer)
    total = _by_op_row(out, "total")
    assert _count(total[1]) == len(model.graph.node) and _count(total[2]) == n_params
    assert _count(total[3]) == sum(expected.values()) + _count(_by_op_row(out, "BatchNormalization")[3])
    assert re.search(r"^\d+ nodes, [\d.]+K params, [\d.]+M MACs$", out.strip().splitlines()[-1])


def test_inspect_summary_and_input_shape_binding(dynamic_batch_file, capsys):
    assert cli.main(["inspect", str(dynamic_batch_file), "--summary",
                     "--input-shape", "input=4,3,32,32"]) == 0
    out = capsys.readouterr().out
    assert "input: float32[4,3,32,32]" in out and "output: float32[4,10]" in out
    assert "/features.0.conv/Conv" not in out  # no per-layer rows with --summary
    # The name may be left out for a one-input model; MACs scale with the batch.
    assert cli.main(["inspect", str(dynamic_batch_file), "--summary", "--input-shape",
                     "2,3,32,32"]) == 0
    out2 = capsys.readouterr().out
    assert "input: float32[2,3,32,32]" in out2
    assert _count(_by_op_row(out, "Conv")[3]) == 2 * _count(_by_op_row(out2, "Conv")[3])


def test_run_with_input_file_matches_onnxruntime(resnet_file, tmp_path, capsys):
    x = _image(seed=4)
    np.save(tmp_path / "x.npy", x)
    assert cli.main(["run", str(resnet_file), "--input", str(tmp_path / "x.npy"),
                     "--output", str(tmp_path / "y.npy")]) == 0
    out = capsys.readouterr().out
    y = np.load(tmp_path / "y.npy")
    (ref,) = _ort(resnet_file, {"input": x})
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5)
    assert "output: float32[1,10]" in out
    # The top-5 line lists the five largest scores, largest first.
    top = re.search(r"top-5 \[0\]: (.*)", out).group(1)
    classes = [int(c) for c in re.findall(r"(\d+) \(", top)]
    assert classes == list(np.argsort(-ref[0])[:5])


def test_run_random_is_seeded_and_saves_npz(resnet_file, tmp_path, capsys):
    outs = []
    for seed in (1, 1, 2):
        path = tmp_path / f"out{len(outs)}.npz"
        assert cli.main(["run", str(resnet_file), "--random", "--seed", str(seed),
                         "--output", str(path)]) == 0
        with np.load(path) as z:
            assert z.files == ["output"]
            outs.append(z["output"])
    capsys.readouterr()
    np.testing.assert_array_equal(outs[0], outs[1])
    assert not np.array_equal(outs[0], outs[2])


def test_run_named_inputs_and_npz_inputs(two_input_file, tmp_path, capsys):
    a = np.arange(6, dtype=np.float32).reshape(2, 3) - 3
    b = np.ones((2, 3), np.float32)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    assert cli.main(["run", str(two_input_file), "--input", f"a={tmp_path / 'a.npy'}",
                     "--input", f"b={tmp_path / 'b.npy'}", "-o", str(tmp_path / "y.npy")]) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), np.maximum(a + b, 0))
    np.savez(tmp_path / "ab.npz", a=a, b=-b)
    assert cli.main(["run", str(two_input_file), "--input", str(tmp_path / "ab.npz"),
                     "-o", str(tmp_path / "y2.npy")]) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "y2.npy"), np.maximum(a - b, 0))
    # --random fills only what --input did not give.
    assert cli.main(["run", str(two_input_file), "--input", f"a={tmp_path / 'a.npy'}",
                     "--random"]) == 0
    out = capsys.readouterr().out
    assert "y: float32[2,3]" in out and "top-5" not in out  # 3 columns: not a classifier


def test_run_binds_a_dynamic_batch_from_the_input(dynamic_batch_file, tmp_path, capsys):
    x = _image(batch=3, seed=5)
    np.save(tmp_path / "x.npy", x)
    assert cli.main(["run", str(dynamic_batch_file), "-i", str(tmp_path / "x.npy"),
                     "-o", str(tmp_path / "y.npy")]) == 0
    out = capsys.readouterr().out
    (ref,) = _ort(dynamic_batch_file, {"input": x})
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), ref, rtol=1e-4, atol=1e-5)
    assert "top-5 [2]:" in out


def test_subprocess_inspect_and_run(resnet_file, tmp_path):
    r = subprocess.run([sys.executable, "-m", "retarget", "inspect", str(resnet_file),
                        "--summary"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "Conv" in r.stdout and "MACs" in r.stdout
    r = subprocess.run([sys.executable, "-m", "retarget", "run", str(resnet_file), "--random",
                        "-o", str(tmp_path / "y.npy")], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert "output: float32[1,10]" in r.stdout and "top-5" in r.stdout
    assert np.load(tmp_path / "y.npy").shape == (1, NUM_CLASSES)


def test_run_check_ort_compares_every_output_with_onnxruntime(resnet_file, capsys):
    assert cli.main(["run", str(resnet_file), "--random", "--check-ort"]) == 0
    out = capsys.readouterr().out
    line = next(l for l in out.splitlines() if l.strip().startswith("output:") and "relative" in l)
    rel = float(re.search(r"= (\S+) relative", line).group(1))
    assert 0 <= rel <= 1e-5 and line.endswith("ok")


def test_run_check_ort_fails_when_the_reference_disagrees(resnet_file, capsys, monkeypatch):
    from retarget.cli import run_cmd
    real = run_cmd.run_graph

    def off_by_a_little(graph, inputs, **kw):
        return {k: v + np.float32(1e-3) * np.abs(v).max() for k, v in real(graph, inputs, **kw).items()}

    # the reference as `retarget run` calls it
    monkeypatch.setattr(run_cmd, "run_graph", off_by_a_little)
    assert cli.main(["run", str(resnet_file), "--random", "--check-ort"]) == 1
    out = capsys.readouterr().out
    assert "FAIL (tolerance 1e-05)" in out
    # a looser tolerance accepts the same difference
    assert cli.main(["run", str(resnet_file), "--random", "--check-ort",
                     "--ort-tolerance", "1e-2"]) == 0


def test_run_check_ort_refuses_a_compiled_model(resnet_file, capsys):
    assert cli.main(["run", str(resnet_file), "--random", "--check-ort", "--target", "vta"]) != 0
    assert "--check-ort compares the float reference" in capsys.readouterr().err
