"""Where the time goes in a compiled VTA module (report/module.py): the figures recomputed from
their definitions, straight from the instructions and the cycle model's per-instruction times,
on a small ResNet-18 (32x32, width 0.25) compiled for the pynq config."""
import json
import math

import pytest

import retarget
from retarget.errors import TargetError
from retarget.passes.partition import node_macs
from retarget.report.module import module_report
from retarget.runtime.artifact import reseal
from retarget.runtime.module import Module
from retarget.targets.vta.isa import AluInsn, GemmInsn, MemInsn, MemType, Opcode
from retarget.targets.vta.timing import MODULES

from .conftest import build_graph, calibration_for, input_for

BUFFER = {MemType.INP: "inp", MemType.WGT: "wgt", MemType.ACC: "acc", MemType.ACC_8BIT: "acc",
          MemType.UOP: "uop", MemType.OUT: "out"}


@pytest.fixture(scope="module")
def module():
    g = build_graph("resnet18")
    m = retarget.compile(g, "vta", calibration=calibration_for(g))
    yield m
    m.close()


@pytest.fixture(scope="module")
def report(module):
    return module_report(module)


def _dram_bytes(cfg, insn: MemInsn) -> int:
    per = {MemType.INP: cfg.inp_elem_bytes, MemType.WGT: cfg.wgt_elem_bytes,
           MemType.ACC: cfg.acc_elem_bytes, MemType.UOP: cfg.uop_elem_bytes,
           MemType.OUT: cfg.out_elem_bytes, MemType.ACC_8BIT: cfg.batch * cfg.block_out}
    return insn.x_size * insn.y_size * per[insn.memory_type]


def _recount(cfg, insns, first, stop):
    """GEMM and ALU cycles and DRAM bytes per buffer of insns[first:stop], from the ISA."""
    gemm = alu = 0
    nbytes = dict.fromkeys(("inp", "wgt", "acc", "uop", "out"), 0)
    for insn in insns[first:stop]:
        if isinstance(insn, GemmInsn) and not insn.reset:
            gemm += insn.iter_out * insn.iter_in * (insn.uop_end - insn.uop_bgn)
        elif isinstance(insn, AluInsn):
            alu += insn.iter_out * insn.iter_in * (insn.uop_end - insn.uop_bgn) * cfg.alu_ii
        elif isinstance(insn, MemInsn) and insn.opcode in (Opcode.LOAD, Opcode.STORE):
            nbytes[BUFFER[insn.memory_type]] += _dram_bytes(cfg, insn)
    return gemm, alu, nbytes


def test_layers_carry_the_graphs_macs(module):
    nodes = {n.name: n for n in module.graph.nodes}
    seen = 0
    for name, kernel in module.kernels.items():
        spans = kernel.layer_spans()
        assert [s[0] for s in spans] == [i.name for i in kernel.layers]
        for info in kernel.layers:
            n = nodes[info.name]
            if n.op in ("Conv", "Gemm", "MatMul"):
                # useful MACs are the op table's MAC count of the graph node
                assert info.macs == node_macs(n) > 0
                assert info.kind in ("conv2d", "dense")
                assert info.performed_macs >= info.macs
                seen += 1
            else:
                assert info.macs == 0 and info.kind in ("maxpool", "avgpool", "residual_add",
                                                        "requantize")
    assert seen == sum(n.op == "Conv" for n in module.graph.nodes) + 1   # + the fc Gemm


