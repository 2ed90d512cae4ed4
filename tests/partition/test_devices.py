"""Placement across devices: one compile for vta and dnnvm with the CPU as the last resort.

A small ResNet-18 split across the two accelerators and the CPU runs bit-exactly against the
integer reference; pins are honoured and refused where they must be; the bytes moved between
devices are counted the same way by the partitioner and the executor; a saved module with two
devices loads and checks in a fresh process."""
from __future__ import annotations

import subprocess
import sys
import warnings

import numpy as np
import onnx
import pytest

import retarget
from retarget import zoo
from retarget.compiler import COPY_SECONDS_PER_BYTE, node_costs
from retarget.errors import GraphError, PlacementError, TargetError
from retarget.frontend.onnx import import_model
from retarget.passes.partition import partition
from retarget.runtime.module import Module
from retarget.targets.cpu.reference import run_graph

NET = dict(size=32, width=0.25, num_classes=10, seed=0)
DEVICES = "vta,dnnvm:test"
PIN = {"/layer2*": "dnnvm"}     # the rest of the convolutions go to vta, the first device


def _graph():
    return import_model(zoo.build("resnet18", **NET))


def _samples(graph, count=2, seed=1):
    rng = np.random.default_rng(seed)
    return [{v.name: rng.standard_normal(v.type.shape).astype(np.float32) for v in graph.inputs}
            for _ in range(count)]


