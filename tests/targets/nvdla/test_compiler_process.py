"""The nvdla compiler runs as a separate process per region (the BYOC route): the configured
command is what runs; a missing, failing, silent, slow or garbage-writing compiler is a clear
TargetError naming the region and carrying its stderr; the compiler is also a standalone
program (python -m retarget.targets.nvdla.compile / retarget-nvdla-compile)."""
from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import retarget
from retarget.errors import TargetError
from retarget.ops.reference import run_graph
from retarget.targets.external.export import document, write_document
from retarget.targets.nvdla.config import PRESETS
from retarget.targets.nvdla.loadable import Loadable
from retarget.targets.nvdla.target import NvdlaTarget

from .conftest import samples, tiny_graph

PY = shlex.quote(sys.executable)


@pytest.fixture(scope="module")
def graph():
    return tiny_graph()


def compile_with(graph, command: str, preset: str = "nv_full", **config):
    return retarget.compile(graph, f"nvdla:{preset}", calibration=samples(graph, 2),
                            config={"compiler": command, **config})


def script(tmp_path: Path, name: str, text: str) -> str:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text), encoding="utf-8")
    return shlex.quote(str(p))


# ---- the process ------------------------------------------------------------------------------

def test_each_region_is_compiled_by_the_configured_separate_process(graph, tmp_path):
    pids = tmp_path / "pids.txt"
    wrapper = script(tmp_path, "wrap.py", f"""
        import os, sys
        with open({str(pids)!r}, "a") as f:
            f.write(f"{{os.getpid()}}\\n")
        # become the bundled compiler (same process id)
        os.execv(sys.executable, [sys.executable, "-m", "retarget.targets.nvdla.compile",
                                  *sys.argv[1:]])
        """)
    m = compile_with(graph, f"{{python}} {wrapper} {{json}} -o {{out}}")
    try:
        recorded = [int(s) for s in pids.read_text().split()]
        assert len(recorded) == len(m.offloaded) >= 1
        assert os.getpid() not in recorded
        for r in m.offloaded:
            run = m.kernels[r.name].compiler_run
            assert run.command[0] == sys.executable and run.command[1] == str(tmp_path / "wrap.py")
            assert run.command[2].endswith("region.json") and run.command[3] == "-o"
            assert run.binary_bytes == len(m.kernels[r.name].program.loadable.to_bytes())
            assert run.seconds > 0
        x = samples(graph, seed=5)[0]
        got, want = m.run(x), run_graph(m.graph, x)
        for k in want:
            np.testing.assert_array_equal(got[k], want[k])
    finally:
        m.close()


def test_the_default_compiler_is_the_bundled_one_in_its_own_process(compiled):
    g, m = compiled("tiny", "nv_full")
    for r in m.offloaded:
        run = m.kernels[r.name].compiler_run
        assert run.command[:3] == (sys.executable, "-m", "retarget.targets.nvdla.compile")
        assert run.command[-2] == "-o" and run.command[-1].endswith("region.bin")


def test_a_target_built_with_a_compiler_override_uses_it(graph, tmp_path):
    marker = tmp_path / "ran"
    wrapper = script(tmp_path, "touch.py", f"""
        import os, sys
        open({str(marker)!r}, "w").write(str(os.getpid()))
        os.execv(sys.executable, [sys.executable, "-m", "retarget.targets.nvdla.compile",
                                  *sys.argv[1:]])
        """)
    cfg = replace(PRESETS["nv_small"], compiler=f"{{python}} {wrapper} {{json}} -o {{out}}")
    tgt = NvdlaTarget(cfg)
    m = retarget.compile(graph, tgt, calibration=samples(graph, 2))
    try:
        assert int(marker.read_text()) != os.getpid()
        assert all(m.kernels[r.name].program.loadable.config_name == "nv_small"
                   for r in m.offloaded)
    finally:
        m.close()


# ---- broken compilers -------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["missing", "exit3", "silent", "garbage", "timeout",
                                  "wrong-config", "no-json"])
