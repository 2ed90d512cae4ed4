"""The sweep: which points to evaluate (every point of a small space, else optuna's NSGA-II
for `budget` points), where (a local process pool, or Ray), the results file that makes a
sweep resumable, and the Pareto front over the chosen objectives.

    problem = Problem.prepare("model.onnx", "vta", size=224)
    result = explore(problem, space, budget=200, objectives=("latency", "dsp", "bram"),
                     results="sweep.jsonl", workers=2)
    result.front          # the non-dominated records, best first objective first

Every evaluated point is appended to the results file as one JSON line as soon as it is known;
a rerun with the same file evaluates none of the points already in it (the key is the point's
config as canonical JSON). Points that violate a constraint (or do not fit --part) are recorded
as "infeasible" without compiling; points that fail to compile as "error" with the reason.
"""
from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from ..errors import InputError
from . import evaluation as ev
from .pools import make_pool
from ..ops.reference import run_graph
from ..runtime.check import check_outputs, random_inputs
from ..targets.space import DesignSpace, PARTS, Part, canonical_key, pareto_front



# ---- objectives ----------------------------------------------------------------------------------
def _engines(rec) -> int:
    return int(rec.get("config", {}).get("engines", rec.get("engines", 1)) or 1)


# name -> (value of an "ok" record, unit, description); every objective is minimised
OBJECTIVES: dict[str, tuple[Callable[[dict], float], str, str]] = {
    "latency": (lambda r: r["latency_s"], "s", "modelled accelerator time of one frame"),
    "cycles": (lambda r: r["cycles"], "cycles", "modelled cycles of one frame"),
    "dsp": (lambda r: r["resources"]["dsp"], "DSP", "DSP slices (resource model)"),
    "bram": (lambda r: r["resources"]["bram18"], "BRAM18", "18 Kb block RAMs (resource model)"),
    "onchip": (lambda r: r["resources"]["onchip_bytes"], "B", "on-chip buffer bytes"),
    "frame_time": (lambda r: r["latency_s"] / _engines(r), "s",
                   "seconds per frame with every engine busy (latency / engines)"),
}


def parse_objectives(text: str | Sequence[str]) -> tuple[str, ...]:
    names = [s.strip() for s in (text.split(",") if isinstance(text, str) else text)]
    names = [n for n in names if n]
    bad = [n for n in names if n not in OBJECTIVES]
    if bad or not names:
        raise InputError(f"--objective: unknown objective(s) {bad}; known: "
                         f"{', '.join(OBJECTIVES)}" if bad else "--objective: none given")
    if len(set(names)) != len(names):
        raise InputError(f"--objective: {','.join(names)} names one twice")
    return tuple(names)


def objective_values(rec: Mapping, objectives: Sequence[str]) -> tuple[float, ...]:
    return tuple(float(OBJECTIVES[o][0](rec)) for o in objectives)


# ---- the results file ----------------------------------------------------------------------------
class ResultsFile:
    """The JSONL results of a sweep: one record per point, appended (and flushed) as each point
    finishes. Records of another model or target in the same file are kept but ignored."""

    def __init__(self, path: str | Path | None, model: str, target: str):
        self.path = Path(path) if path else None
        self.model, self.target = model, target
        self.records: dict[str, dict] = {}
        self.skipped = 0
        if self.path and self.path.exists():
            with open(self.path, encoding="utf-8") as fh:
                for line in fh:
                    line = line.strip()
                    if not line:
                        continue
                    try:
                        rec = json.loads(line)
                    except json.JSONDecodeError:
                        self.skipped += 1     # a line cut short by a kill: recomputed
                        continue
                    if not isinstance(rec, dict) or "config" not in rec:
                        self.skipped += 1
                        continue
                    if rec.get("model") != model or rec.get("target") != target:
                        continue
                    self.records[canonical_key(rec["config"])] = rec
        self.resumed = len(self.records)
        # a file cut short mid-line (a killed sweep): the next record starts on a new line
        self._newline = bool(self.path and self.path.exists() and self.path.stat().st_size
                             and not self.path.read_bytes().endswith(b"\n"))

    def __contains__(self, key: str) -> bool:
        return key in self.records

    def get(self, key: str) -> dict | None:
        return self.records.get(key)

    def append(self, rec: dict) -> None:
        self.records[rec["key"]] = rec
        if self.path:
            if self.path.parent and not self.path.parent.exists():
                self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as fh:
                if self._newline:
                    fh.write("\n")
                    self._newline = False
                fh.write(json.dumps(rec, sort_keys=True) + "\n")
                fh.flush()


