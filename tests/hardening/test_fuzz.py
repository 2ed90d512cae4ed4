"""Fuzzing (docs/guarantees.md): random damage to real artifacts and ONNX files ends either in
the correct result or a RetargetError: never another exception type, a hang, or a wrong answer
without an error. Derandomized under CI (tests/conftest.py); the example counts keep the file
under a minute."""
from __future__ import annotations

import json
import os
import random
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from retarget import zoo
from retarget.errors import RetargetError
from retarget.frontend.onnx import import_model
from retarget.runtime.artifact import reseal
from retarget.runtime.module import Module
from retarget.targets.cpu.reference import run_graph

FUZZ = settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                        HealthCheck.too_slow])
FILE_DAMAGE = ["truncate", "flip", "swap", "delete", "symlink_zero", "symlink_outside", "fifo",
               "append"]


def _copy(d, tmp_path):
    """A private copy of artifact `d` (a fresh directory per example: hypothesis may repeat)."""
    work = Path(tempfile.mkdtemp(dir=tmp_path)) / "art"
    shutil.copytree(d, work)
    return work


def _files(d):
    return sorted(p for p in d.rglob("*") if p.is_file() and p.name != "manifest.json")


def _damage_file(d, outside, kind: str, rng: random.Random) -> None:
    files = _files(d)
    victim = rng.choice(files)
    data = victim.read_bytes()
    if kind == "truncate":
        victim.write_bytes(data[:rng.randrange(len(data))] if data else b"")
    elif kind == "flip":
        if data:
            b = bytearray(data)
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
            victim.write_bytes(bytes(b))
    elif kind == "append":
        victim.write_bytes(data + bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64))))
    elif kind == "swap":
        other = rng.choice(files)
        a, b = victim.read_bytes(), other.read_bytes()
        victim.write_bytes(b)
        other.write_bytes(a)
    elif kind == "delete":
        victim.unlink()
    elif kind == "fifo":
        victim.unlink()
        os.mkfifo(victim)
    else:
        victim.unlink()
        victim.symlink_to("/dev/zero" if kind == "symlink_zero" else outside)


def _mutate_json(doc, rng: random.Random, depth=0):
    """One random edit somewhere in a JSON document: a value's type changed, a key removed,
    a list reordered or cut, a number made huge or negative, deep nesting added."""
    if isinstance(doc, dict) and doc and (depth > 3 or rng.random() < 0.35):
        key = rng.choice(sorted(doc))
        action = rng.randrange(5)
        if action == 0:
            del doc[key]
        elif action == 1:
            doc[key] = rng.choice([None, "x", -1, 2 ** 62, 1.5, [], {}, True, "../../etc/passwd"])
        elif action == 2 and isinstance(doc[key], list):
            rng.shuffle(doc[key])
        elif action == 3:
            doc[key] = [doc[key]]
        else:
            nest = doc[key]
            for _ in range(rng.choice([5, 200])):   # deeper: test_artifact_integrity
                nest = [nest]
            doc[key] = nest
        return doc
    if isinstance(doc, dict) and doc:
        key = rng.choice(sorted(doc))
        doc[key] = _mutate_json(doc[key], rng, depth + 1)
        return doc
    if isinstance(doc, list) and doc:
        if rng.random() < 0.3:
            del doc[rng.randrange(len(doc))]
            return doc
        i = rng.randrange(len(doc))
        doc[i] = _mutate_json(doc[i], rng, depth + 1)
        return doc
    if isinstance(doc, bool) or doc is None:
        return rng.choice([0, "", [], not doc])
    if isinstance(doc, int):
        return rng.choice([-doc - 1, doc * 1000003, 2 ** 70, 0, str(doc)])
    if isinstance(doc, float):
        return rng.choice([float("nan"), -doc, 1e308, str(doc)])
    if isinstance(doc, str):
        return rng.choice(["", doc + "x", "../" + doc, 7, doc[::-1]])
    return doc


def _load_and_run(d, x, verify=True):
    try:
        m = Module.load(d, verify=verify)
        try:
            return m.run(x)
        finally:
            m.close()
    except RetargetError as e:
        return e


def _same(got, expected) -> bool:
    return isinstance(got, dict) and all(np.array_equal(got[k], expected[k]) for k in expected)


@pytest.fixture(params=["vta", "toy", "nvdla"])
def artifact(request):
    return request.getfixturevalue(f"{request.param}_artifact")


