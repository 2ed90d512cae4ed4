"""dnnvm through the CLI (compile, run --check, disasm, report, demo) and the shared layer's
guarantees it inherits: artifact checksums and thread safety."""
import json
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import retarget
from retarget import zoo
from retarget.cli import main
from retarget.errors import ModelLoadError
from retarget.runtime.module import Module

from .conftest import build_graph, samples


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    d = tmp_path_factory.mktemp("dnnvm")
    model = d / "r18.onnx"
    model.write_bytes(zoo.build_bytes("resnet18", num_classes=10, size=32, width=0.25))
    calib = d / "calib.npz"
    np.savez(calib, input=np.random.default_rng(0).standard_normal((2, 3, 32, 32))
             .astype(np.float32))
    out = d / "art"
    assert main(["compile", str(model), "--target", "dnnvm:zu2", "--calibration", str(calib),
                 "-o", str(out)]) == 0
    return out


def test_compile_run_check_disasm_report(artifact, capsys, tmp_path):
    assert main(["run", str(artifact), "--check"]) == 0
    assert "bit-exact" in capsys.readouterr().out
    assert main(["disasm", str(artifact / "kernels" / "dnnvm_0")]) == 0
    text = capsys.readouterr().out
    assert "dnnvm config zu2" in text and "CONV [in" in text and "LOAD WGT" in text
    trace = tmp_path / "trace.json"
    assert main(["report", str(artifact), "--trace", str(trace)]) == 0
    assert "/layer4.1.conv2/Conv" in capsys.readouterr().out
    events = json.loads(trace.read_text())["traceEvents"]
    tracks = {e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    assert {"load", "save", "conv", "pool", "misc", "layers"} <= tracks


def test_demo_on_dnnvm(capsys):
    assert main(["demo", "--target", "dnnvm", "--config", "test", "--limit", "40"]) == 0
    out = capsys.readouterr().out
    assert "demo: OK" in out and "40/40 images" in out


def test_a_damaged_program_is_refused_on_load(artifact, tmp_path):
    import shutil
    d = tmp_path / "copy"
    shutil.copytree(artifact, d)
    p = d / "kernels" / "dnnvm_0" / "program.insn.bin"
    raw = bytearray(p.read_bytes())
    raw[40] ^= 1
    p.write_bytes(bytes(raw))
    with pytest.raises(ModelLoadError, match="program.insn.bin"):
        Module.load(d)


def test_one_dnnvm_module_from_threads_equals_single_threaded():
    g = build_graph("resnet18", size=16, width=0.125)
    m = retarget.compile(g, "dnnvm:test", calibration=samples(g))
    xs = samples(g, 4, seed=9)
    expected = [m.run(x) for x in xs]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(m.run, [xs[i % 4] for i in range(32)]))
    assert all(np.array_equal(out[k], expected[i % 4][k])
               for i, out in enumerate(got) for k in out)
    m.close()