def test_layer_rows_follow_their_definitions(module, report):
    cfg = module.target.config
    bw = cfg.bus_bytes * cfg.clock_mhz * 1e6 / 1e9
    regions = {r.name: r for r in report.modelled}
    assert set(regions) == set(module.kernels)
    for name, kernel in module.kernels.items():
        r = regions[name]
        t = kernel.timing()
        insns = kernel.program.insns
        assert [x.name for x in r.layers] == [s[0] for s in kernel.layer_spans()]
        for row, (lname, first, stop), info in zip(r.layers, kernel.layer_spans(),
                                                   kernel.layers):
            cycles = int(t.end[first:stop].max() - t.start[first:stop].min())
            gemm, alu, nbytes = _recount(cfg, insns, first, stop)
            assert row.cycles == cycles and row.gemm_cycles == gemm and row.alu_cycles == alu
            assert {b: getattr(row, f"{b}_bytes") for b in nbytes} == nbytes
            assert row.macs == info.macs and row.kind == info.kind
            assert row.performed_macs == gemm * cfg.batch * cfg.block_in * cfg.block_out \
                == info.performed_macs
            seconds = cycles / (cfg.clock_mhz * 1e6)
            assert row.gops == pytest.approx(2 * info.macs / seconds / 1e9)
            assert row.utilisation == pytest.approx(gemm / cycles)
            if info.macs:
                intensity = 2 * info.macs / sum(nbytes.values())
                assert row.intensity == pytest.approx(intensity)
                assert row.roof_gops == pytest.approx(min(cfg.peak_gops, bw * intensity))
                assert row.roof_fraction == pytest.approx(row.gops / row.roof_gops)
                # the model's shared bus and GEMM array keep every layer under its roof
                assert 0 < row.roof_fraction <= 1 + 1e-9
            else:
                assert row.bound == "alu" and row.as_dict()["roof_fraction"] is None


def test_region_and_network_totals(module, report):
    cfg = module.target.config
    start = 0
    for r in report.regions:
        if r.target == "cpu":
            assert not r.modelled and r.host_seconds is None   # never ran
            continue
        kernel = module.kernels[r.name]
        t = kernel.timing()
        n = len(kernel.program.insns)
        gemm, alu, nbytes = _recount(cfg, kernel.program.insns, 0, n)
        assert r.cycles == int(t.end.max()) == t.total_cycles
        assert r.start_cycle == start
        assert r.total.gemm_cycles == gemm and r.total.alu_cycles == alu
        assert r.total.dram_bytes == sum(nbytes.values())
        assert r.total.macs == sum(i.macs for i in kernel.layers)
        assert dict(t.busy) == {m: int((t.end - t.start)[t.module == k].sum())
                                for k, m in enumerate(MODULES)}
        start += r.cycles
    assert report.cycles == start == sum(r.cycles for r in report.modelled)
    assert report.frames == module.graph.inputs[0].type.shape[0] == 1
    assert report.seconds == pytest.approx(start / (cfg.clock_mhz * 1e6))
    assert report.fps == pytest.approx(1 / report.seconds)
    macs = sum(node_macs(n) for n in module.graph.nodes
               if n.op in ("Conv", "Gemm", "MatMul") and any(
                   n in reg.nodes for reg in module.offloaded))
    assert report.network.macs == macs
    assert report.network.gops == pytest.approx(2 * macs / report.seconds / 1e9)
    doc = report.to_json()
    assert doc["network"]["cycles"] == start and doc["network"]["fps"] == pytest.approx(
        report.fps)
    text = report.table()
    assert f"{start:,}" in text and "host" in text and "not modelled" in text


