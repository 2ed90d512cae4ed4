"""The sweep: exhaustive fronts against brute force, resume, failures, pools, Ray, NSGA-II."""
import json
import os

import pytest

import retarget
from retarget.explore import evaluation as ev
from retarget.explore import explore
from retarget.explore.pools import LocalPool
from retarget.targets.space import PARTS, canonical_key
from retarget.report.module import module_report
from retarget.targets.vta.space import resources

OBJ = ("latency", "dsp", "bram")


def _keys(records):
    return sorted(r["key"] for r in records)


def brute_force_front(problem, space):
    """Compile every point directly and keep those no other point beats on every objective
    (written independently of explore's own front)."""
    pts = []
    for point in space.points():
        cfg = space.config(point)
        try:
            m = retarget.compile(problem.graph, "vta", config=point)
        except retarget.errors.RetargetError:
            continue
        rep = module_report(m)
        r = resources(cfg)
        pts.append((canonical_key(point), (rep.cycles / (cfg.clock_mhz * 1e6), r.dsp, r.bram18)))
    front = []
    for k, v in pts:
        beaten = False
        for _, w in pts:
            if w != v and w[0] <= v[0] and w[1] <= v[1] and w[2] <= v[2]:
                beaten = True
        if not beaten:
            front.append(k)
    return sorted(front), len(pts)


def test_exhaustive_equals_brute_force(problem, space, tmp_path):
    res = explore(problem, space, budget=100, objectives=OBJ, results=tmp_path / "r.jsonl",
                  workers=0, progress=False)
    assert res.mode == "exhaustive" and res.evaluated == space.size == 8
    want, n_ok = brute_force_front(problem, space)
    assert len(res.ok) == n_ok == 4
    assert _keys(res.front) == want
    lines = (tmp_path / "r.jsonl").read_text().splitlines()
    assert len(lines) == 8 and all(json.loads(l)["key"] for l in lines)


def test_failed_compile_is_recorded_and_the_sweep_goes_on(problem, space):
    res = explore(problem, space, budget=100, objectives=OBJ, workers=0, progress=False)
    bad = [r for r in res.records if r["config"]["log_acc_buff_size"] == 9]
    assert len(bad) == 4 and all(r["status"] == "error" for r in bad)
    assert all("no tiling fits" in r["error"] for r in bad)
    assert len(res.ok) == 4                       # the points after them were evaluated


def test_resume_after_a_kill_recomputes_nothing(problem, space, tmp_path, monkeypatch):
    full = tmp_path / "full.jsonl"
    first = explore(problem, space, budget=100, objectives=OBJ, results=full, workers=0,
                    progress=False)
    lines = full.read_text().splitlines()
    half = tmp_path / "half.jsonl"
    # killed mid-sweep: half the records, then a line cut short
    half.write_text("\n".join(lines[:4]) + "\n" + lines[4][:25])
    calls = []
    real = ev.evaluate

    def counting(problem, config):
        calls.append(canonical_key(config))
        return real(problem, config)
    monkeypatch.setattr(ev, "evaluate", counting)
    again = explore(problem, space, budget=100, objectives=OBJ, results=half, workers=0,
                    progress=False)
    done_before = {json.loads(l)["key"] for l in lines[:4]}
    assert len(calls) == 4 and not set(calls) & done_before
    assert again.resumed == 4 and again.evaluated == 4
    assert _keys(again.front) == _keys(first.front)
    calls.clear()
    third = explore(problem, space, budget=100, objectives=OBJ, results=half, workers=0,
                    progress=False)
    assert calls == [] and third.evaluated == 0 and _keys(third.front) == _keys(first.front)


def test_process_pool_one_and_two_workers_same_front(problem, space):
    fronts = []
    for w in (1, 2):
        res = explore(problem, space, budget=100, objectives=OBJ, workers=w, progress=False)
        assert res.executor == "process pool" and res.evaluated == 8
        fronts.append([(r["key"], r["cycles"]) for r in res.front])
    assert fronts[0] == fronts[1] and fronts[0]


def test_a_dead_worker_loses_only_its_point(problem, space, tmp_path, monkeypatch):
    marker = tmp_path / "died"
    real = ev.evaluate

    def dying(problem, config):      # the first evaluation of one point kills its worker
        if config["log_batch"] == 1 and config["log_acc_buff_size"] == 17 \
                and config["log_inp_buff_size"] == 15 and not marker.exists():
            marker.write_text("x")
            os._exit(1)
        return real(problem, config)
    monkeypatch.setattr(ev, "evaluate", dying)   # forked workers inherit the patch
    pool = LocalPool(problem, 2)
    try:
        res = explore(problem, space, budget=100, objectives=OBJ, pool=pool, progress=False)
    finally:
        pool.close()
    assert marker.exists() and pool.restarts >= 1
    assert len(res.ok) == 4 and len(res.errors) == 4
    assert all("no tiling" in r["error"] for r in res.errors)


def test_ray_one_and_two_workers_same_front(problem, space):
    pytest.importorskip("ray")
    fronts = []
    for w in (1, 2):
        res = explore(problem, space, budget=100, objectives=OBJ, workers=w, use_ray=True,
                      progress=False)
        assert res.executor == "ray" and len(res.ok) == 4
        fronts.append([(r["key"], r["cycles"]) for r in res.front])
    assert fronts[0] == fronts[1] and fronts[0]


def test_nsga2_over_budget_and_resume(problem, tmp_path, monkeypatch):
    pytest.importorskip("optuna")
    from retarget.targets.vta.target import VTATarget
    space = VTATarget.design_space().restricted(
        {"only": True, "params": {"log_block_in": [4, 5], "log_block_out": [4, 5],
                                  "log_inp_buff_size": [15, 16], "log_uop_buff_size": [14, 15]}})
    assert space.size == 16
    path = tmp_path / "n.jsonl"
    res = explore(problem, space, budget=6, objectives=("cycles", "dsp"), results=path,
                  workers=0, progress=False, seed=1)
    assert res.mode == "nsga2"
    done = [r for r in res.records if r["status"] != "infeasible"]
    assert len(done) == 6 == res.evaluated
    calls = []
    real = ev.evaluate
    monkeypatch.setattr(ev, "evaluate", lambda p, c: calls.append(c) or real(p, c))
    again = explore(problem, space, budget=6, objectives=("cycles", "dsp"), results=path,
                    workers=0, progress=False, seed=1)
    assert calls == [] and again.resumed >= 6
    assert _keys(again.front) == _keys(res.front)


def test_part_restricts_the_front(problem, space):
    res = explore(problem, space, budget=100, objectives=OBJ, workers=0, progress=False,
                  part="xc7z020")
    assert res.front and all(r["fits"]["xc7z020"] for r in res.front)
    # batch 2 (512 MACs -> 256 DSP) does not fit the 7020's 220 DSPs: never compiled
    big = [r for r in res.records if r["config"]["log_batch"] == 1]
    assert big and all(r["status"] == "infeasible" and "xc7z020" in r["error"] for r in big)
    assert PARTS["xc7z020"].dsp == 220