def test_a_broken_compiler_is_a_clear_error(graph, tmp_path, kind):
    timeout = 300.0
    if kind == "missing":
        command, message = "/no/such/nvdlacc {json} -o {out}", \
            r"cannot be started: '/no/such/nvdlacc' not found"
    elif kind == "exit3":
        s = script(tmp_path, "fail.py", """
            import sys
            sys.stderr.write("nvdlacc: no CONV engine for this\\n")
            sys.exit(3)
            """)
        command = f"{PY} {s} {{json}} -o {{out}}"
        message = r"failed with exit status 3; its stderr:\nnvdlacc: no CONV engine for this"
    elif kind == "silent":
        s = script(tmp_path, "silent.py", """
            import sys
            sys.stderr.write("thinking...\\n")
            """)
        command = f"{PY} {s} {{json}} -o {{out}}"
        message = r"exited 0 but wrote nothing to .*region\.bin; its stderr:\nthinking\.\.\."
    elif kind == "garbage":
        s = script(tmp_path, "garbage.py", """
            import sys
            open(sys.argv[sys.argv.index("-o") + 1], "wb").write(b"\\x13\\x37garbage" * 40)
            """)
        command = f"{PY} {s} {{json}} -o {{out}}"
        message = r"the compiler's loadable is unreadable: not an nvdla loadable \(magic"
    elif kind == "timeout":
        s = script(tmp_path, "slow.py", """
            import sys, time
            sys.stderr.write("starting a long search\\n"); sys.stderr.flush()
            time.sleep(30)
            """)
        command, timeout = f"{PY} {s} {{json}} -o {{out}}", 0.5
        message = r"did not finish in 0.5 s \(config `compiler_timeout_s`\); its stderr:\n" \
                  r"starting a long search"
    elif kind == "wrong-config":     # the bundled compiler, told to build for another config
        command = "{python} -m retarget.targets.nvdla.compile {json} -o {out} --config nv_small"
        message = r"the loadable was built for nv_small .* the target is nv_full"
    else:
        command, message = f"{PY} -c pass", r"never names the region"
    with pytest.raises(TargetError, match=message) as e:
        compile_with(graph, command, compiler_timeout_s=timeout)
    if kind != "no-json":
        assert "region 'nvdla_0'" in str(e.value)


# Rewrites one section of a loadable and makes its header (body length, CRC-32) consistent
# again: the file is well formed at the byte level, only its content is wrong.
RESIGN = """
import struct, zlib
HEADER, SECTION = struct.Struct("<8sHHIII"), struct.Struct("<4sI")

def resigned(data, tag, payload):
    magic, version, count, _, _, reserved = HEADER.unpack_from(data)
    body, pos, out = data[HEADER.size:], 0, []
    for _ in range(count):
        t, n = SECTION.unpack_from(body, pos)
        p = body[pos + SECTION.size:pos + SECTION.size + n]
        pos += SECTION.size + n + (-n % 8)
        out.append((t, payload if t == tag else p))
    new = b"".join(SECTION.pack(t, len(p)) + p + b"\\0" * (-len(p) % 8) for t, p in out)
    return HEADER.pack(magic, version, count, len(new), zlib.crc32(new), reserved) + new
"""


def test_a_crc_valid_loadable_with_a_non_text_hardware_section_is_a_clear_error(graph,
                                                                                 tmp_path):
    """A compiler whose loadable has a right CRC but a hardware section (HWCF) that is not
    UTF-8 text: "unreadable", a TargetError naming the region, like any other damaged
    loadable (not a bare UnicodeDecodeError out of retarget.compile)."""
    s = script(tmp_path, "bad_hwcf.py", RESIGN + """
import sys
from retarget.targets.nvdla.compile import main
args = sys.argv[1:]
status = main(args)
out = args[args.index("-o") + 1]
data = open(out, "rb").read()
open(out, "wb").write(resigned(data, b"HWCF", b"\\xff not text"))
sys.exit(status)
""")
    with pytest.raises(TargetError, match=r"region 'nvdla_0'.*unreadable"):
        compile_with(graph, f"{PY} {s} {{json}} -o {{out}}")


