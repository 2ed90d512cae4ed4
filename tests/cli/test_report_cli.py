"""`retarget report DIR`, `retarget run DIR --report ...` and `retarget compile --report`: the
report options write their files, the files agree with each other, bad options fail early."""
from __future__ import annotations

import csv
import io
import json
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from retarget.cli import main


@pytest.fixture(scope="module")
def compiled(resnet_file, tmp_path_factory):
    """The quarter-width ResNet-18 compiled for vta (pynq) into a module directory."""
    tmp = tmp_path_factory.mktemp("report_cli")
    calib = tmp / "calib.npz"
    np.savez(calib, input=np.random.default_rng(0).standard_normal((2, 3, 32, 32))
             .astype(np.float32))
    out = tmp / "r18.rtm"
    assert main(["compile", str(resnet_file), "--target", "vta", "--calibration", str(calib),
                 "-o", str(out)]) == 0
    return out


def test_report_dir_writes_every_file(compiled, tmp_path, capsys):
    capsys.readouterr()
    files = {k: tmp_path / f"r.{ext}" for k, ext in
             (("csv", "csv"), ("json", "json"), ("roofline", "svg"), ("trace", "trace.json"))}
    argv = ["report", str(compiled)]
    for k, p in files.items():
        argv += [f"--{k}", str(p)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "region vta_0" in out and "frames/s" in out and "roof GOPS" in out
    for p in files.values():
        assert p.is_file() and f"wrote {p}" in out
    doc = json.loads(files["json"].read_text())
    rows = list(csv.DictReader(io.StringIO(files["csv"].read_text())))
    layers = [r for r in rows if r["row"] == "layer"]
    json_layers = [x for reg in doc["regions"] if reg["modelled"] for x in reg["layers"]]
    assert [r["name"] for r in layers] == [x["name"] for x in json_layers]
    assert [int(r["cycles"]) for r in layers] == [x["cycles"] for x in json_layers]
    network = [r for r in rows if r["row"] == "network"]
    assert len(network) == 1 and int(network[0]["cycles"]) == doc["network"]["cycles"]
    assert f"{doc['network']['cycles']:,} modelled cycles" in out
    # CPU regions appear with no modelled figures and (no run) no host time
    cpu = [r for r in rows if r["row"] == "cpu_region"]
    assert cpu and all(r["cycles"] == "" and r["host_ms"] == "" for r in cpu)
    trace = json.loads(files["trace"].read_text())
    assert trace["otherData"]["total_cycles"] == doc["network"]["cycles"]
    assert any(e["ph"] == "X" for e in trace["traceEvents"])
    assert ET.parse(files["roofline"]).getroot().tag.endswith("svg")


def test_run_with_report_adds_measured_host_time(compiled, tmp_path, capsys):
    trace = tmp_path / "t.json"
    assert main(["run", str(compiled), "--check", "--report", "--trace", str(trace)]) == 0
    out = capsys.readouterr().out
    assert "bit-exact" in out and "region vta_0" in out
    assert "host time on this machine (measured, not modelled" in out
    assert json.loads(trace.read_text())["traceEvents"]


def test_compile_with_report(resnet_file, tmp_path, capsys):
    csv_path, calib = tmp_path / "c.csv", tmp_path / "calib.npz"
    np.savez(calib, input=np.zeros((1, 3, 32, 32), np.float32) + 0.5)
    assert main(["compile", str(resnet_file), "--target", "vta", "--report",
                 "--calibration", str(calib), "--csv", str(csv_path)]) == 0
    out = capsys.readouterr().out
    assert "region vta_0" in out and csv_path.is_file()


def test_demo_prints_the_per_layer_cycle_summary(tmp_path, capsys):
    trace = tmp_path / "demo.json"
    assert main(["demo", "--limit", "8", "--batch", "8", "--trace", str(trace)]) == 0
    out = capsys.readouterr().out
    assert "cycle model, per layer" in out and "modelled cycles" in out
    assert "conv2d" in out and trace.is_file()


@pytest.mark.parametrize("argv, message", [
    (["report", "{model}"], "give --target"),
    (["run", "{model}", "--random", "--report"], "give --target vta"),
    (["report", "{dir}", "--roofline", "{tmp}/r.pdf"], ".svg or .png"),
    (["report", "{dir}", "--csv", "{tmp}/no/such/dir/r.csv"], "does not exist"),
    (["report", "{model}", "--target", "cpu"], "no cycle model"),
])
def test_bad_report_requests_fail_clearly(compiled, resnet_file, tmp_path, capsys, argv,
                                          message):
    argv = [a.format(model=resnet_file, dir=compiled, tmp=tmp_path) for a in argv]
    assert main(argv) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("target, says", [("c", "within rtol 0.0001 of the reference: 8/8"),
                                          ("sunway", "openacc ms")])
def test_demo_on_the_float_targets(target, says, capsys):
    assert main(["demo", "--target", target, "--limit", "8", "--batch", "8"]) == 0
    out = capsys.readouterr().out
    assert "demo: OK" in out and says in out and "top-1 float" in out


def test_demo_on_nvdla(capsys):
    """The main job on the NVDLA-style engine: the outside compiler process, the loadable on
    the engine-level simulator, bit-exact, and the throughput model's summary."""
    assert main(["demo", "--target", "nvdla", "--limit", "8", "--batch", "8"]) == 0
    out = capsys.readouterr().out
    assert "demo: OK" in out and "bit-exact vs the integer reference: 8/8" in out
    assert "nvdla simulator" in out and "layers_conv" in out
