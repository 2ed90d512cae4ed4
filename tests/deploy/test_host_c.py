"""`--host c` (passes/host.py): the CPU regions of an accelerator graph as generated C,
bit-exact with the integer reference on the test networks for vta, dnnvm and nvdla, with the
placement report naming the host; the artifact round trip in a fresh process; the CLI."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import retarget
from retarget import zoo
from retarget.frontend.onnx import import_model
from retarget.runtime.module import Module
from retarget.ops.reference import run_graph

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

NETS = {"resnet18": dict(size=32, width=0.25), "googlenet": dict(size=32, width=0.125),
        "mobilenet_v1": dict(size=32, width=0.25), "unet": dict(size=16, width=0.25)}
HOST = "c:portable"        # plain C99, no OpenMP: quick builds


def _graph(name):
    return import_model(zoo.build(name, seed=0, **NETS[name]))


def _data(graph, seed):
    rng = np.random.default_rng(seed)
    return {v.name: rng.standard_normal(v.type.shape).astype(np.float32) for v in graph.inputs}


def _compile(name, target, host=HOST):
    g = _graph(name)
    return retarget.compile(g, target, calibration=[_data(g, 1), _data(g, 2)], host=host)


@pytest.mark.parametrize("target", ["vta", "dnnvm", "nvdla"])
@pytest.mark.parametrize("name", sorted(NETS))
def test_host_c_is_bit_exact_with_the_reference(name, target):
    m = _compile(name, target)
    try:
        cpu = m.report.on("cpu")
        as_c = [p for p in cpu if p.reason.endswith(f"host {HOST}: generated C")]
        # every host node runs as C, vta's int8 window-packing Gather / Transpose included
        assert len(as_c) == len(cpu) and m.host.kernels, \
            [(p.name, p.reason) for p in cpu if p not in as_c]
        if target == "vta" and name == "resnet18":
            assert {"Gather", "Transpose"} <= {p.op for p in as_c}
        assert m.report.host == HOST and f"host: {HOST} runs {len(as_c)} of" in m.report.table()
        x = _data(m.graph, 3)
        out, ref = m.run(x), run_graph(m.graph, x)
        for k in ref:
            assert out[k].dtype == ref[k].dtype and np.array_equal(out[k], ref[k]), k
        ran_as_c = {p.region for p in m.profile} & set(m.host.kernels)
        assert ran_as_c == set(m.host.kernels)
    finally:
        m.close()


def test_default_host_is_the_reference():
    m = _compile("resnet18", "dnnvm", host=None)
    assert m.host is None and m.report.host == "reference"
    # a reference-host report (and artifact) is what it was before hosts existed
    assert "host:" not in m.report.table() and "host" not in m.report.to_dict()
    assert m.report.host_line() == "host: the NumPy reference runs the 8 cpu node(s)"


def test_the_comparison_can_fail():
    """The C code carries its own copy of the constants: changing the graph's shifts of a
    host Requantize after compiling makes the reference disagree with the C region."""
    m = _compile("resnet18", "dnnvm")
    try:
        x = _data(m.graph, 3)
        before = m.run(x)
        n = next(n for r in m.regions if r.name in m.host.kernels for n in r.nodes
                 if n.op == "Requantize")
        if "shift" in n.attrs:
            n.attrs["shift"] = int(n.attrs["shift"]) + 2
        else:
            n.inputs[1].const = n.inputs[1].const + 2
        ref = run_graph(m.graph, x)
        assert any(not np.array_equal(before[k], ref[k]) for k in ref)
    finally:
        m.close()


def test_save_and_load_in_a_fresh_process(tmp_path):
    m = _compile("resnet18", "vta")
    x = _data(m.graph, 4)
    out = m.run(x)
    m.save(tmp_path / "art")
    m.close()
    np.savez(tmp_path / "x.npz", **x)
    code = ("import sys, numpy as np; from retarget.runtime.module import Module\n"
            "m = Module.load(sys.argv[1]); x = dict(np.load(sys.argv[2]))\n"
            "assert m.report.host == 'c:portable' and m.host.kernels\n"
            "np.savez(sys.argv[3], **m.run(x)); m.close()\n")
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "art"), str(tmp_path / "x.npz"),
                    str(tmp_path / "y.npz")], check=True, env=_env())
    with np.load(tmp_path / "y.npz") as y:
        for k in out:
            assert np.array_equal(y[k], out[k]), k


def test_cli_compile_with_host_c_then_run(tmp_path, capsys):
    from retarget import cli
    model = tmp_path / "r18.onnx"
    model.write_bytes(zoo.build_bytes("resnet18", seed=0, **NETS["resnet18"]))
    out = tmp_path / "art"
    assert cli.main(["compile", str(model), "--target", "dnnvm", "--host", HOST,
                     "-o", str(out)]) == 0
    assert f"host: {HOST} runs 8 of the 8 cpu node(s) as generated C" in capsys.readouterr().out
    assert cli.main(["run", str(out), "--check"]) == 0
    assert "bit-exact vs the integer reference" in capsys.readouterr().out
    assert Module.load(out).host.kernels


def _env():
    import os
    env = dict(os.environ)
    env["PYTHONPATH"] = str(Path(retarget.__file__).parents[1])
    return env