class Progress:
    """A progress bar: rich's when rich is installed, else one rewritten plain line."""

    def __init__(self, total: int, enabled: bool = True, stream=None):
        self.total, self.enabled = total, enabled
        self.stream = stream or sys.stderr
        self.done = self.ok = self.errors = 0
        self.t0 = time.perf_counter()
        self._rich = None
        if enabled:
            try:
                from rich.progress import Progress as RichProgress
                self._rich = RichProgress(transient=True)
                self._task = self._rich.add_task("explore", total=total)
                self._rich.start()
            except ImportError:
                self._rich = None

    def update(self, status: str) -> None:
        self.done += 1
        self.ok += status == "ok"
        self.errors += status == "error"
        if not self.enabled:
            return
        if self._rich is not None:
            self._rich.update(self._task, advance=1,
                              description=f"explore ({self.ok} ok, {self.errors} failed)")
            return
        el = time.perf_counter() - self.t0
        width = 30
        fill = int(width * min(1.0, self.done / max(1, self.total)))
        self.stream.write(f"\r[{'#' * fill}{'.' * (width - fill)}] {self.done}/{self.total} "
                          f"points, {self.ok} ok, {self.errors} failed, {el:.0f} s")
        self.stream.flush()

    def close(self) -> None:
        if self._rich is not None:
            self._rich.stop()
        elif self.enabled and self.done:
            self.stream.write("\n")
            self.stream.flush()


# ---- the sweep -------------------------------------------------------------------------------------
@dataclass
class ExploreResult:
    space: DesignSpace
    objectives: tuple[str, ...]
    records: list[dict]                 # every record of this space in the results file
    front: list[dict]                   # the non-dominated "ok" records (that fit `part`)
    evaluated: int                      # points compiled in this run
    resumed: int                        # points found in the results file
    mode: str                           # "exhaustive" or "nsga2"
    executor: str
    wall_s: float
    part: Part | None = None
    restarts: int = 0
    spot_checks: list = field(default_factory=list)

    @property
    def ok(self) -> list[dict]:
        return [r for r in self.records if r["status"] == "ok"]

    @property
    def errors(self) -> list[dict]:
        return [r for r in self.records if r["status"] == "error"]

    @property
    def infeasible(self) -> list[dict]:
        return [r for r in self.records if r["status"] == "infeasible"]


def explore(problem: ev.Problem, space: DesignSpace, *, budget: int = 200,
            objectives: Sequence[str] = ("latency", "dsp", "bram"),
            results: str | Path | None = None, workers: int = 1, use_ray: bool = False,
            ray_address: str | None = None, part: str | None = None, seed: int = 0,
            progress: bool = True, pool=None) -> ExploreResult:
    """Sweep `space` for `problem` (see the module docstring). `pool`: an executor to use
    instead of making one (it is then not closed here)."""
    objectives = parse_objectives(objectives)
    if budget < 1:
        raise InputError(f"--budget {budget}: must be at least 1")
    the_part = PARTS.get(part.lower()) if part else None
    if part and the_part is None:
        raise InputError(f"--part {part!r}: known parts: {', '.join(PARTS)}")
    store = ResultsFile(results, problem.model, space.spec)
    t0 = time.perf_counter()
    exhaustive = space.size <= budget
    own_pool = pool is None
    pool = pool if pool is not None else make_pool(problem, workers, use_ray, ray_address)
    state = _Sweep(problem, space, store, objectives, the_part, pool)
    total = space.size if exhaustive else budget
    bar = Progress(total, progress)
    state.bar = bar
    try:
        if exhaustive:
            state.run_grid()
        else:
            state.run_nsga2(budget, seed)
    finally:
        bar.close()
        if own_pool:
            pool.close()
    keys = {canonical_key(p) for p in space.points()} if exhaustive else None
    records = [r for k, r in store.records.items()
               if (keys is None and set(r["config"]) == set(space.params)) or
               (keys is not None and k in keys)]
    front = compute_front(records, objectives, the_part)
    return ExploreResult(space, objectives, records, front, state.evaluated, store.resumed,
                         "exhaustive" if exhaustive else "nsga2", pool.name,
                         time.perf_counter() - t0, the_part,
                         getattr(pool, "restarts", 0))


def compute_front(records: Iterable[dict], objectives: Sequence[str],
                  part: Part | None = None) -> list[dict]:
    ok = [r for r in records if r["status"] == "ok" and (part is None or r["fits"].get(part.name))]
    front = pareto_front(ok, key=lambda r: objective_values(r, objectives))
    return sorted(front, key=lambda r: (objective_values(r, objectives), r["key"]))