def _compile(graph, target=DEVICES, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return retarget.compile(graph, target, calibration=_samples(graph), **options)


@pytest.fixture(scope="module")
def split():
    g = _graph()
    m = _compile(g, pins=PIN)
    yield m
    m.close()


def _moved_between(module) -> int:
    """Bytes of values one device makes and another reads, once per reading device."""
    made = {id(v): r.target for r in module.regions if r.target != "cpu" for v in r.outputs}
    seen, total = set(), 0
    for r in module.offloaded:
        for v in r.inputs:
            src = made.get(id(v))
            if src is not None and src != r.target and (id(v), r.target) not in seen:
                seen.add((id(v), r.target))
                total += v.type.nbytes
    return total


def test_split_across_two_accelerators_and_the_cpu_is_bit_exact(split):
    m = split
    on = {n.name: n.placement for n in m.report.nodes}
    assert {"vta", "dnnvm", "cpu"} <= set(on.values())
    assert all(p == "dnnvm" for name, p in on.items() if name.startswith("/layer2"))
    assert on["/layer1.0.conv1/Conv"] == "vta" and on["/layer3.0.conv1/Conv"] == "vta"
    for x in _samples(m.graph, 2, seed=5):
        got, want = m.run(x), run_graph(m.graph, x)
        assert all(np.array_equal(got[k], want[k]) and got[k].dtype == want[k].dtype for k in want)


def test_bytes_moved_between_devices_are_counted(split, tmp_path):
    m = split
    want = _moved_between(m)
    assert want > 0                                   # vta -> dnnvm -> vta directly
    assert m.report.bytes_between_devices == want
    m.run(_samples(m.graph, 1, seed=3)[0])
    assert sum(p.bytes_between for p in m.profile) == want
    assert sum(p.bytes_in + p.bytes_out for p in m.profile) == m.report.bytes_crossing
    assert f"of which {want} move between devices" in m.report.table()
    loaded = Module.load(m.save(tmp_path / "art"))
    assert loaded.report.bytes_between_devices == want and loaded.report.table() == m.report.table()
    assert sorted(loaded.targets) == ["dnnvm", "vta"] and loaded.targets["dnnvm"].preset_name == "test"
    with pytest.raises(TargetError, match="several devices .* not implemented"):
        m.export_regions(tmp_path / "regions.json")


def test_first_device_that_accepts_a_node_and_why_the_earlier_refused(split):
    fc = {n.name: n for n in split.report.nodes}["/fc/Gemm"]
    assert fc.placement == "vta"
    m = _compile(_graph(), "dnnvm:test,vta")
    nodes = {n.name: n for n in m.report.nodes}
    assert nodes["/layer1.0.conv1/Conv"].placement == "dnnvm"
    fc = nodes["/fc/Gemm"]
    assert fc.placement == "vta"
    assert fc.reason.startswith("dnnvm: ") and "fully-connected" in fc.reason and "vta: " in fc.reason
    x = _samples(m.graph, 1, seed=2)[0]
    got, want = m.run(x), run_graph(m.graph, x)
    assert all(np.array_equal(got[k], want[k]) for k in want)
    m.close()


def test_pins_are_honoured_and_refused_with_the_reason():
    g = _graph()
    m = _compile(g, pins={"/layer1.0.conv*": "cpu"})
    nodes = {n.name: n for n in m.report.nodes}
    assert nodes["/layer1.0.conv1/Conv"].placement == "cpu"
    assert "pinned to cpu by '/layer1.0.conv*'" in nodes["/layer1.0.conv1/Conv"].reason
    m.close()
    with pytest.raises(PlacementError, match=r"'/fc/Gemm'.*cannot run on dnnvm.*fully-connected"):
        _compile(g, pins={"/fc/Gemm": "dnnvm"})
    with pytest.raises(PlacementError, match=r"'nvdla' is not a device of this compile"):
        _compile(g, pins={"/fc/Gemm": "nvdla"})
    with pytest.raises(GraphError, match=r"pin to dnnvm '/nothing\*' matches no node"):
        _compile(g, pins={"/nothing*": "dnnvm"})
    with pytest.raises(PlacementError, match="forced onto cpu"):
        _compile(g, pins={"/layer2*": "dnnvm"}, cpu_nodes=["/layer2.0.conv1/Conv"])


def test_devices_must_share_a_number_format_and_appear_once():
    g = _graph()
    with pytest.raises(TargetError, match=r"share a number format; vta int8-pow2, nvdla "
                                          r"int8-mul-shift per-channel"):
        retarget.compile(g, ["vta", "nvdla"])
    with pytest.raises(TargetError, match="each target may appear once"):
        retarget.compile(g, "vta,vta:1x32")
    with pytest.raises(TargetError, match="config overrides"):
        retarget.compile(g, "vta,dnnvm", config={"clock_mhz": 200})


def test_cheapest_placement_follows_the_cost_models():
    g = _graph()
    m = _compile(g, placement="cheapest")
    costs = node_costs(m.graph, list(m.targets.values()))
    where = {n.name: n.placement for n in m.report.nodes}
    producer = m.graph.producers()
    compared = 0
    for n, c, node in zip(m.report.nodes, costs, m.graph.nodes):
        priced = {d: s for d, s in c.items() if s is not None}
        if n.placement != "cpu" and len(priced) == 2:
            # its compute, plus every byte it reads from the other device moved via the host
            total = {d: s + COPY_SECONDS_PER_BYTE * sum(
                v.type.nbytes for v in node.inputs if v in producer
                and where[producer[v].name] not in ("cpu", d)) for d, s in priced.items()}
            assert total[n.placement] == min(total.values()), (n.name, total)
            assert "cheapest: " in n.reason
            compared += 1
    assert compared > 20
    assert {"vta", "dnnvm"} <= {n.placement for n in m.report.nodes}
    x = _samples(m.graph, 1, seed=4)[0]
    got, want = m.run(x), run_graph(m.graph, x)
    assert all(np.array_equal(got[k], want[k]) for k in want)
    m.close()
    with pytest.raises(TargetError, match="needs a cost model on every device; c, sunway have none"):
        retarget.compile(g, "c,sunway", placement="cheapest")


def test_cli_compile_save_and_check_in_a_fresh_process(tmp_path):
    model = tmp_path / "resnet18.onnx"
    onnx.save(zoo.build("resnet18", **NET), model)
    out = tmp_path / "art"
    run = lambda *a: subprocess.run([sys.executable, "-m", "retarget", *a], capture_output=True,
                                    text=True, timeout=300)
    r = run("compile", str(model), "--target", DEVICES, "--pin", "/layer2*=dnnvm", "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert "move between devices" in r.stdout and "pinned to dnnvm by '/layer2*'" in r.stdout
    r = run("run", str(out), "--check", "--profile")
    assert r.returncode == 0, r.stderr
    assert "bit-exact vs the integer reference" in r.stdout
    assert "bytes moved between devices" in r.stdout
    r = run("compile", str(model), "--target", DEVICES, "--pin", "/fc/Gemm=dnnvm")
    last = r.stderr.strip().splitlines()[-1]     # after the calibration warning: one line
    assert r.returncode == 2 and last.startswith("error: pin '/fc/Gemm'=dnnvm: Gemm '/fc/Gemm' "
                                                 "cannot run on dnnvm")


def test_cheapest_prices_the_copies_from_other_devices(split):
    """A node a hair cheaper on vta, between nodes on dnnvm: it moves to vta only when the
    copies in from dnnvm cost nothing."""
    g, targets = split.graph, list(split.targets.values())
    unit = ("/layer1.0.conv1/Conv", "/layer1.0.conv1/Conv/requant")
    costs = [{"vta": 1e-6 - 1e-12, "dnnvm": 1e-6} if n.name in unit else
             {"vta": 2e-6, "dnnvm": 1e-6} for n in g.nodes]
    for per_byte, want in ((0.0, "vta"), (COPY_SECONDS_PER_BYTE, "dnnvm")):
        parts = partition(g, targets, choice="cheapest", costs=costs,
                          copy_seconds_per_byte=per_byte)
        on = {n.name: n for n in parts.report.nodes}
        assert on[unit[0]].placement == want, on[unit[0]].reason
        assert on["/layer1.0.conv2/Conv"].placement == "dnnvm"
    assert "copying in" in on[unit[0]].reason


def test_demo_runs_across_two_devices(capsys):
    from retarget.cli import main
    assert main(["demo", "--target", "dnnvm,vta", "--limit", "8", "--batch", "8"]) == 0
    out = capsys.readouterr().out
    assert "bit-exact vs the integer reference: 8/8 images" in out and "demo: OK" in out
    assert "dnnvm.instructions" in out and "vta.instructions" in out
    assert main(["demo", "--target", "vta,nope"]) == 2