# ---- the standalone compiler --------------------------------------------------------------------

@pytest.fixture(scope="module")
def region_json(compiled, tmp_path_factory):
    """The tiny net's region as an export document (no "config": the compiler's default)."""
    g, m = compiled("tiny", "nv_full")
    region = m.offloaded[0]
    doc, arrays = document("nvdla", [region])
    return write_document(doc, arrays, tmp_path_factory.mktemp("doc") / "region.json"), m


def console_script() -> str:
    near = Path(sys.executable).parent / "retarget-nvdla-compile"
    found = str(near) if near.is_file() else shutil.which("retarget-nvdla-compile")
    assert found, "the retarget-nvdla-compile console script is not installed"
    return found


@pytest.mark.parametrize("how", ["module", "console-script"])
def test_the_compiler_runs_standalone(region_json, tmp_path, how):
    path, m = region_json
    argv = ([sys.executable, "-m", "retarget.targets.nvdla.compile"] if how == "module"
            else [console_script()])
    out = tmp_path / "out.loadable"
    done = subprocess.run(argv + [str(path), "-o", str(out)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    ld = Loadable.from_bytes(out.read_bytes())
    assert ld.config_name == "nv_full" and ld.hardware == PRESETS["nv_full"].hardware()
    # the same loadable the target got for this region (same document, same hardware)
    assert out.read_bytes() == m.kernels[m.offloaded[0].name].program.loadable.to_bytes()
    small = tmp_path / "small.loadable"
    done = subprocess.run(argv + [str(path), "-o", str(small), "--config", "nv_small"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    ld = Loadable.from_bytes(small.read_bytes())
    assert ld.config_name == "nv_small" and ld.hardware["atomic_c"] == 8
    assert ld.hardware == PRESETS["nv_small"].hardware()


def test_the_document_config_is_honoured(compiled, tmp_path):
    g, m = compiled("tiny", "nv_full")
    doc, arrays = document("nvdla", [m.offloaded[0]],
                           {"name": "nv_small", **PRESETS["nv_small"].hardware()})
    path = write_document(doc, arrays, tmp_path / "region.json")
    out = tmp_path / "r.loadable"
    done = subprocess.run([sys.executable, "-m", "retarget.targets.nvdla.compile", str(path),
                           "-o", str(out)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert Loadable.from_bytes(out.read_bytes()).hardware["atomic_c"] == 8


def test_an_unsupported_op_exits_2_naming_the_node(tmp_path):
    t = {"name": "x", "shape": [1, 10], "dtype": "float32"}
    doc = {"format": "retarget.regions", "version": 1, "target": "nvdla",
           "weights": "region.npz",
           "regions": [{"name": "nvdla_0", "macs": 0, "inputs": [t],
                        "outputs": [{**t, "name": "y"}],
                        "nodes": [{"op": "Softmax", "name": "head/the_softmax",
                                   "attrs": {"axis": -1},
                                   "inputs": [{**t, "kind": "input"}],
                                   "outputs": [{**t, "name": "y"}]}]}]}
    (tmp_path / "region.json").write_text(json.dumps(doc), encoding="utf-8")
    np.savez(tmp_path / "region.npz")
    out = tmp_path / "out.loadable"
    done = subprocess.run([sys.executable, "-m", "retarget.targets.nvdla.compile",
                           str(tmp_path / "region.json"), "-o", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "head/the_softmax" in done.stderr and "Softmax" in done.stderr
    assert not out.exists()


def test_a_missing_document_exits_2(tmp_path):
    done = subprocess.run([sys.executable, "-m", "retarget.targets.nvdla.compile",
                           str(tmp_path / "nope.json"), "-o", str(tmp_path / "o")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "nope.json" in done.stderr