@FUZZ
@given(seed=st.integers(0, 2 ** 32 - 1), kind=st.sampled_from(FILE_DAMAGE))
def test_damaged_artifact_files_are_refused(artifact, tmp_path, seed, kind):
    d, x, expected = artifact
    work = _copy(d, tmp_path)
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"\1" * 256)
    _damage_file(work, outside, kind, random.Random(seed))
    got = _load_and_run(work, x)
    # with verification on, damage is either detected or (a swap of equal files, a zero-
    # length truncation of an empty file) harmless
    assert isinstance(got, RetargetError) or _same(got, expected), (kind, got)


@FUZZ
@given(seed=st.integers(0, 2 ** 32 - 1),
       which=st.sampled_from(["manifest.json", "graph.json", "kernel.json", "program.json"]))
def test_mutated_json_documents_never_crash(artifact, tmp_path, seed, which):
    d, x, expected = artifact
    work = _copy(d, tmp_path)
    rng = random.Random(seed)
    candidates = sorted(work.rglob(which))
    if not candidates:   # the toy target has no kernel.json / program.json
        candidates = [work / "manifest.json"]
    path = rng.choice(candidates)
    doc = json.loads(path.read_text())
    path.write_text(json.dumps(_mutate_json(doc, rng)))
    if path.name != "manifest.json":
        try:
            reseal(work)   # the structural checks, not the checksums, must catch it
        except RetargetError:
            return
    got = _load_and_run(work, x)
    # a JSON edit may be harmless (a stats field, a report string) but never a crash; a wrong
    # answer is possible only where the edit changed meaning the checks cannot know (e.g. a
    # requantisation shift in graph.json), so only "RetargetError or ran" is asserted
    assert isinstance(got, (RetargetError, dict)), got


@FUZZ
@given(seed=st.integers(0, 2 ** 32 - 1), kind=st.sampled_from(["flip", "truncate", "append"]))
@pytest.mark.parametrize("name", ["vta", "nvdla"])
def test_resealed_damage_without_checksums_never_crashes(name, request, tmp_path, seed, kind):
    """What the structural checks alone guarantee (--no-verify, or a resealed artifact): a
    RetargetError or a run, never another exception (nvdla: the loadable's own CRC and list
    checks)."""
    d, x, _ = request.getfixturevalue(f"{name}_artifact")
    work = _copy(d, tmp_path)
    _damage_file(work, None, kind, random.Random(seed))
    got = _load_and_run(work, x, verify=False)
    assert isinstance(got, (RetargetError, dict)), got


# ---- ONNX files ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def onnx_case():
    data = zoo.build_bytes("resnet18", size=16, width=0.125, num_classes=10, seed=0)
    g = import_model(zoo.build("resnet18", size=16, width=0.125, num_classes=10, seed=0))
    x = {v.name: np.random.default_rng(3).standard_normal(v.type.shape).astype(np.float32)
         for v in g.inputs}
    return data, x, run_graph(g, x)


