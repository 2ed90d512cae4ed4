"""Target `sunway`: the issue's networks at test sizes run under the athread emulation within
1e-4 of the reference; no CPE exceeds its LDM; the emulator's counters equal the counts the
cost model reads off the loop nests; swTVM's worked GEMM example; the artifact round trip,
`run --check` and `report`."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

import retarget
from retarget import cli, zoo
from retarget.errors import GraphError
from retarget.frontend.onnx import import_model
from retarget.ir.graph import Node, Value, constant
from retarget.ir.types import TensorType
from retarget.loopnest.ir import Copy, Kernel, Load, Loop, Store, Tensor, loads, walk
from retarget.loopnest.ops import lower_node
from retarget.runtime.module import Module
from retarget.targets.cpu.reference import run_graph
from retarget.targets.sunway.config import SunwayConfig
from retarget.targets.sunway.cost import cpe_counts, layer_cost, paper_layers
from retarget.targets.sunway.emit import CpePrinter
from retarget.targets.sunway.schedule import runs_on, schedule


pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

NETS = {
    "alexnet": dict(size=63, width=0.125, num_classes=10),
    "vgg19": dict(size=32, width=0.125, num_classes=10),
    "resnet18": dict(size=32, width=0.25, num_classes=10),
    "mobilenet_v1": dict(size=32, width=0.25, num_classes=10),
}


def image(graph, seed=3):
    v = graph.inputs[0]
    return {v.name: np.random.default_rng(seed).standard_normal(v.type.shape).astype(np.float32)}


def assert_close(out, ref):
    for k in ref:
        scale = float(np.max(np.abs(ref[k]))) or 1.0
        np.testing.assert_allclose(out[k], ref[k], rtol=1e-4, atol=1e-4 * scale, err_msg=k)


def run_on_own_device(module, x):
    device = module.target.make_device()
    module.bind(device)
    return module.run(x), device


def check_counters(module, device):
    """The emulator's counters of the last run equal the cost model's counts, per layer."""
    (kernel,) = module.kernels.values()
    counted = kernel.counters(device)
    cpes = kernel.config.cpes
    for call, seen in zip(kernel.program.calls, counted):
        if runs_on(call.kernel, kernel.program.mode) == "mpe":
            assert seen["sum"]["dma_calls"] == 0
            continue
        per = cpe_counts(call.kernel, cpes)
        for field in ("get_bytes", "put_bytes", "dma_calls", "gld", "gst"):
            assert seen["sum"][field] == sum(getattr(w, field) for w in per), (call.node, field)
            assert seen["max"][field] == max(getattr(w, field) for w in per), (call.node, field)
        assert seen["max"]["ldm_bytes"] <= kernel.config.ldm_bytes
        assert seen["max"]["ldm_bytes"] == layer_cost(call, kernel.program.mode,
                                                      kernel.config).ldm_bytes


def check_emulated(module, graph) -> None:
    """One emulated run on the module's own device: within 1e-4 of the reference, counters
    as modelled."""
    x = image(graph)
    out, device = run_on_own_device(module, x)
    assert_close(out, run_graph(graph, x))
    check_counters(module, device)


@pytest.mark.parametrize("name", sorted(NETS))
def test_network_runs_emulated_within_1e4_with_counters_as_modelled(name):
    graph = import_model(zoo.build(name, **NETS[name]))
    module = retarget.compile(graph, "sunway")
    try:
        assert all(p.placement == "sunway" for p in module.report.nodes)
        x = image(graph)
        out, device = run_on_own_device(module, x)
        assert_close(out, run_graph(graph, x))
        check_counters(module, device)
        (kernel,) = module.kernels.values()
        on = {runs_on(c.kernel, "swtvm") for c in kernel.program.calls}
        assert "cpe" in on
        # the paper's layers: each conv / fc with the ReLU that reads its output
        for layer in paper_layers(kernel.program):
            calls = [kernel.program.calls[i] for i in layer.calls]
            assert calls[0].node.split()[0] in ("Conv", "Gemm", "MatMul")
            assert all(c.node.startswith("Relu") and c.kernel.inputs[0].name ==
                       calls[0].kernel.outputs[0].name for c in calls[1:])
        if name in ("alexnet", "vgg19"):
            kinds = [layer.kind for layer in paper_layers(kernel.program)]
            assert kinds.count("conv") == {"alexnet": 5, "vgg19": 16}[name]
            assert kinds.count("fc") == 3
            assert all(len(layer.calls) == 2 for layer in paper_layers(kernel.program)
                       if layer.kind == "conv")
        # every layer that runs on the CPEs moves main memory by DMA only
        for c in kernel.program.calls:
            if runs_on(c.kernel, "swtvm") == "cpe":
                assert not any(isinstance(s, Store) and s.dst.tensor.scope == "global"
                               for s, _ in walk(c.kernel.body))
    finally:
        module.close()


@pytest.mark.parametrize("mode", ["openacc", "elementwise"])
def test_baselines_run_emulated_within_1e4_with_counters_as_modelled(mode):
    graph = import_model(zoo.build("resnet18", **NETS["resnet18"]))
    module = retarget.compile(graph, "sunway", config={"mode": mode})
    try:
        check_emulated(module, graph)
        (kernel,) = module.kernels.values()
        copies = [s for c in kernel.program.calls for s, _ in walk(c.kernel.body)
                  if isinstance(s, Copy)]
        direct = [s for c in kernel.program.calls for s, _ in walk(c.kernel.body)
                  if isinstance(s, Store) and s.dst.tensor.scope == "global"]
        if mode == "elementwise":
            assert not copies and direct
        else:       # the careful programmer's code copies slices and keeps some global loads
            assert copies and direct
    finally:
        module.close()


def test_baselines_are_slower_on_the_model_and_the_faithful_one_less_so():
    graph = import_model(zoo.build("resnet18", **NETS["resnet18"]))
    fast = retarget.compile(graph, "sunway")
    try:
        (kernel,) = fast.kernels.values()
        ours = sum(c.seconds for c in kernel.costs())
        acc = sum(c.seconds for c in kernel.costs_of_baseline("openacc"))
        elem = sum(c.seconds for c in kernel.costs_of_baseline("elementwise"))
        assert elem > acc > ours
    finally:
        fast.close()


def test_swtvm_gemm_example_buffers():
    # swTVM Fig. 2: C[1, 1024] = A[1, 1024] x B[1024, 1024] in a 64 KB LDM -> x = 1, y = 128,
    # k = 64: A's buffer 1 x 64, B's 64 x 128, C's 1 x 128, 32.75 KB in all
    a, c = Value("a", TensorType((1, 1024), "float32")), Value("c", TensorType((1, 1024), "float32"))
    b = constant("b", np.ones((1024, 1024), np.float32))
    gemm = lower_node(Node("MatMul", "gemm", [a, b], [c]))
    k = schedule(gemm, SunwayConfig(share_first=False)).kernel
    assert sorted(t.shape for t in k.locals) == [(1, 64), (1, 128), (64, 128)]
    assert k.local_bytes == 32.75 * 1024
    cpe_loops = [s.var for s, _ in walk(k.body) if isinstance(s, Loop) and s.kind == "parallel"]
    assert cpe_loops == ["j_o"]          # the output's 8 column blocks go to the CPEs
    # ours caps the column buffer so that every one of the 64 CPEs gets a block
    k = schedule(gemm, SunwayConfig()).kernel
    assert sorted(t.shape for t in k.locals) == [(1, 16), (1, 512), (512, 16)]
    parallel = [s for s, _ in walk(k.body) if isinstance(s, Loop) and s.kind == "parallel"]
    assert [(s.var, s.extent) for s in parallel] == [("j_o", 64)]


def test_cpe_code_never_touches_main_memory_directly():
    t, o = Tensor("x", (4,)), Tensor("y", (4,))
    k = Kernel("direct", (t,), (o,), (Loop("i", 4, (Store(o[("i",)], Load(t[("i",)])),),
                                            "parallel"),))
    with pytest.raises(GraphError, match="only move data with DMA"):
        CpePrinter(k, baseline=False).slave("direct", "para_direct", "test")
    assert "rt_gld_f(in0" in CpePrinter(k, baseline=True).slave("direct", "p", "test")
    assert runs_on(k, "swtvm") == "mpe" and runs_on(k, "elementwise") == "cpe"


def test_artifact_run_check_and_report(tmp_path, capsys):
    model = tmp_path / "r18.onnx"
    model.write_bytes(zoo.build_bytes("resnet18", **NETS["resnet18"]))
    out = tmp_path / "out"
    assert cli.main(["compile", str(model), "--target", "sunway", "-o", str(out)]) == 0
    names = {p.name for p in (out / "kernels" / "sunway_0").iterdir()}
    assert {"model.c", "layers.h", "athread_emu.c", "baseline_openacc.json",
            "baseline_elementwise.json", "Makefile"} <= names
    assert any(n.startswith("cpe_") for n in names)
    capsys.readouterr()
    assert cli.main(["run", str(out), "--random", "--check"]) == 0
    assert "ok within rtol 0.0001" in capsys.readouterr().out
    assert cli.main(["report", str(out)]) == 0
    text = capsys.readouterr().out
    assert "ours ms" in text and "openacc ms" in text and "elementwise ms" in text
    assert "total" in text
    loaded = Module.load(out)
    try:
        (kernel,) = loaded.kernels.values()
        assert {m: p.mode for m, p in kernel.baselines.items()} == {
            "openacc": "openacc", "elementwise": "elementwise"}
    finally:
        loaded.close()


def test_emitted_project_builds_and_runs_with_its_makefile(tmp_path):
    import subprocess
    graph = import_model(zoo.build("mobilenet_v1", **NETS["mobilenet_v1"]))
    module = retarget.compile(graph, "sunway", config={"build_dir": str(tmp_path / "b")})
    try:
        x = image(graph, 5)
        expected = module.run(x)
    finally:
        module.close()
    project = tmp_path / "b" / "sunway_0"
    names = {p.name for p in project.iterdir()}
    assert {"model.c", "layers.h", "main.c", "Makefile", "athread_emu.h"} <= names
    subprocess.run(["make", "-s", "model"], cwd=project, check=True, capture_output=True)
    (name, arr), = x.items()
    arr.tofile(project / "x.bin")
    subprocess.run([str(project / "model"), "weights.bin", "x.bin", "y.bin"], cwd=project,
                   check=True, timeout=120)
    (out_name, want), = expected.items()
    got = np.fromfile(project / "y.bin", np.float32).reshape(want.shape)
    np.testing.assert_array_equal(got, want)


def test_four_core_groups_split_the_layers_over_256_cpes():
    graph = import_model(zoo.build("vgg19", **NETS["vgg19"]))
    one = retarget.compile(graph, "sunway")
    four = retarget.compile(graph, "sunway:sw26010_4cg")
    try:
        x = image(graph)
        out, device = run_on_own_device(four, x)
        assert_close(out, run_graph(graph, x))
        check_counters(four, device)
        (k1,), (k4,) = one.kernels.values(), four.kernels.values()
        assert k4.config.cpes == 256
        conv = [i for i, c in enumerate(k1.costs()) if c.kind == "conv"]
        # more CPEs (and four memory controllers) never make a layer slower on the model
        assert all(k4.costs()[i].seconds <= k1.costs()[i].seconds for i in conv)
    finally:
        one.close()
        four.close()


def test_batch_of_two_with_buffers_that_hold_whole_tensors():
    # Buffers large enough for whole tensors put the LDM fill, the compute and the put in
    # separate nests: splitting a nest that only fills a CPE's own LDM would leave the others'
    # buffers partly filled (a bug this caught: every output of the batch was wrong).
    graph = import_model(zoo.build("resnet18", size=32, width=0.25, num_classes=10, batch=2))
    module = retarget.compile(graph, "sunway")
    try:
        x = image(graph)
        out, device = run_on_own_device(module, x)
        assert_close(out, run_graph(graph, x))
        check_counters(module, device)
    finally:
        module.close()


def test_openacc_baseline_copies_what_fits_and_pays_and_loads_the_rest():
    # swTVM's GEMM example, C[1, 1024] = A[1, 1024] x B[1024, 1024], as the careful OpenACC
    # programmer writes it: the column loop j over the CPEs; A's row (4 KB, read 1024 times
    # per column) copied once per CPE before it; C's element kept in LDM per column; B's
    # column, 1024 one-float rows, cheaper by global loads than by 1024 DMA transfers
    a, c = Value("a", TensorType((1, 1024), "float32")), Value("c", TensorType((1, 1024), "float32"))
    b = constant("b", np.ones((1024, 1024), np.float32))
    gemm = lower_node(Node("MatMul", "gemm", [a, b], [c]))
    k = schedule(gemm, SunwayConfig(mode="openacc")).kernel
    nest = k.body[-1]
    copies = [(s, loops) for s, loops in walk((nest,)) if isinstance(s, Copy)]
    by_tensor = {}
    for s, loops in copies:
        glob = s.src if s.src.tensor.scope == "global" else s.dst
        by_tensor.setdefault(glob.tensor.name, []).append(
            tuple(lp.kind for lp in loops))
    assert by_tensor["a"] == [("serial",)]                   # inside i, outside the CPE loop
    assert by_tensor["c"] == [("serial", "parallel")] * 2    # get and put, per column
    assert "b" not in by_tensor
    assert any(isinstance(s, Store) and any(ld.access.tensor.name == "b"
                                            for ld in loads(s.value)) for s, _ in walk((nest,)))
    # the same rules with copies wherever they fit: B's column goes by DMA too
    fits = schedule(gemm, SunwayConfig(mode="openacc", acc_copy_rule="fits")).kernel
    assert any(isinstance(s, Copy) and s.src.tensor.name == "b" for s, _ in walk(fits.body))
    with pytest.raises(ValueError, match="acc_copy_rule"):
        SunwayConfig(mode="openacc", acc_copy_rule="sometimes")


def test_double_buffering_runs_emulated_with_counters_as_modelled_and_hides_dma():
    # 4 CPEs so that each runs several iterations of its loops: the prefetch of iteration
    # i + 1 really lands (at rt_dma_wait_async, not before) while i computes
    graph = import_model(zoo.build("vgg19", **NETS["vgg19"]))
    config = {"cpes_per_cg": 4, "double_buffer": True}
    module = retarget.compile(graph, "sunway", config=config)
    single = retarget.compile(graph, "sunway", config={"cpes_per_cg": 4})
    try:
        check_emulated(module, graph)
        (kernel,) = module.kernels.values()
        (k1,) = single.kernels.values()
        sources = kernel.emit(kernel.program, kernel.config)
        assert any("rt_dma_iget(" in text for text in sources.values())
        costs, plain = kernel.costs(), k1.costs()
        assert any(c.hidden_s > 0 for c in costs)
        assert all(c.hidden_s == 0 for c in plain)
        # never slower than the single-buffered schedule, layer by layer, on the model
        assert all(d.seconds <= s.seconds * (1 + 1e-9) for d, s in zip(costs, plain))
        assert sum(d.seconds for d in costs) < sum(s.seconds for s in plain)
    finally:
        module.close()
        single.close()
    with pytest.raises(ValueError, match="double_buffer"):
        SunwayConfig(mode="openacc", double_buffer=True)
