"""Thread safety (docs/guarantees.md): one module called from many threads, and two modules
sharing one device, give exactly the single-threaded outputs."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

import retarget
from retarget import zoo
from retarget.frontend.onnx import import_model

THREADS, CALLS = 8, 50


def small_vta_module(seed: int = 0):
    g = import_model(zoo.build("resnet18", size=16, width=0.125, num_classes=10, seed=seed))
    rng = np.random.default_rng(1)
    calib = [{v.name: rng.standard_normal(v.type.shape).astype(np.float32) for v in g.inputs}]
    return g, retarget.compile(g, "vta", calibration=calib)


def inputs(g, n):
    rng = np.random.default_rng(7)
    return [{v.name: rng.standard_normal(v.type.shape).astype(np.float32) for v in g.inputs}
            for _ in range(n)]


def run_all(module, xs, threads):
    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(module.run, xs))


def test_one_module_from_eight_threads_equals_single_threaded():
    g, m = small_vta_module()
    xs = inputs(g, 6)
    expected = [m.run(x) for x in xs]
    calls = [xs[i % len(xs)] for i in range(THREADS * CALLS)]
    got = run_all(m, calls, THREADS)
    wrong = sum(not all(np.array_equal(out[k], expected[i % len(xs)][k]) for k in out)
                for i, out in enumerate(got))
    assert wrong == 0, f"{wrong} of {len(calls)} outputs differ from the single-threaded run"
    m.close()


def test_two_modules_sharing_one_device():
    g1, m1 = small_vta_module(seed=0)
    g2, m2 = small_vta_module(seed=3)
    xs = inputs(g1, 4)
    expected = {1: [m1.run(x) for x in xs], 2: [m2.run(x) for x in xs]}
    device = m1.target.make_device()
    m1.bind(device)
    m2.bind(device)
    jobs = [(which, i) for i in range(len(xs)) for which in (1, 2)] * 10

    def call(job):
        which, i = job
        return (m1 if which == 1 else m2).run(xs[i])

    with ThreadPoolExecutor(THREADS) as pool:
        got = list(pool.map(call, jobs))
    for (which, i), out in zip(jobs, got):
        for k in out:
            assert np.array_equal(out[k], expected[which][i][k]), (which, i, k)
    m1.close()
    m2.close()
    assert device.stats().memory.live_allocations == 0
