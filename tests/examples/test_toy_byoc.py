"""The BYOC route (targets/external/compiler.py) with the example of examples/toy_byoc.py: a
user's own compiler, run as a separate process per region, builds the binary its target
runs; a broken, silent, slow or missing compiler gives a clear error with its stderr."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

import retarget
from retarget import cli, zoo
from retarget.errors import TargetError
from retarget.runtime.module import Module
from retarget.targets.cpu.reference import run_graph
from retarget.targets.registry import load_plugin

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "toy_byoc.py"


@pytest.fixture(scope="module")
def graph():
    load_plugin(EXAMPLE)
    from retarget.frontend.onnx import import_model
    return import_model(zoo.build("resnet18", size=32, num_classes=10, width=0.25))


def image(graph):
    v = graph.inputs[0]
    return {v.name: np.random.default_rng(2).standard_normal(v.type.shape).astype(np.float32)}


def test_regions_are_compiled_by_a_separate_process_and_run(graph, tmp_path,
                                                           assert_float_paths_agree):
    module = retarget.compile(graph, "toybyoc")
    try:
        assert module.offloaded
        for r in module.offloaded:
            kernel = module.kernels[r.name]
            run = kernel.compiler_run
            assert run.command[1] == str(EXAMPLE.resolve()) and run.binary_bytes > 0
            # the binary carries the id of the process that wrote it: not this one
            assert kernel.program.compiler_pid != os.getpid()
        placed = {p.name: p for p in module.report.nodes}
        assert placed["/fc/Gemm"].placement == "toybyoc"
        x = image(graph)
        out = module.run(x)
        # the device runs the reference's ops on its own buffers: float sums may round in
        # another order there (alignment picks the vector path), so not bit for bit
        assert_float_paths_agree(out, run_graph(module.graph, x), module.graph)
        saved = module.save(tmp_path / "art")
        loaded = Module.load(saved)
        try:
            again = loaded.run(x)  # the same code on the same buffers: bit for bit
            for k in out:
                np.testing.assert_array_equal(again[k], out[k])
        finally:
            loaded.close()
    finally:
        module.close()


# Only the slow compiler's case is about the time limit; the others get a limit no loaded
# machine reaches, so a slow Python start-up never turns their error into a time-out.
@pytest.mark.parametrize("command,message,timeout_s", [
    (f"{sys.executable} -c \"import sys; sys.stderr.write('no GEMM unit\\\\n'); sys.exit(3)\" "
     "{json}", r"failed with exit status 3; its stderr:\nno GEMM unit", 120.0),
    (f"{sys.executable} -c \"import sys\" {{json}} {{out}}", "exited 0 but wrote nothing", 120.0),
    (f"{sys.executable} -c \"import time; time.sleep(30)\" {{json}}", "did not finish in 0.5 s",
     0.5),
    ("/no/such/compiler {json} -o {out}", "cannot be started: '/no/such/compiler' not found",
     120.0),
    (f"{sys.executable} -c pass", "never names the region", 120.0),
])
def test_a_broken_compiler_is_a_clear_error(graph, command, message, timeout_s):
    with pytest.raises(TargetError, match=message) as e:
        retarget.compile(graph, "toybyoc", config={"compiler": command,
                                                   "compiler_timeout_s": timeout_s})
    assert "region 'toybyoc_0'" in str(e.value)


def test_the_cli_compiles_and_checks_through_the_plugin(graph, tmp_path, capsys):
    model = tmp_path / "m.onnx"
    onnx.save(zoo.build("resnet18", size=32, num_classes=10, width=0.25), str(model))
    out = tmp_path / "out"
    assert cli.main(["compile", str(model), "--target", "toybyoc", "--plugin", str(EXAMPLE),
                     "-o", str(out)]) == 0
    assert cli.main(["run", str(out), "--random", "--check", "--plugin", str(EXAMPLE)]) == 0
    assert "MISMATCH" not in capsys.readouterr().out
