"""Target `c`: a small network compiled to C and run through the Device API within 1e-4 of the
reference; the emitted project built and run outside retarget with its Makefile; a missing
compiler; the artifact round trip (and its refusal of edited sources); `retarget run --check`.

Most tests use the hand-made lowering of handmade.py (Conv, Relu, Add, Gemm, Flatten), so they
test the target's plumbing apart from loopnest/ops/; a zoo ResNet-18 runs with the real one."""
from __future__ import annotations

import json
import shutil
import subprocess

import numpy as np
import pytest

import retarget
from retarget import cli
from retarget.errors import DeviceError, ModelLoadError, TargetError
from retarget.runtime.artifact import reseal
from retarget.device.base import Task
from retarget.runtime.module import Module
from retarget.targets.aot.device import LibraryDevice
from retarget.targets.c import CTarget
from retarget.targets.aot.device import RUN, task_args
from retarget.ops.reference import run_graph
from retarget.targets.registry import get_target

from .handmade import FAST_CFLAGS, HandmadeCTarget, small_net

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
RTOL = 1e-4
QUICK = {"cflags": FAST_CFLAGS}


def handmade(**config) -> HandmadeCTarget:
    return HandmadeCTarget().with_overrides({**QUICK, **config})


def image(graph, seed: int = 1) -> dict[str, np.ndarray]:
    v = graph.inputs[0]
    return {v.name: np.random.default_rng(seed).standard_normal(v.type.shape).astype(np.float32)}


def assert_close(out: dict, ref: dict) -> None:
    assert out.keys() == ref.keys()
    for k in ref:
        scale = float(np.max(np.abs(ref[k]))) or 1.0
        np.testing.assert_allclose(out[k], ref[k], rtol=RTOL, atol=RTOL * scale, err_msg=k)


@pytest.fixture(scope="module")
def net():
    graph = small_net()
    module = retarget.compile(graph, handmade())
    yield graph, module
    module.close()


def test_small_net_runs_as_c_within_1e4_of_the_reference(net):
    graph, module = net
    placed = {p.name: p for p in module.report.nodes}
    assert placed["pool"].placement == "cpu"
    assert placed["pool"].reason == "c has no loop-nest lowering for MaxPool"
    assert all(p.placement == "c" for n, p in placed.items() if n != "pool")
    for seed in (1, 2):
        x = image(graph, seed)
        assert_close(module.run(x), run_graph(module.graph, x))
    c_regions = [p for p in module.profile if p.target == "c"]
    assert c_regions and all(p.tasks == 1 and p.counters["kernels"] >= 0 for p in c_regions)


def test_the_arena_shares_memory_and_outputs_are_written_in_place(net):
    graph, module = net
    first = module.kernels[module.offloaded[0].name]
    p = first.program
    # c1, r1, c2 in the arena (s and r2 are region outputs): c2 reuses c1's bytes
    assert p.arena_bytes == 2048 and p.sum_of_tensor_bytes == 3072
    assert first.arena_bytes == p.arena_bytes and first.build_seconds > 0
    # the Add writes the buffer of output Flatten(s) itself: no copy at the end
    assert not p.copies
    identity = [module.kernels[r.name] for r in module.offloaded
                if [n.op for n in r.nodes] == ["Identity"]]
    assert identity and identity[0].program.copies      # a region input copied to its output


def test_naive_mode_same_results(net):
    graph, module = net
    naive = retarget.compile(graph, handmade(mode="naive"))
    try:
        assert {k.program.mode for k in naive.kernels.values()} == {"naive"}
        x = image(graph)
        assert_close(naive.run(x), module.run(x))
    finally:
        naive.close()


