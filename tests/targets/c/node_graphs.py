"""What the `c` target's routine tests (test_tflite.py, test_ort.py) share: the two builds,
graphs of single nodes on named random inputs (every node's output a graph output), and the
check that each routine's result equals its NumPy op."""
from __future__ import annotations

import numpy as np

import retarget
from retarget.ir.graph import Graph, Node, Value
from retarget.ir.types import TensorType
from retarget.ops.reference import run_graph
from retarget.passes.infer_shapes import infer_shapes


# the two builds every routine is held to: vector extensions for this CPU, and plain C99
BUILDS = {"native": "-O1 -march=native -std=c99", "portable": "-O1 -std=c99 -DRT_PORTABLE"}


def compile_c(graph: Graph, build: str):
    return retarget.compile(graph, "c", config={"cflags": BUILDS[build], "openmp": False})


def off_c(module) -> list[tuple[str, str, str]]:
    """(node, op, reason) of every node the module does not run on `c`."""
    return [(p.name, p.op, p.reason) for p in module.report.nodes if p.placement != "c"]


def routines_of(module) -> set[str]:
    """The hand-written routines the module's C calls."""
    return {c.routine.name for k in module.kernels.values() for c in k.program.calls
            if c.routine is not None}


def assert_routines_equal_numpy(graph: Graph, feeds: dict, build: str, routines) -> None:
    """Every node of `graph` on `c`, calling at least `routines`, each output equal to the
    reference's (dtype and values), and no output of more than 16 values all but clamped
    (so that the comparison can tell a wrong rounding from a right one)."""
    module = compile_c(graph, build)
    try:
        assert off_c(module) == []
        assert routines_of(module) >= set(routines)
        with np.errstate(over="ignore"):      # float32 products beyond int range saturate
            ref = run_graph(graph, feeds)
        out = module.run(feeds)
        for k in ref:
            assert out[k].dtype == ref[k].dtype, k
            np.testing.assert_array_equal(out[k], ref[k], err_msg=k)
        assert all(len(np.unique(ref[k])) > 3 for k in ref if ref[k].size > 16)
    finally:
        module.close()


class NodeGraph:
    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.feeds: dict[str, np.ndarray] = {}
        self.inputs: list[Value] = []
        self.nodes: list[Node] = []
        self.outputs: list[Value] = []

    def odd(self) -> int:
        """A small odd extent (shapes that no vector width divides)."""
        return int(self.rng.choice([1, 3, 5, 7]))

    def input(self, name: str, shape, dtype: str, values: np.ndarray) -> Value:
        self.feeds[name] = values
        self.inputs.append(Value(name, TensorType(tuple(shape), dtype)))
        return self.inputs[-1]

    def node(self, op: str, inputs, **attrs) -> Value:
        y = Value(f"{op.lower()}_{len(self.nodes)}")
        self.nodes.append(Node(op, f"n{len(self.nodes)}_{op}", list(inputs), [y], attrs))
        self.outputs.append(y)
        return y

    def graph(self, name: str) -> tuple[Graph, dict[str, np.ndarray]]:
        """The typed graph and its inputs."""
        return infer_shapes(Graph(self.nodes, self.inputs, self.outputs, name=name)), \
            self.feeds