def _mutate_model(model, rng: random.Random) -> None:
    """One semantic edit of a ModelProto: a dim, a dtype, an attribute, an input name, an op."""
    g = model.graph
    node = rng.choice(list(g.node))
    action = rng.randrange(7)
    if action == 0 and node.attribute:
        a = rng.choice(list(node.attribute))
        if a.ints:
            a.ints[rng.randrange(len(a.ints))] = rng.choice([-1, 0, 7, 1 << 40])
        elif a.type == a.FLOAT:
            a.f = rng.choice([float("nan"), -1.0, 1e30])
        else:
            a.name = a.name + "x"
    elif action == 1:
        node.input[rng.randrange(len(node.input))] = rng.choice(["nope", node.output[0]])
    elif action == 2:
        node.op_type = rng.choice(["Relu", "Conv", "NotAnOp", "Gemm", "Reshape"])
    elif action == 3:
        dims = g.input[0].type.tensor_type.shape.dim
        dims[rng.randrange(len(dims))].dim_value = rng.choice([0, 1, 3, 1 << 40])
    elif action == 4:
        g.input[0].type.tensor_type.elem_type = rng.choice([2, 7, 8, 9, 16, 99])
    elif action == 5 and g.initializer:
        t = rng.choice(list(g.initializer))
        if t.dims:
            t.dims[0] = rng.choice([0, t.dims[0] + 1, 1 << 20])
    else:
        del g.node[rng.randrange(len(g.node))]


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2 ** 32 - 1), byte_level=st.booleans())
def test_mutated_onnx_files_give_the_answer_or_a_retarget_error(onnx_case, tmp_path, seed,
                                                                byte_level):
    import onnx
    data, x, expected = onnx_case
    rng = random.Random(seed)
    if byte_level:
        b = bytearray(data)
        for _ in range(rng.randrange(1, 4)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        data = bytes(b[:rng.choice([len(b), rng.randrange(len(b))])])
    else:
        model = onnx.load_from_string(data)
        _mutate_model(model, rng)
        data = model.SerializeToString()
    path = tmp_path / f"m{seed}.onnx"
    path.write_bytes(data)
    try:
        from retarget import load
        g = load(path)
        got = run_graph(g, {k: v for k, v in x.items() if k in {i.name for i in g.inputs}})
    except RetargetError:
        return
    # the edit may have been harmless (a flipped byte inside a weight changes the answer,
    # legitimately: the file says so); what must never happen is another exception type
    assert isinstance(got, dict)


# ---- hostile config fields and kernel documents, every target -----------------------------------
# What an attacker writes into a field: shell words, paths (out of the run's temporary
# directory), compiler options that load code, huge numbers, NaN, wrong types. "{out}" is a
# directory outside the artifact that must stay empty; "{marker}" a file that appears only if
# a command ran.
HOSTILE = ["-c 'touch {marker}' --",
           "../outside/evil -fplugin=../outside/x.so -specs=../outside/x.specs",   # from cwd/
           2 ** 62, float("nan"), []]
CONFIG_TARGETS = ["c", "sunway", "dnnvm", "nvdla"]


@pytest.fixture(scope="module")
def caching_cc(tmp_path_factory):
    """The loading machine's compiler for these cases: gcc behind a cache keyed by its
    arguments and the sources (each case builds the same C; RETARGET_CC is how a machine
    names its compiler)."""
    d = tmp_path_factory.mktemp("cc")
    script = d / "cc"
    script.write_text(
        "#!/bin/sh\n"
        f"cache={d}\n"
        'key=$( (echo "$@"; cat *.c *.h) | sha256sum | cut -c1-40)\n'
        'if [ -f "$cache/$key.so" ]; then cp "$cache/$key.so" libmodel.so; exit 0; fi\n'
        'gcc "$@" && cp libmodel.so "$cache/$key.so"\n')
    script.chmod(0o755)
    return str(script)


def _loading_machine(monkeypatch, cc: str) -> None:
    """This machine's build settings for the C targets: quick, cached, no OpenMP threads
    (which spin slowly on a busy 2-core machine)."""
    monkeypatch.setenv("RETARGET_CC", cc)
    monkeypatch.setenv("RETARGET_CFLAGS", "-O0 -std=c99")
    monkeypatch.setenv("RETARGET_OPENMP", "0")


def _fill(value, marker, out):
    return value.format(marker=marker, out=out) if isinstance(value, str) else value


def _config_cases():
    from retarget.targets.registry import target_class
    from dataclasses import fields
    cases = []
    for name in CONFIG_TARGETS:
        cls = target_class(name)
        for f in fields(cls.default_config()):
            cases += [(name, f.name, v) for v in HOSTILE]
    return cases


CONFIG_CASES = _config_cases()


def _guarded_load_and_run(work, x, tmp_path, timeout_s=60):
    """_load_and_run under an alarm (a hang fails the case)."""
    import signal

    def hang(*_):
        raise TimeoutError(f"no answer within {timeout_s} s")
    old = signal.signal(signal.SIGALRM, hang)
    signal.alarm(timeout_s)
    try:
        return _load_and_run(work, x)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _snapshot(d):
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in d.rglob("*") if p.is_file()}


def _close(got, expected, exact: bool) -> bool:
    if not isinstance(got, dict):
        return False
    if exact:
        return _same(got, expected)
    return all(np.allclose(got[k], expected[k], rtol=1e-4, atol=1e-4) for k in expected)