class _Sweep:
    def __init__(self, problem, space, store, objectives, part, pool):
        self.problem, self.space, self.store = problem, space, store
        self.objectives, self.part, self.pool = objectives, part, pool
        self.evaluated = 0
        self.inflight: dict[str, list] = {}     # key -> optuna trials waiting for it
        self.bar: Progress | None = None

    def record(self, point: dict, status: str, measured: Mapping | None = None,
               reason: str | None = None) -> dict:
        try:
            res = self.space.resources(point)
        except Exception:           # a point whose config cannot even be built
            res = None
        rec: dict[str, Any] = {"key": canonical_key(point), "model": self.problem.model,
                               "target": self.space.spec, "config": dict(point),
                               "status": status}
        if res is not None:
            rec["resources"] = res.to_dict()
            rec["fits"] = {name: res.fits(p) for name, p in PARTS.items()}
        rec.update(measured or {})
        if reason:
            rec["error"] = reason
        if status == "ok":
            rec["latency_ms"] = rec["latency_s"] * 1e3
            rec["objectives"] = dict(zip(self.objectives,
                                         objective_values(rec, self.objectives)))
        self.store.append(rec)
        return rec

    def check(self, point: dict) -> str | None:
        """Why `point` is not compiled (a constraint, or it does not fit --part), or None."""
        why = self.space.violation(point)
        if why is None and self.part is not None:
            why = self.space.resources(point).why_not(self.part)
        return why

    def _drain(self, block: bool = True) -> list[dict]:
        out = []
        if not len(self.pool):
            return out
        for key, config, res in self.pool.wait():
            status = res.pop("status")
            reason = res.pop("error", None)
            rec = self.record(config, status, res, reason)
            self.evaluated += 1
            if self.bar:
                self.bar.update(status)
            out.append(rec)
        return out

    # exhaustive: every point of the grid
    def run_grid(self) -> None:
        cap = 2 * self.pool.capacity
        for point in self.space.points():
            key = canonical_key(point)
            if key in self.store:
                if self.bar:
                    self.bar.update(self.store.get(key)["status"])
                continue
            why = self.check(point)
            if why:
                self.record(point, "infeasible", reason=why)
                if self.bar:
                    self.bar.update("infeasible")
                continue
            self.pool.submit(key, point)
            while len(self.pool) >= cap:
                self._drain()
        while len(self.pool):
            self._drain()

    # NSGA-II: `budget` points in all (resumed ones count)
    def run_nsga2(self, budget: int, seed: int) -> None:
        try:   # optional heavy dependency (the explore extra): imported only when used
            import optuna
            from optuna.distributions import CategoricalDistribution
            from optuna.samplers import NSGAIISampler
            from optuna.trial import TrialState, create_trial
        except ImportError:
            raise InputError(f"the space has {self.space.size:,} points, more than --budget "
                             f"{budget}: sampling it needs optuna (pip install "
                             f"'retarget[explore]'), or raise --budget to sweep it all") from None
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        dists = {n: CategoricalDistribution(list(p.values)) for n, p in self.space.params.items()}
        pop = max(8, min(50, budget // 5))
        study = optuna.create_study(directions=["minimize"] * len(self.objectives),
                                    sampler=NSGAIISampler(population_size=pop, seed=seed))
        done = 0
        for rec in list(self.store.records.values()):
            cfg = rec["config"]
            if set(cfg) != set(dists) or any(cfg[n] not in dists[n].choices for n in dists):
                continue
            if rec["status"] == "ok":
                study.add_trial(create_trial(params=cfg, distributions=dists,
                                             values=list(objective_values(rec, self.objectives))))
            else:
                study.add_trial(create_trial(params=cfg, distributions=dists,
                                             state=TrialState.FAIL))
            done += rec["status"] != "infeasible"
            if self.bar and rec["status"] != "infeasible":
                self.bar.update(rec["status"])
        asks, max_asks = 0, 50 * budget + 1000
        cap = 2 * self.pool.capacity

        def tell(trial, rec):
            if rec["status"] == "ok":
                study.tell(trial, list(objective_values(rec, self.objectives)))
            else:
                study.tell(trial, state=TrialState.FAIL)

        while True:
            while (len(self.pool) < cap and done + len(self.pool) < budget
                   and asks < max_asks):
                trial = study.ask(dists)
                asks += 1
                point = {n: trial.params[n] for n in dists}
                key = canonical_key(point)
                if key in self.inflight:
                    self.inflight[key].append(trial)
                    continue
                rec = self.store.get(key)
                if rec is not None:               # known already: not recomputed
                    tell(trial, rec)
                    continue
                why = self.check(point)
                if why:
                    tell(trial, self.record(point, "infeasible", reason=why))
                    continue
                self.inflight[key] = [trial]
                self.pool.submit(key, point)
            if not len(self.pool):
                break
            for rec in self._drain():
                done += 1
                for trial in self.inflight.pop(rec["key"], []):
                    tell(trial, rec)


# ---- spot checks -----------------------------------------------------------------------------------
def spot_check(problem: ev.Problem, records: Sequence[dict], k: int, seed: int = 0) -> list[dict]:
    """Run the best `k` points bit-exact on the simulator: module.run against the reference
    run_graph of the module's own (integer) graph, as `retarget run --check` does."""
    out = []
    for rec in list(records)[:max(0, k)]:
        t0 = time.perf_counter()
        entry = {"key": rec["key"], "config": rec["config"]}
        try:
            module = problem.compile(rec["config"])
            inputs = random_inputs(module.graph, seed)
            checks = check_outputs(module.target, module.run(inputs),
                                   run_graph(module.graph, inputs))
            same = all(c.ok for c in checks)
            module.close()
            entry.update(ok=bool(same), verdict=("; ".join(sorted({c.verdict() for c in checks}))))
        except Exception as e:
            entry.update(ok=False, verdict=f"failed: {type(e).__name__}: {e}")
        entry["seconds"] = time.perf_counter() - t0
        out.append(entry)
    return out


__all__ = ["ExploreResult", "OBJECTIVES", "Progress", "ResultsFile", "compute_front", "explore",
           "objective_values", "parse_objectives", "spot_check"]