def test_trace_is_valid_and_consistent(module, report, tmp_path):
    cfg = module.target.config
    path = tmp_path / "trace.json"
    report.write_trace(str(path))
    doc = json.loads(path.read_text())
    events = doc["traceEvents"]
    slices = [e for e in events if e["ph"] == "X"]
    assert all(set(e) >= {"name", "ts", "dur", "pid", "tid"} and e["dur"] >= 0 for e in slices)
    names = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    by_track: dict = {}
    for e in slices:
        by_track.setdefault((e["pid"], e["tid"]), []).append(e)
    us = 1.0 / cfg.clock_mhz
    for track in by_track.values():       # no two slices of one track partly overlap
        track.sort(key=lambda e: e["ts"])
        for a, b in zip(track, track[1:]):
            assert b["ts"] >= a["ts"] + a["dur"] - 1e-6
    prev_end = 0.0
    for k, r in enumerate(report.modelled):
        pid = k + 2
        assert r.name in names[pid]
        t = module.kernels[r.name].timing()
        for m, module_name in enumerate(MODULES):
            evs = by_track.get((pid, m + 1), [])
            # every instruction once, busy cycles add up exactly
            assert sum(e["args"]["cycles"] for e in evs) == t.busy[module_name]
            assert sum(e["dur"] for e in evs) == pytest.approx(t.busy[module_name] * us)
        insn_events = [e for m in range(3) for e in by_track.get((pid, m + 1), [])]
        assert sorted(e["args"]["index"] for e in insn_events) == list(range(len(t.start)))
        layers = by_track[(pid, 4)]
        assert [e["name"] for e in layers] == [x.name for x in r.layers]
        # regions follow each other on one timeline, in execution order
        first = min(e["ts"] for e in insn_events)
        assert first >= prev_end - 1e-6
        assert first == pytest.approx((r.start_cycle + int(t.start.min())) * us)
        prev_end = max(e["ts"] + e["dur"] for e in insn_events)
        assert prev_end == pytest.approx((r.start_cycle + r.cycles) * us)
    overview = by_track[(1, 1)]
    assert [e["name"] for e in overview] == [r.name for r in report.modelled]
    assert doc["otherData"]["total_cycles"] == report.cycles


def test_report_survives_save_and_load_without_running(module, report, tmp_path):
    module.save(tmp_path / "mod")
    loaded = Module.load(tmp_path / "mod")
    again = module_report(loaded)
    assert loaded._executor is None            # timing only: nothing was simulated
    assert again.to_json() == report.to_json()
    assert again.to_csv() == report.to_csv() and again.table() == report.table()
    for name, k in loaded.kernels.items():
        assert k.layers == module.kernels[name].layers


def test_artifact_without_layer_records_falls_back(module, tmp_path):
    # An artifact from before per-layer MACs were kept: the report still times its layers,
    # counting the MACs the GEMM core performed (padding included), with no kind.
    module.save(tmp_path / "old")
    for f in (tmp_path / "old").rglob("kernel.json"):
        doc = json.loads(f.read_text())
        del doc["layers"]
        f.write_text(json.dumps(doc))
    reseal(tmp_path / "old")     # an old artifact had no checksums; record the edited files
    rep = module_report(Module.load(tmp_path / "old"))
    for r in rep.modelled:
        assert all(x.kind == "" and x.macs == x.performed_macs for x in r.layers)


def test_host_time_after_a_run_is_labelled_not_modelled(module, report):
    before = report.cycles
    module.run(input_for(module.graph))
    rep = module_report(module)
    assert rep.cycles == before                              # runs do not change the model
    cpu = [r for r in rep.regions if r.target == "cpu"]
    assert cpu and all(r.host_seconds is not None and r.host_seconds >= 0 for r in cpu)
    assert rep.host_cpu_seconds == pytest.approx(sum(r.host_seconds for r in cpu))
    assert "measured, not modelled" in rep.network_line()


def test_module_without_a_cycle_model_says_so():
    g = build_graph("resnet18")
    m = retarget.compile(g, "cpu")
    with pytest.raises(TargetError, match="no cycle model"):
        module_report(m)


def test_roofline_plots_gemm_layers(report, tmp_path):
    import xml.etree.ElementTree as ET
    path = tmp_path / "roof.svg"
    report.write_roofline(str(path))
    root = ET.parse(path).getroot()
    circles = root.findall("{http://www.w3.org/2000/svg}circle")
    gemm_layers = sum(1 for r in report.modelled for x in r.layers if x.macs > 0)
    assert len(circles) == gemm_layers + len(report.modelled)   # points + legend markers
    assert all(math.isfinite(x.intensity) for r in report.modelled for x in r.layers if x.macs)
