"""One design point, evaluated: compile the model for the point's config and time it with the
cycle model (module_report: every offloaded region's stream, no simulation).

The float model is imported and quantised once, in the parent (`Problem.prepare`); workers
receive the integer graph (pickled once per worker, or one Ray object) and compile it per
point: compile() does not quantise an integer graph again, so every point starts from the
same integers and only the target-specific steps (window packing, partition, lowering) run.
"""
from __future__ import annotations

import re
import time
import traceback
import warnings
from dataclasses import dataclass
from typing import Any, Mapping

from ..errors import InputError, RetargetError
from ..compiler import compile, to_number_format
from ..passes.calibrate import random_samples
from ..passes.infer_shapes import infer_shapes
from ..targets.registry import get_target
from ..frontend.onnx import import_model, read_onnx
from .. import zoo
from ..report.module import module_report


@dataclass
class Problem:
    """What every point compiles: the integer graph and the target spec it is swept around."""
    model: str            # what the user named (for the results file)
    target: str           # "vta", "vta:pynq", ...
    graph: Any            # the prepared (quantised, typed) Graph
    fixed: dict           # config fields set for every point (space file "fixed")

    @classmethod
    def prepare(cls, model: str, target: str, *, size: int | None = None,
                calibration: Any = None, fixed: Mapping[str, Any] | None = None,
                seed: int = 0) -> "Problem":
        """Import `model` (an ONNX file, or zoo:NAME[:WIDTH] for a zoo network), bind its
        input to `size` x `size` when given, and quantise it into the target's number format
        (calibrated on `calibration`, or one seeded random batch)."""
        graph = load_model(model, size)
        tgt = get_target(target)
        g = infer_shapes(graph)
        g.toposort()
        if calibration is None:
            calibration = random_samples(g, 1, seed)
        # once, here; each point's compile adds only the target's config-dependent rewrite
        g = to_number_format(g, tgt, calibration)
        return cls(model, target, g, dict(fixed or {}))

    def compile(self, config: Mapping[str, Any]):
        """The Module of one point (RetargetError when the point cannot be compiled)."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return compile(self.graph, self.target, config={**self.fixed, **config})


def load_model(model: str, size: int | None):
    """An ONNX path or zoo:NAME[:WIDTH] (a zoo network with seeded random weights) as a Graph."""
    if model.startswith("zoo:"):
        _, name, *rest = model.split(":")
        kwargs = {"size": size or 224}
        if rest:
            kwargs["width"] = float(rest[0])
        try:
            return import_model(zoo.build(name, **kwargs))
        except KeyError as e:
            raise InputError(str(e).strip("'\"")) from None
    proto = read_onnx(model)
    shapes = None
    if size:
        shapes = {}
        init = {i.name for i in proto.graph.initializer}
        for inp in proto.graph.input:
            if inp.name in init:
                continue
            dims = [d.dim_value or 1 for d in inp.type.tensor_type.shape.dim]
            if len(dims) == 4:
                dims = [dims[0], dims[1], size, size]
            shapes[inp.name] = tuple(dims)
    return import_model(proto, shapes or None)


def evaluate(problem: Problem, config: Mapping[str, Any]) -> dict:
    """Compile `config` and time it with the cycle model. Returns the measured part of a
    results record: status "ok" with cycles, latency and placement, or "error" with the
    reason (a point that cannot be compiled never raises)."""
    t0 = time.perf_counter()
    out: dict[str, Any] = {}
    try:
        module = problem.compile(config)
        rep = module_report(module)
        if not rep.cycles:
            raise RetargetError("no region was offloaded: nothing for the cycle model to time")
        cpu = sum(1 for r in rep.regions if r.target == "cpu")
        out = {"status": "ok", "cycles": int(rep.cycles),
               "latency_s": float(rep.seconds),
               "regions": len(rep.modelled), "cpu_regions": cpu,
               "gops": float(rep.network.gops),
               "roof_fraction": float(rep.network.roof_fraction)}
        module.close()
    except RetargetError as e:
        # compile() names every node of a region it could not lower; the reason is the tail
        msg = re.sub(r"^(lowering region '[^']+') \(.*?\) (for \w+): ", r"\1 \2: ", str(e),
                     count=1, flags=re.S)
        out = {"status": "error", "error": f"{type(e).__name__}: {msg}"}
    except Exception as e:          # a compiler bug must not stop the sweep either
        tb = traceback.format_exception_only(type(e), e)[-1].strip()
        out = {"status": "error", "error": f"internal error: {tb}"}
    out["seconds"] = round(time.perf_counter() - t0, 4)
    return out


# ---- worker side (process pool): the problem is installed once per worker -----------------------
_WORKER_PROBLEM: Problem | None = None


def init_worker(problem: Problem) -> None:
    global _WORKER_PROBLEM
    _WORKER_PROBLEM = problem


def worker_evaluate(config: dict) -> dict:
    if _WORKER_PROBLEM is None:
        raise RuntimeError("explore worker has no problem installed")
    return evaluate(_WORKER_PROBLEM, config)


__all__ = ["Problem", "evaluate", "init_worker", "load_model", "worker_evaluate"]
