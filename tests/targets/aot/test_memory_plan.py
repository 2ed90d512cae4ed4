"""The static memory plan (targets/aot/memory_plan.py): on random programs no two values live at
the same time share a byte, views sit at their source, and the arena is never larger than
giving every value its own bytes; plus the lifetime rules on small hand-made programs."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from retarget.errors import GraphError
from retarget.targets.aot.memory_plan import Lifetime, MemoryPlan, Step, plan_memory


@st.composite
def programs(draw):
    """A random straight-line program: step i writes value v<i> (or is a view of an earlier
    value), reading up to three earlier values; some values are external (no size)."""
    n = draw(st.integers(1, 14))
    steps, sizes, names = [], {}, []
    for i in range(n):
        name = f"v{i}"
        if names and draw(st.booleans()) and draw(st.booleans()):
            src = draw(st.sampled_from(names))
            steps.append(Step(f"s{i}", (src,), (name,), alias=src))
        else:
            reads = tuple(sorted(set(draw(st.lists(st.sampled_from(names), max_size=3))))) if names else ()
            steps.append(Step(f"s{i}", reads, (name,)))
            if draw(st.integers(0, 4)):          # most values live in the arena
                sizes[name] = draw(st.integers(0, 5000))
        names.append(name)
    keep = draw(st.lists(st.sampled_from(names), max_size=2))
    return steps, sizes, keep


def independent_lifetimes(steps, sizes, keep):
    """Lifetimes recomputed naively: for each placed value, the steps from its writer to its
    last use through any chain of views."""
    source = {s.writes[0]: s.alias for s in steps if s.alias}

    def root(v):
        while v in source:
            v = source[v]
        return v

    out = {}
    for v in sizes:
        uses = [i for i, s in enumerate(steps) for n in s.reads + s.writes if root(n) == v]
        first = next(i for i, s in enumerate(steps) if v in s.writes)
        last = max(uses)
        if any(root(k) == v for k in keep):
            last = len(steps) - 1
        out[v] = (first, last)
    return out, root


@settings(max_examples=300)
@given(programs())
def test_random_programs_never_overlap_and_fit_in_the_sum(case):
    steps, sizes, keep = case
    plan = plan_memory(steps, sizes, keep=keep)
    plan.check()
    life, root = independent_lifetimes(steps, sizes, keep)
    assert {v: (lt.first, lt.last) for v, lt in plan.lifetimes.items()} == life
    placed = sorted(sizes)
    for i, a in enumerate(placed):
        assert plan.offsets[a] % 64 == 0
        assert plan.offsets[a] + sizes[a] <= plan.arena_bytes
        for b in placed[i + 1:]:
            (fa, la), (fb, lb) = life[a], life[b]
            if fa <= lb and fb <= la and sizes[a] and sizes[b]:
                assert (plan.offsets[a] + sizes[a] <= plan.offsets[b]
                        or plan.offsets[b] + sizes[b] <= plan.offsets[a]), (a, b)
    for s in steps:
        if s.alias and root(s.writes[0]) in sizes:
            assert plan.offsets[s.writes[0]] == plan.offsets[root(s.writes[0])]
        elif s.alias:
            assert s.writes[0] not in plan.offsets      # a view of an external value
    assert plan.arena_bytes <= plan.sum_of_tensor_bytes
    assert plan.sum_of_tensor_bytes == sum(-(-b // 64) * 64 for b in sizes.values())


def test_a_chain_reuses_memory_and_never_overwrites_what_a_step_reads():
    # a -> b -> c -> d: each step's input and output are live together, nothing else is
    steps = [Step("p", (), ("a",)), Step("q", ("a",), ("b",)), Step("r", ("b",), ("c",)),
             Step("s", ("c",), ("d",))]
    plan = plan_memory(steps, {n: 1000 for n in "abcd"})
    plan.check()
    assert plan.arena_bytes == 2 * 1024 and plan.sum_of_tensor_bytes == 4 * 1024
    assert plan.offsets["a"] == plan.offsets["c"] and plan.offsets["b"] == plan.offsets["d"]
    assert plan.offsets["a"] != plan.offsets["b"]


def test_a_view_extends_its_source_and_outputs_live_to_the_end():
    steps = [Step("p", (), ("a",)), Step("flat", ("a",), ("a_flat",), alias="a"),
             Step("q", (), ("b",)), Step("r", ("a_flat", "b"), ("c",)), Step("s", ("c",), ("d",))]
    plan = plan_memory(steps, {"a": 256, "b": 256, "c": 256, "d": 256}, keep=["b"])
    assert plan.lifetimes["a"] == Lifetime(0, 3)       # read through its view at step 3
    assert plan.lifetimes["b"] == Lifetime(2, 4)       # kept to the end
    assert plan.offsets["a_flat"] == plan.offsets["a"]
    plan.check()


def test_an_input_given_a_size_lives_from_the_start():
    steps = [Step("p", (), ("a",)), Step("q", ("x", "a"), ("b",))]
    plan = plan_memory(steps, {"x": 64, "a": 64, "b": 64})
    assert plan.lifetimes["x"] == Lifetime(0, 1)


def test_misuse_is_refused():
    with pytest.raises(GraphError, match="views .* were given sizes"):
        plan_memory([Step("p", (), ("a",)), Step("v", ("a",), ("w",), alias="a")], {"a": 4, "w": 4})
    with pytest.raises(GraphError, match="written by two steps"):
        plan_memory([Step("p", (), ("a",)), Step("q", (), ("a",))], {"a": 4})
    with pytest.raises(GraphError, match="a view writes one value"):
        Step("v", ("a",), ("w", "z"), alias="a")
    bad = MemoryPlan({"a": 0, "b": 64}, {"a": 100, "b": 8}, {"a": Lifetime(0, 1), "b": Lifetime(1, 2)},
                     128, 192)
    with pytest.raises(GraphError, match="overlap in the arena while both are live"):
        bad.check()
