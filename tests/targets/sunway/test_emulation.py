"""The athread emulation enforces the chip's rules: a CPE that overflows its 64 KB LDM, or
DMAs outside a tensor, stops the layer with an error (and the other CPEs, waiting at a
barrier, do not hang); slave code cannot dereference main memory (it only holds handles);
the counters count what the slaves did."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from retarget.targets.sunway.emit import runtime_source

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

MAIN = r"""
#include <stdio.h>
#include <string.h>
#include "athread_emu.h"

static float data[1024];
typedef struct { rt_gmem t; } para;

SLAVE

int main(void)
{
    para p;
    int status, c;
    long long bytes = 0, calls = 0, ldm = 0;
    if (rt_init(64, 65536))
        return 3;
    rt_forget_tensors();
    p.t = rt_register(data, sizeof data);
    status = rt_spawn(slave, &p);
    for (c = 0; c < 64; c++) {
        bytes += rt_cpe_counters(c)->get_bytes + rt_cpe_counters(c)->put_bytes;
        calls += rt_cpe_counters(c)->dma_calls;
        if (rt_cpe_counters(c)->ldm_bytes > ldm)
            ldm = rt_cpe_counters(c)->ldm_bytes;
    }
    printf("status=%d bytes=%lld calls=%lld ldm=%lld error=%s\n", status, bytes, calls, ldm,
           rt_error());
    return 0;
}
"""


def run(tmp_path: Path, slave: str, defines: str = "") -> str:
    for name in ("athread_emu.h", "athread_emu.c"):
        (tmp_path / name).write_text(runtime_source(name))
    (tmp_path / "main.c").write_text(defines + MAIN.replace("SLAVE", slave))
    done = subprocess.run(["gcc", "-O1", "-std=c99", "-DRT_EMULATE",
                           "-Werror=implicit-function-declaration",
                           "-o", "t", "main.c", "athread_emu.c", "-pthread"], cwd=tmp_path, capture_output=True, text=True)
    if done.returncode:
        return "COMPILE ERROR\n" + done.stderr
    return subprocess.run([str(tmp_path / "t")], capture_output=True, text=True,
                          timeout=60).stdout


GOOD = r"""
static void slave(void *arg)
{
    const para *p = (const para *)arg;
    RT_LDM(float, buf, 16);
    int i, id = rt_myid();
    rt_dma_get(buf, p->t, (size_t)id * 16 * sizeof(float), 16 * sizeof(float));
    rt_dma_wait();
    for (i = 0; i < 16; i++)
        buf[i] += 1.0f;
    rt_sync();
    rt_dma_put(p->t, (size_t)id * 16 * sizeof(float), buf, 16 * sizeof(float));
    rt_dma_wait();
}
"""


def test_a_well_behaved_slave_is_counted(tmp_path):
    out = run(tmp_path, GOOD)
    assert out.strip() == "status=0 bytes=8192 calls=128 ldm=64 error="


def test_ldm_overflow_stops_the_layer_without_hanging_the_others(tmp_path):
    slave = GOOD.replace("int i, id = rt_myid();",
                         "int i, id = rt_myid();\n    RT_LDM(float, big, id == 5 ? 20000 : 1);")
    out = run(tmp_path, slave)
    assert "status=1" in out
    assert "cpe 5: LDM overflow: big needs 80000 bytes" in out


def test_dma_outside_its_tensor_is_caught(tmp_path):
    slave = GOOD.replace("(size_t)id * 16 * sizeof(float), 16 * sizeof(float));\n    rt_dma_wait();\n    for",
                         "(size_t)(id + 1) * 16 * sizeof(float), 16 * sizeof(float));\n    rt_dma_wait();\n    for", 1)
    out = run(tmp_path, slave)
    assert "status=1" in out
    assert "cpe 63: dma get: bytes [4096, 4160) are outside tensor 0 (4096 bytes)" in out


def test_dma_into_memory_outside_the_ldm_is_caught(tmp_path):
    slave = GOOD.replace("RT_LDM(float, buf, 16);", "float buf[16];")
    out = run(tmp_path, slave)
    assert "status=1" in out and "outside this CPE's allocated LDM" in out


def test_slave_code_cannot_touch_main_memory_directly(tmp_path):
    # a handle is not a pointer: dereferencing it does not compile
    slave = GOOD.replace("buf[i] += 1.0f;", "buf[i] += ((float *)p->t)[i];")
    assert "COMPILE ERROR" in run(tmp_path, slave)
    # and swTVM-mode code is built without the global load/store functions at all
    slave = GOOD.replace("buf[i] += 1.0f;", "buf[i] += rt_gld_f(p->t, i);")
    out = run(tmp_path, slave, "#define RT_NO_GLOBAL_ACCESS\n")
    assert "COMPILE ERROR" in out and "rt_gld_f" in out


PREFETCH = r"""
static void slave(void *arg)
{
    const para *p = (const para *)arg;
    RT_LDM(float, buf, 16);
    int id = rt_myid();
    buf[0] = -1.0f;
    rt_dma_iget(buf, p->t, (size_t)id * 16 * sizeof(float), 16 * sizeof(float));
    BEFORE
    rt_dma_wait_async();
    AFTER
    rt_dma_put(p->t, (size_t)id * 16 * sizeof(float), buf, 16 * sizeof(float));
    rt_dma_wait();
}
"""


def test_an_asynchronous_get_lands_only_when_waited_for(tmp_path):
    # data[] starts at 0: the first element seen before the wait is the buffer's old -1
    probe = 'if (id == 0) printf("before=%g ", buf[0]);'
    out = run(tmp_path, "#include <stdio.h>\n" + PREFETCH.replace("BEFORE", probe)
              .replace("AFTER", 'if (id == 0) printf("after=%g ", buf[0]);'))
    assert "before=-1 after=0" in out
    assert "status=0 bytes=8192 calls=128" in out


def test_an_asynchronous_get_never_waited_for_is_an_error(tmp_path):
    out = run(tmp_path, PREFETCH.replace("rt_dma_wait_async();", "")
              .replace("BEFORE", "").replace("AFTER", "")
              .replace("rt_dma_put(p->t, (size_t)id * 16 * sizeof(float), buf, 16 * sizeof(float));", ""))
    assert "status=1" in out and "asynchronous gets were never waited for" in out
