"""Per-layer report, roofline plot and Perfetto trace of a timed VTA stream.

The stream is a small builder-made blocked GEMM (two virtual threads) split into two layers;
figures are checked against their definitions recomputed here from the raw counters."""
from __future__ import annotations

import csv
import io
import json
import math
import xml.etree.ElementTree as ET

import pytest

from retarget.report.layers import (format_layers, layer_rows, make_row,
                                    row_from_result, to_csv, to_json, total_row, write_csv,
                                    write_json)
from retarget.report.roofline import roofline_points, roofline_svg, write_roofline
from retarget.report.trace import LAYER_TID, chrome_trace, write_trace
from retarget.targets.vta.config import preset
from retarget.targets.vta.timing import MODULES, simulate_timing

CFG = preset("pynq")


@pytest.fixture(scope="module")
def timed(program):
    prog = program()
    n = len(prog.insns)
    result = simulate_timing(prog, layers=[("first", 0, n // 2), ("second", n // 2, n)])
    return prog, result


def test_row_figures_follow_their_definitions(timed):
    _, r = timed
    rows = layer_rows(r)
    assert [x.name for x in rows] == ["first", "second"]
    for row, lt in zip(rows, r.layers):
        assert row.cycles == lt.cycles and row.macs == lt.macs == lt.gemm_cycles * 256
        seconds = lt.cycles / 100e6
        assert row.gops == pytest.approx(2 * lt.macs / seconds / 1e9)
        assert row.utilisation == pytest.approx(lt.gemm_cycles / lt.cycles)
        assert row.dram_bytes == sum(lt.bytes.values())
        assert row.intensity == pytest.approx(2 * lt.macs / sum(lt.bytes.values()))
        bw = 8 * 100e6 / 1e9                      # pynq: 8 B x 100 MHz = 0.8 GB/s
        assert row.roof_gops == pytest.approx(min(51.2, bw * row.intensity))
        assert row.roof_fraction == pytest.approx(row.gops / row.roof_gops)
        # the shared bus in the model keeps every layer under its roof
        assert 0 < row.roof_fraction <= 1.0 + 1e-9


def test_whole_stream_row_and_totals(timed, program):
    _, r = timed
    whole = row_from_result("all", r)
    assert whole.cycles == r.total_cycles and whole.gemm_cycles == r.gemm_cycles
    tot = total_row(layer_rows(r), cycles=r.total_cycles)
    assert tot.macs == whole.macs and tot.dram_bytes == whole.dram_bytes
    assert tot.gops == pytest.approx(whole.gops)
    assert layer_rows(simulate_timing(program()))[0].name == "all"


def test_bound_classification():
    # 1 MAC per DRAM byte = 2 ops/B: 1.6 GOPS roof on pynq, memory bound; 1000 ops/B: compute.
    mem = make_row("m", CFG, macs=1000, cycles=10_000, gemm_cycles=4, nbytes={"inp": 1000})
    cmp_ = make_row("c", CFG, macs=500_000, cycles=10_000, gemm_cycles=1953,
                    nbytes={"wgt": 1000})
    assert mem.bound == "memory" and mem.roof_gops == pytest.approx(1.6)
    assert cmp_.bound == "compute" and cmp_.roof_gops == pytest.approx(CFG.peak_gops)
    no_traffic = make_row("z", CFG, macs=10, cycles=10, gemm_cycles=10, nbytes={})
    assert math.isinf(no_traffic.intensity) and no_traffic.roof_gops == CFG.peak_gops
    with pytest.raises(ValueError, match="unknown buffer"):
        make_row("bad", CFG, 1, 1, 1, {"psum": 4})


def test_compute_ceiling_is_gemm_over_the_compute_modules_work():
    r = make_row("c", CFG, macs=256 * 36, cycles=100, gemm_cycles=36, nbytes={},
                 alu_cycles=8, reset_cycles=1)
    assert r.compute_ceiling == pytest.approx(36 / 45)
    assert r.as_dict()["compute_ceiling"] == pytest.approx(36 / 45)
    assert make_row("g", CFG, 256, 10, 1, {}).compute_ceiling == 1.0   # GEMM work only
    assert make_row("p", CFG, 0, 10, 0, {}, alu_cycles=8).compute_ceiling == 0.0
    cells = format_layers([r]).splitlines()[-1].split()
    assert cells[5] == "80.0%" and cells[6] == "8.0%"      # ceil, ALU share of the cycles


def test_table_csv_json(timed, tmp_path):
    _, r = timed
    rows = layer_rows(r)
    text = format_layers(rows, total=total_row(rows, cycles=r.total_cycles), title="t")
    lines = text.splitlines()
    assert lines[0] == "t" and "roof GOPS" in lines[1] and lines[3].startswith("first")
    assert lines[-1].startswith("total")
    parsed = list(csv.DictReader(io.StringIO(to_csv(rows))))
    assert [p["name"] for p in parsed] == ["first", "second"]
    assert int(parsed[0]["cycles"]) == rows[0].cycles
    assert float(parsed[1]["roof_fraction"]) == pytest.approx(rows[1].roof_fraction)
    doc = to_json(rows, config="pynq")
    assert doc["config"] == "pynq" and doc["layers"][1]["inp_bytes"] == rows[1].inp_bytes
    write_csv(str(tmp_path / "l.csv"), rows)
    write_json(str(tmp_path / "l.json"), rows, total_cycles=r.total_cycles)
    back = json.loads((tmp_path / "l.json").read_text())
    assert back["total_cycles"] == r.total_cycles and len(back["layers"]) == 2
    assert (tmp_path / "l.csv").read_text().count("\n") == 3


def test_roofline_svg(timed, tmp_path, program):
    _, r = timed
    one = layer_rows(simulate_timing(program(vthreads=1),
                                     layers=[("first", 0, 10), ("second", 10, 20)]))
    two = layer_rows(r)
    svg = roofline_svg({"1 thread": one, "2 threads": two}, title="test")
    root = ET.fromstring(svg)                         # well-formed XML
    ns = "{http://www.w3.org/2000/svg}"
    assert len(root.findall(f"{ns}circle")) == 4 + 2  # 4 points + 2 legend markers
    assert len(root.findall(f"{ns}polyline")) == 1
    pts = roofline_points(two)
    assert [p[0] for p in pts] == ["first", "second"] and all(p[2] <= p[3] for p in pts)
    write_roofline(str(tmp_path / "r.svg"), two)
    assert (tmp_path / "r.svg").read_text().startswith("<svg")
    with pytest.raises(ValueError, match=".svg or .png"):
        write_roofline(str(tmp_path / "r.pdf"), two)
    with pytest.raises(ValueError, match="no layers"):
        roofline_svg([])


def test_roofline_draws_compute_ceilings_below_the_roof():
    # 36 GEMM cycles per 45 of compute work: a ceiling at 80% of peak, below a compute roof;
    # a GEMM-only layer's ceiling is the peak itself and is not drawn
    capped = make_row("capped", CFG, macs=256 * 3600, cycles=5000, gemm_cycles=3600,
                      nbytes={"wgt": 1000}, alu_cycles=800, reset_cycles=100)
    free = make_row("free", CFG, macs=256 * 3600, cycles=4000, gemm_cycles=3600,
                    nbytes={"wgt": 1000})
    assert capped.ceiling_gops == pytest.approx(0.8 * CFG.peak_gops)
    assert capped.ceiling_gops < capped.roof_gops
    assert free.ceiling_gops == pytest.approx(free.roof_gops)
    root = ET.fromstring(roofline_svg([capped, free]))
    ns = "{http://www.w3.org/2000/svg}"
    dashes = [e for e in root.findall(f"{ns}line") if e.find(f"{ns}title") is not None]
    assert len(dashes) == 1 and "capped: compute ceiling" in dashes[0].find(f"{ns}title").text


def test_trace_is_valid_and_matches_busy_cycles(timed, tmp_path):
    prog, r = timed
    path = tmp_path / "trace.json"
    write_trace(str(path), r, prog.insns)
    doc = json.loads(path.read_text())
    events = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    names = {e["tid"]: e["args"]["name"] for e in doc["traceEvents"]
             if e["ph"] == "M" and e["name"] == "thread_name"}
    assert [names[k + 1] for k in range(3)] == list(MODULES) and names[LAYER_TID] == "layers"
    for tid in list(range(1, 4)) + [LAYER_TID]:
        track = sorted((e for e in events if e["tid"] == tid), key=lambda e: e["ts"])
        for a, b in zip(track, track[1:]):           # no overlaps within a track
            assert a["ts"] + a["dur"] <= b["ts"] + 1e-9
    for k, module in enumerate(MODULES):
        cycles = sum(e["args"]["cycles"] for e in events if e["tid"] == k + 1)
        assert cycles == r.busy[module]
        us = sum(e["dur"] for e in events if e["tid"] == k + 1)
        assert us == pytest.approx(r.busy[module] / CFG.clock_mhz)
    insn_events = [e for e in events if e["tid"] != LAYER_TID]
    assert len(insn_events) == len(prog.insns)
    assert {e["args"]["layer"] for e in insn_events} == {"first", "second"}
    layer_events = [e for e in events if e["tid"] == LAYER_TID]
    assert [e["name"] for e in layer_events] == ["first", "second"]
    assert doc["otherData"]["total_cycles"] == r.total_cycles
    with pytest.raises(ValueError, match="instructions"):
        chrome_trace(r, prog.insns[:-1])