def test_hostile_config_fields_never_run_a_command_or_touch_a_file(
        request, tmp_path, monkeypatch, caching_cc, spawned):
    """Every config field of the c, sunway, dnnvm and nvdla targets set to each hostile value
    in the manifest (and, for dnnvm, in the program's own recorded config), resealed: the
    right answer or a RetargetError; no command with the artifact's words, no file outside
    the run's temporary directory, no change to the artifact, no hang."""
    import time
    _loading_machine(monkeypatch, caching_cc)
    out = tmp_path / "outside"
    out.mkdir()
    marker = out / "pwned"
    cwd = tmp_path / "cwd"          # relative paths in the artifact resolve from here
    cwd.mkdir()
    (tmp_path / "works").mkdir()
    monkeypatch.chdir(cwd)
    outcomes = {"answer": 0, "refused": 0}
    t0 = time.perf_counter()
    clean = {}
    per_target = {}
    for name, field, value in CONFIG_CASES:
        t1 = time.perf_counter()
        d, x, expected = request.getfixturevalue(f"{name}_artifact")
        if name not in clean:
            clean[name] = _copy(d, tmp_path / "works")
        work = _copy(clean[name], tmp_path / "works")
        v = _fill(value, marker, out)
        m = json.loads((work / "manifest.json").read_text())
        m["target"]["config"][field] = v
        (work / "manifest.json").write_text(json.dumps(m))
        for prog in work.rglob("program.json"):       # dnnvm records its config here too
            doc = json.loads(prog.read_text())
            if isinstance(doc.get("config"), dict) and field in doc["config"]:
                doc["config"][field] = v
                prog.write_text(json.dumps(doc))
        reseal(work)
        before = _snapshot(work)
        spawned.clear()
        got = _guarded_load_and_run(work, x, tmp_path)
        case = (name, field, v, got)
        assert isinstance(got, RetargetError) or _close(got, expected, name != "c" and
                                                        name != "sunway"), case
        outcomes["refused" if isinstance(got, RetargetError) else "answer"] += 1
        assert not any(out.iterdir()), case              # no marker, nothing written there
        assert not any(cwd.iterdir()), case              # nor in the working directory
        assert _snapshot(work) == before, case           # the artifact itself is untouched
        words = {str(w) for w in (v if isinstance(v, (list, dict)) else [v])}
        for argv in spawned:                               # only the machine's compiler ran
            assert argv[0] in (caching_cc, sys.executable, "gcc"), (case, argv)
            assert not (words & set(argv)) and not any("touch" in w for w in argv), (case, argv)
        per_target[name] = per_target.get(name, 0.0) + time.perf_counter() - t1
    print({k: round(v, 1) for k, v in per_target.items()})
    seconds = time.perf_counter() - t0
    print(f"{len(CONFIG_CASES)} hostile config cases in {seconds:.1f} s: {outcomes}")
    assert outcomes["answer"] and outcomes["refused"]


KERNEL_DOCS = {"c": "program.json", "sunway": "program.json", "dnnvm": "kernel.json",
               "nvdla": "kernel.json"}


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(seed=st.integers(0, 2 ** 32 - 1))
@pytest.mark.parametrize("name", CONFIG_TARGETS + ["dnnvm_program"])
def test_mutated_kernel_documents_of_every_target_never_crash(name, request, tmp_path, seed,
                                                              monkeypatch, caching_cc):
    """Random edits of c / sunway program.json, dnnvm kernel.json and program.json, nvdla
    kernel.json, hostile strings included, resealed: a RetargetError or a run."""
    _loading_machine(monkeypatch, caching_cc)
    target = name.split("_")[0]
    d, x, _ = request.getfixturevalue(f"{target}_artifact")
    work = _copy(d, tmp_path)
    rng = random.Random(seed)
    doc_name = "program.json" if name == "dnnvm_program" else KERNEL_DOCS[name]
    path = rng.choice(sorted(work.rglob(doc_name)))
    doc = _mutate_json(json.loads(path.read_text()), rng)
    if rng.random() < 0.3:          # a hostile string where the code expects a name
        doc = _plant(doc, rng, rng.choice(["*/ int pwned; /*", "\\\n#include </etc/passwd>",
                                           "$(touch /tmp/x)", "../../x", "a\"b"]))
    path.write_text(json.dumps(doc))
    try:
        reseal(work)
    except RetargetError:
        return
    got = _guarded_load_and_run(work, x, tmp_path)
    assert isinstance(got, (RetargetError, dict)), got


def _plant(doc, rng, text):
    """`doc` with one string somewhere replaced by `text`."""
    if isinstance(doc, dict) and doc:
        k = rng.choice(sorted(doc))
        doc[k] = text if isinstance(doc[k], str) else _plant(doc[k], rng, text)
    elif isinstance(doc, list) and doc:
        i = rng.randrange(len(doc))
        doc[i] = text if isinstance(doc[i], str) else _plant(doc[i], rng, text)
    return doc