def test_emitted_project_builds_and_runs_with_its_makefile(net, tmp_path):
    if shutil.which("make") is None:
        pytest.skip("needs make")
    graph, module = net
    module.save(tmp_path / "art")
    region = module.offloaded[0]
    project = tmp_path / "project"
    shutil.copytree(tmp_path / "art" / "kernels" / region.name, project)
    assert not list(project.glob("*.so"))                  # the artifact ships no binary
    done = subprocess.run(["make", "OPENMP=1", f"CFLAGS={FAST_CFLAGS}"], cwd=project,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (project / "libmodel.so").is_file() and (project / "model").is_file()
    x = image(graph, 5)
    ref = run_graph(module.graph, x, intermediates=True)
    args = [str(project / "weights.bin")]
    for i, v in enumerate(region.inputs):
        ref[v.name].astype(np.float32).tofile(project / f"in{i}.raw")
        args.append(str(project / f"in{i}.raw"))
    args += [str(project / f"out{j}.raw") for j in range(len(region.outputs))]
    done = subprocess.run([str(project / "model"), *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    for j, v in enumerate(region.outputs):
        got = np.fromfile(project / f"out{j}.raw", np.float32).reshape(v.type.shape)
        assert_close({v.name: got}, {v.name: ref[v.name]})
    header = (project / "model.h").read_text()
    assert "#define MODEL_ARENA_BYTES 2048" in header and "int model_run(" in header
    # a wrong-sized input file is an error, not a silent misread
    (project / "in0.raw").write_bytes(b"\0" * 10)
    done = subprocess.run([str(project / "model"), *args], capture_output=True, text=True)
    assert done.returncode != 0 and "does not hold exactly" in done.stderr


def test_missing_compiler_says_where_the_sources_are(tmp_path):
    with pytest.raises(TargetError) as e:
        retarget.compile(small_net(), handmade(cc="no-such-cc", build_dir=str(tmp_path)))
    msg = str(e.value)
    assert "C compiler 'no-such-cc' not found" in msg and "sources are written in" in msg
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written and all((tmp_path / d / "model.c").is_file() and (tmp_path / d / "Makefile").is_file()
                           for d in written)
    assert str(tmp_path / written[0]) in msg


def test_a_temporary_project_is_kept_when_its_build_fails():
    with pytest.raises(TargetError, match=r"sources are written in (\S+);") as e:
        retarget.compile(small_net(), handmade(cc="no-such-cc"))
    directory = str(e.value).split("sources are written in ")[1].split(";")[0]
    try:
        assert (__import__("pathlib").Path(directory) / "model.c").is_file()
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def test_artifact_round_trip_rebuilds_from_the_verified_loop_nests(net, tmp_path):
    graph, module = net
    x = image(graph, 7)
    before = module.run(x)
    out = module.save(tmp_path / "art")
    kdir = out / "kernels" / module.offloaded[0].name
    assert sorted(p.name for p in kdir.iterdir()) == ["Makefile", "main.c", "model.c", "model.h",
                                                      "program.json", "weights.bin"]
    # rebuilt with the flags it was built with: the same bits (with other flags, an FMA
    # build against one without would differ in the last place: docs/aot-c.md, "Vectors")
    loaded = Module.load(out, config=QUICK)
    try:
        assert type(loaded.target) is CTarget                    # the registered target
        assert all(k.build is None for k in loaded.kernels.values())   # nothing built at load
        after = loaded.run(x)
        for k in before:
            np.testing.assert_array_equal(after[k], before[k])
        assert all(k.build is not None for k in loaded.kernels.values())
    finally:
        loaded.close()


def test_edited_sources_are_refused_even_when_resealed(net, tmp_path):
    graph, module = net
    out = module.save(tmp_path / "art")
    src = out / "kernels" / module.offloaded[0].name / "model.c"
    src.write_text(src.read_text().replace("return 0;", "return 0; /* edited */"))
    with pytest.raises(ModelLoadError, match="the manifest records"):
        Module.load(out)
    reseal(out)
    with pytest.raises(ModelLoadError, match="differs from the C that retarget generates"):
        Module.load(out)


def test_a_damaged_program_is_refused(net, tmp_path):
    graph, module = net
    out = module.save(tmp_path / "art")
    path = out / "kernels" / module.offloaded[0].name / "program.json"
    doc = json.loads(path.read_text())
    doc["calls"][0]["args"][-1] = ["arena", doc["arena_bytes"]]     # past the arena's end
    path.write_text(json.dumps(doc))
    reseal(out)
    with pytest.raises(ModelLoadError, match="outside the .*-byte arena"):
        Module.load(out)


def test_cli_run_check_on_the_artifact(net, tmp_path, capsys):
    graph, module = net
    out = module.save(tmp_path / "art")
    assert cli.main(["run", str(out), "--check"]) == 0
    text = capsys.readouterr().out
    assert "check logits: ok" in text and "MISMATCH" not in text


def test_device_checks_buffers_against_the_library(net):
    graph, module = net
    kernel = module.kernels[module.offloaded[0].name]
    device = LibraryDevice("c", memory_bytes=1 << 20)
    assert device._memory.ctypes.data % 4096 == 0       # device address 0 is page aligned
    kernel.upload(device)
    handle, w, arena = kernel._on_device[id(device)]
    small = device.malloc(16)
    with pytest.raises(DeviceError, match="overruns the allocation"):
        device.submit(Task(RUN, task_args(handle, w, arena, [small], [small, small])))
        device.synchronize()
    with pytest.raises(DeviceError, match="takes 1 inputs and 2 outputs"):
        device.submit(Task(RUN, task_args(handle, w, arena, [small], [])))
        device.synchronize()
    kernel.release(device)
    assert device.stats().memory.live_allocations == 1


def test_config_and_registration():
    t = get_target("c")
    assert isinstance(t, CTarget) and not t.bit_exact and t.number_format is None
    assert t.config.mode == "optimized" and t.config.cflags == "-O3 -march=native -std=c99"
    assert get_target("c:naive").config.mode == "naive"
    with pytest.raises(TargetError, match="mode 'fast' is not one of"):
        get_target("c", {"mode": "fast"})


class NoLoweringCTarget(CTarget):
    def op_lowering(self):
        return None


def test_without_an_op_lowering_every_node_stays_on_the_cpu():
    module = retarget.compile(small_net(), NoLoweringCTarget())
    assert not module.offloaded
    assert all("retarget.loopnest.ops" in p.reason for p in module.report.nodes)


def test_zoo_resnet18_within_1e4_of_the_reference():
    from retarget import zoo
    from retarget.frontend.onnx import import_model
    graph = import_model(zoo.build("resnet18", size=32, width=0.25, num_classes=10))
    module = retarget.compile(graph, "c", config={**QUICK, "openmp": False})
    try:
        assert module.offloaded
        x = image(graph)
        assert_close(module.run(x), run_graph(module.graph, x))
    finally:
        module.close()
