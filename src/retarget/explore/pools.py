"""Where the points of a sweep are evaluated: in this process (SerialPool), a local process
pool (LocalPool: a worker that dies costs only its point, resubmitted at most MAX_RETRIES
times on a fresh pool), or Ray (RayPool: local, or a cluster at an address; Ray retries a
task whose worker dies). All three take (key, config) submissions and hand back finished
(key, config, record) triples from `wait()`; the sweep (runner.py) decides what to submit.
"""
from __future__ import annotations

import multiprocessing
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool

from ..errors import InputError
from . import evaluation as ev

MAX_RETRIES = 2          # a point whose worker dies is resubmitted at most this many times


# ---- executors -----------------------------------------------------------------------------------
class SerialPool:
    """Points evaluated one at a time in this process (workers=0): for debugging and tests."""

    name = "in-process"
    capacity = 1

    def __init__(self, problem: ev.Problem):
        self.problem = problem
        self.pending: list = []

    def submit(self, key: str, config: dict, attempt: int = 0) -> None:
        self.pending.append((key, config))

    def __len__(self) -> int:
        return len(self.pending)

    def wait(self) -> list[tuple[str, dict, dict]]:
        key, config = self.pending.pop(0)
        res = ev.evaluate(self.problem, config)
        res["attempts"] = 1
        return [(key, config, res)]

    def close(self) -> None:
        self.pending.clear()


class LocalPool:
    """Points on a ProcessPoolExecutor. A worker that dies breaks the pool: the pool is
    recreated and the points it lost are resubmitted (at most MAX_RETRIES times each)."""

    name = "process pool"

    def __init__(self, problem: ev.Problem, workers: int):
        self.problem, self.workers = problem, max(1, int(workers))
        methods = multiprocessing.get_all_start_methods()
        self._ctx = multiprocessing.get_context("fork" if "fork" in methods else None)
        self.pending: dict = {}
        self.restarts = 0
        self._new_pool()

    @property
    def capacity(self) -> int:
        return self.workers

    def _new_pool(self) -> None:
        self.pool = ProcessPoolExecutor(self.workers, mp_context=self._ctx,
                                        initializer=ev.init_worker, initargs=(self.problem,))

    def submit(self, key: str, config: dict, attempt: int = 0) -> None:
        fut = self.pool.submit(ev.worker_evaluate, config)
        self.pending[fut] = (key, config, attempt)

    def __len__(self) -> int:
        return len(self.pending)

    def wait(self) -> list[tuple[str, dict, dict]]:
        done, _ = wait(list(self.pending), return_when=FIRST_COMPLETED)
        out, lost = [], []
        for fut in done:
            key, config, attempt = self.pending.pop(fut)
            try:
                res = fut.result()
            except BrokenProcessPool:
                lost.append((key, config, attempt))
                continue
            except Exception as e:            # the worker raised outside evaluate()
                res = {"status": "error", "error": f"worker error: {type(e).__name__}: {e}"}
            res["attempts"] = attempt + 1
            out.append((key, config, res))
        if lost:
            # The pool is broken: every point still in it is lost too, except those whose
            # results had already arrived.
            for fut in list(self.pending):
                key, config, attempt = self.pending.pop(fut)
                if fut.done() and fut.exception() is None:
                    res = fut.result()
                    res["attempts"] = attempt + 1
                    out.append((key, config, res))
                else:
                    lost.append((key, config, attempt))
            self.pool.shutdown(wait=False, cancel_futures=True)
            self.restarts += 1
            self._new_pool()
            for key, config, attempt in lost:
                if attempt >= MAX_RETRIES:
                    out.append((key, config, {
                        "status": "error", "attempts": attempt + 1, "seconds": 0.0,
                        "error": f"worker died {attempt + 1} times while evaluating this point "
                                 f"(or one running beside it); given up"}))
                else:
                    self.submit(key, config, attempt + 1)
        return out

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


_RAY_PROBLEMS: dict[str, ev.Problem] = {}


def _ray_evaluate(problem_ref: list, config: dict) -> dict:
    """A Ray task: the problem travels as one object (wrapped in a list so that Ray does not
    resolve it for every task) and is kept per worker process after the first point."""
    import ray   # optional heavy dependency (the explore extra): imported only when used
    ref = problem_ref[0]
    key = ref.hex()
    problem = _RAY_PROBLEMS.get(key)
    if problem is None:
        problem = _RAY_PROBLEMS[key] = ray.get(ref)
    return ev.evaluate(problem, config)


class RayPool:
    """Points as Ray tasks (`max_retries`: a task whose worker dies is retried by Ray)."""

    name = "ray"

    def __init__(self, problem: ev.Problem, workers: int, address: str | None = None):
        try:   # optional heavy dependency (the explore extra): imported only when used
            import ray
        except ImportError:
            raise InputError("--ray needs the ray package (pip install 'retarget[explore]' "
                             "or pip install ray)") from None
        self.ray = ray
        self._owns = not ray.is_initialized()
        if self._owns:
            try:
                if address:
                    ray.init(address=address, log_to_driver=False)
                else:
                    ray.init(num_cpus=max(1, int(workers)), include_dashboard=False,
                             log_to_driver=False, configure_logging=False)
            except Exception as e:
                raise InputError(f"ray could not start ({type(e).__name__}: {e})") from None
        cpus = int(ray.cluster_resources().get("CPU", workers) or workers)
        self.workers = max(1, int(workers)) if not address else max(1, cpus)
        self._problem = [ray.put(problem)]
        self._task = ray.remote(max_retries=MAX_RETRIES, num_cpus=1)(_ray_evaluate)
        self.pending: dict = {}

    @property
    def capacity(self) -> int:
        return self.workers

    def submit(self, key: str, config: dict, attempt: int = 0) -> None:
        self.pending[self._task.remote(self._problem, config)] = (key, config)

    def __len__(self) -> int:
        return len(self.pending)

    def wait(self) -> list[tuple[str, dict, dict]]:
        ready, _ = self.ray.wait(list(self.pending), num_returns=1)
        out = []
        for ref in ready:
            key, config = self.pending.pop(ref)
            try:
                res = self.ray.get(ref)
            except Exception as e:        # RayError: the task failed after its retries
                res = {"status": "error", "seconds": 0.0,
                       "error": f"ray task failed after {MAX_RETRIES} retries: "
                                f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}
            out.append((key, config, res))
        return out

    def close(self) -> None:
        self.pending.clear()
        if self._owns:
            self.ray.shutdown()


# ---- progress --------------------------------------------------------------------------------------
def make_pool(problem: ev.Problem, workers: int, use_ray: bool = False,
              ray_address: str | None = None):
    if use_ray or ray_address:
        return RayPool(problem, workers, ray_address)
    if workers == 0:
        return SerialPool(problem)
    return LocalPool(problem, workers)


__all__ = ["LocalPool", "MAX_RETRIES", "RayPool", "SerialPool", "make_pool"]
