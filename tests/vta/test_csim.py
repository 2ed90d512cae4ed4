"""The C simulator (targets/vta/csim) against the Python simulator: byte for byte (DRAM, the four
SRAMs, counters) on the published unit-test programs, the same error class, index and state on
deliberately bad streams, the device option that picks one, and the VTA driver API in C."""
from __future__ import annotations

import ctypes as C
import os
import platform
import shutil
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pytest

from retarget.errors import DeviceError, ResourceLimitError
from retarget.targets.vta.builder import StreamBuilder
from retarget.targets.vta.config import PRESETS, preset
from retarget.targets.vta.csim import binding, build
from retarget.targets.vta.device import VTADevice, relocate
from retarget.targets.vta.isa import (NO_DEPS, AluInsn, AluOp, Deps, FinishInsn, GemmInsn,
                                      MemInsn, MemType, Opcode, encode_stream, encode_uop_arrays,
                                      layout_for)
from retarget.targets.vta.sim import DeadlockError, SimulationError, Simulator

from .test_published import alu_program, blocked_gemm

pytestmark = pytest.mark.skipif(not binding.available(), reason="no C compiler")
DRAM = 1 << 20


def sram_state(sim) -> list[np.ndarray]:
    return [getattr(sim.mem, s).astype(np.int64) for s in ("uop", "inp", "wgt", "acc")]


def assert_same_state(py, cs):
    assert np.array_equal(py.dram, cs.dram), "DRAM differs"
    for name, a, b in zip(("uop", "inp", "wgt", "acc"), sram_state(py), sram_state(cs)):
        assert np.array_equal(a, b), f"{name} SRAM differs"


def both(cfg, image: np.ndarray):
    py = Simulator(cfg, dram=image.copy())
    cs = binding.CSimulator(cfg, dram=image.copy())
    return py, cs


def gemm_image(cfg, prog, seed: int) -> np.ndarray:
    """The blocked GEMM's DRAM image with random int8 inputs and weights."""
    rng = np.random.default_rng(seed)
    return prog.dram_image({k: rng.integers(-128, 128, b.shape).astype(np.int8)
                            for k, b in prog.buffers.items() if k != "out"})


def compare_runs(cfg, prog, image: np.ndarray, runs: int = 1):
    """Run `prog` on both simulators `runs` times; results and state equal after each."""
    py, cs = both(cfg, image)
    stream = prog.stream()
    for _ in range(runs):     # a second run replays on the Python side
        rp, rc = py.run(stream), cs.run(stream)
        assert rp == rc
        assert_same_state(py, cs)
    return rc


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_has_the_python_layout(name):
    cfg = preset(name)
    binding.c_config(cfg)      # raises if any field, depth or block differs
    assert binding.CSimulator(cfg, dram_bytes=4096).mem.acc.shape == (
        cfg.acc_depth, cfg.batch, cfg.block_out)


@pytest.mark.parametrize("cfg_name", ["pynq", "1x32", "2x16", "1x64"])
@pytest.mark.parametrize("vthreads", [1, 2])
def test_published_blocked_gemm_byte_for_byte(cfg_name, vthreads):
    cfg = preset(cfg_name)
    prog = blocked_gemm(cfg, 128, 256, 64, vthreads)
    rc = compare_runs(cfg, prog, gemm_image(cfg, prog, 3), runs=2)
    assert rc.counters.gemm_counter > 0


def test_narrow_cores_take_the_plain_gemm_byte_for_byte():
    """Blocks narrower than the vector width (here 1x4x4 and 2x8x4) run the plain C GEMM."""
    base = preset("pynq")
    for cfg in (replace(base, name="1x4", log_block_in=2, log_block_out=2, log_inp_buff_size=13,
                        log_wgt_buff_size=14, log_acc_buff_size=15),
                replace(base, name="2x8x4", log_batch=1, log_block_in=3, log_block_out=2,
                        log_inp_buff_size=14, log_wgt_buff_size=15, log_acc_buff_size=16)):
        prog = blocked_gemm(cfg, 32, 64, 16, 2)
        compare_runs(cfg, prog, gemm_image(cfg, prog, 9))


@pytest.mark.parametrize("cfg_name", ["pynq", "2x16"])
def test_published_alu_programs_byte_for_byte(cfg_name):
    cfg = preset(cfg_name)
    rng = np.random.default_rng(4)
    steps = [(AluOp.SHR, 3), (AluOp.SHR, -2), (AluOp.MUL, None), (AluOp.ADD, -7),
             (AluOp.MIN, None), (AluOp.MAX, 5), (AluOp.SHR, None)]
    prog = alu_program(cfg, 3, 5, steps)
    data = {k: rng.integers(-(1 << 31), 1 << 31, prog.buffers[k].shape, dtype=np.int64)
            .astype(np.int32) for k in ("a",)}
    data["b"] = rng.integers(-40, 40, prog.buffers["b"].shape).astype(np.int32)
    compare_runs(cfg, prog, prog.dram_image(data))


# ---- deliberately bad streams ------------------------------------------------------------------

def uop_words(cfg, uops) -> np.ndarray:
    u = np.asarray(uops, np.int64).reshape(-1, 3)
    return encode_uop_arrays(u[:, 0], u[:, 1], u[:, 2], layout_for(cfg)).view(np.uint8)


def prefix(cfg):
    """A good start (micro-ops, inputs, weights, one GEMM) so a fault has state to keep."""
    return [MemInsn(Opcode.LOAD, NO_DEPS, MemType.UOP, 0, 0, 1, 4, 4),
            MemInsn(Opcode.LOAD, NO_DEPS, MemType.INP, 0, 1024 // cfg.inp_elem_bytes, 1, 2, 2),
            MemInsn(Opcode.LOAD, NO_DEPS, MemType.WGT, 0, 2048 // cfg.wgt_elem_bytes, 1, 2, 2),
            GemmInsn(NO_DEPS, False, 0, 2, 1, 1, 0, 0, 0, 0, 0, 0)]


def G(bgn, end, io=1, ii=1, f=(0, 0, 0, 0, 0, 0), deps=NO_DEPS, reset=False):
    return GemmInsn(deps, reset, bgn, end, io, ii, *f)


def A(op=AluOp.ADD, bgn=0, end=1, io=1, ii=1, f=(0, 0, 0, 0), imm=None, reset=False, deps=NO_DEPS):
    return AluInsn(deps, reset, bgn, end, io, ii, *f, op, imm is not None, imm or 0)


def bad_cases(cfg):
    c = cfg
    mem = lambda *a, **k: MemInsn(*a, **k)  # noqa: E731
    L, S = Opcode.LOAD, Opcode.STORE
    big = DRAM // c.inp_elem_bytes
    return {
        "load OUT": [mem(L, NO_DEPS, MemType.OUT, 0, 0, 1, 1, 1)],
        "store INP": [mem(S, NO_DEPS, MemType.INP, 0, 0, 1, 1, 1)],
        "store padded": [mem(S, NO_DEPS, MemType.OUT, 0, 0, 1, 1, 1, 1)],
        "alu reset": [A(reset=True)],
        "gemm acc index": [G(0, 2, io=c.acc_depth, f=(1, 0, 0, 0, 0, 0))],
        "gemm inp index": [G(0, 1, ii=c.inp_depth + 1, f=(0, 0, 0, 1, 0, 0))],
        "gemm wgt index": [G(0, 1, io=3, f=(0, 0, 0, 0, c.wgt_depth // 2, 0))],
        "alu src index": [A(AluOp.MAX, 0, 2, ii=c.acc_depth, f=(0, 0, 0, 1))],
        "uop range": [G(3, 2)],
        "uop past depth": [G(c.uop_depth - 1, c.uop_depth + 1)],
        "load past sram": [mem(L, NO_DEPS, MemType.INP, c.inp_depth - 1, 0, 1, 2, 2)],
        "store past sram": [mem(S, NO_DEPS, MemType.OUT, c.acc_depth - 1, 0, 1, 2, 2)],
        "load past dram": [mem(L, NO_DEPS, MemType.INP, 0, big - 1, 2, 1, 1)],
        "store past dram": [mem(S, NO_DEPS, MemType.OUT, 0, DRAM // c.out_elem_bytes, 1, 1, 1)],
        "flag without stage": [mem(L, Deps(pop_prev=True), MemType.INP, 0, 0, 1, 1, 1)],
        "deadlock": [G(0, 0, deps=Deps(pop_prev=True))],
        "early finish": "early",
        "missing finish": "nofinish",
        "unknown opcode": "opcode",
    }


def bad_stream(cfg, case) -> bytes:
    fin = FinishInsn()
    if case == "early":
        insns = prefix(cfg) + [fin, MemInsn(Opcode.STORE, Deps(pop_prev=True), MemType.OUT,
                                            0, 0, 1, 1, 1)]
    elif case == "nofinish":
        insns = prefix(cfg)
    elif case == "opcode":
        insns = prefix(cfg) + [fin]
    else:
        insns = prefix(cfg) + case + [fin]
    raw = bytearray(encode_stream(insns, layout_for(cfg)))
    if case == "opcode":
        raw[3 * 16] |= 0b111
    return bytes(raw)


def image_for(cfg) -> np.ndarray:
    image = np.random.default_rng(5).integers(0, 256, DRAM).astype(np.uint8)
    image[:16] = uop_words(cfg, [(0, 0, 0), (1, 1, 1), (2, 0, 1), (3, 1, 0)])
    return image


@pytest.mark.parametrize("cfg_name", ["pynq", "2x16", "pynq_alu"])
def test_bad_streams_same_error_and_state(cfg_name):
    cfg = preset(cfg_name)
    for name, case in bad_cases(cfg).items():
        py, cs = both(cfg, image_for(cfg))
        raw = bad_stream(cfg, case)
        errors = []
        for sim in (py, cs):
            with pytest.raises(SimulationError) as info:
                sim.run(raw)
            errors.append(info.value)
        ep, ec = errors
        assert type(ep) is type(ec), (name, ep, ec)
        assert ep.index == ec.index, (name, ep, ec)
        assert str(ec).split(":")[0] == str(ep).split(":")[0], (name, ep, ec)
        if isinstance(ep, DeadlockError):
            assert str(ep) == str(ec) and ep.blocked == ec.blocked
        assert_same_state(py, cs)


def test_confinement_and_work_limit(monkeypatch):
    cfg = preset("pynq")

    @dataclass
    class Alloc:
        start: int
        end: int

    class Confine:             # what a device's TaskMemory offers the two simulators
        allocations = (Alloc(0, 2048),)

        def violation(self, start, end):
            return None if end <= 2048 else f"bytes [0x{start:x}, 0x{end:x}) outside"

    stream = encode_stream(prefix(cfg) + [FinishInsn()], layout_for(cfg))
    messages = []
    for sim in both(cfg, image_for(cfg)):
        sim.mem.confine = Confine()
        with pytest.raises(SimulationError, match="confinement") as info:
            sim.run(stream)
        assert info.value.index == 2            # the WGT load reads from byte 2048 on
        messages.append(str(info.value))
    assert messages[0] == messages[1]           # the confinement's own words, both times
    monkeypatch.setenv("RETARGET_MAX_DEVICE_WORK", "100")
    for sim in both(cfg, image_for(cfg)):
        with pytest.raises(ResourceLimitError, match="work limit"):
            sim.run(stream)


# ---- the device option -------------------------------------------------------------------------

def test_device_option_and_environment(monkeypatch):
    assert isinstance(VTADevice("pynq", memory_bytes=DRAM, simulator="python").sim, Simulator)
    assert isinstance(VTADevice("pynq", memory_bytes=DRAM, simulator="c").sim, binding.CSimulator)
    monkeypatch.setenv("RETARGET_VTA_SIM", "python")
    assert isinstance(VTADevice("pynq", memory_bytes=DRAM).sim, Simulator)
    monkeypatch.setenv("RETARGET_VTA_SIM", "fortran")
    with pytest.raises(DeviceError, match="RETARGET_VTA_SIM='fortran'"):
        VTADevice("pynq", memory_bytes=DRAM)
    with pytest.raises(DeviceError, match="choose one of auto, c, python"):
        VTADevice("pynq", memory_bytes=DRAM, simulator="verilog")


def test_no_compiler_falls_back_or_fails(monkeypatch, tmp_path):
    monkeypatch.setenv("RETARGET_VTA_CC", str(tmp_path / "no-such-cc"))
    monkeypatch.setenv("RETARGET_CACHE_DIR", str(tmp_path))
    for f in (build.library_path, binding.load_library):
        f.cache_clear()
    try:
        assert isinstance(VTADevice("pynq", memory_bytes=DRAM, simulator="auto").sim, Simulator)
        with pytest.raises(DeviceError, match="simulator='c' but cannot run the C compiler"):
            VTADevice("pynq", memory_bytes=DRAM, simulator="c")
        # a compiler that fails: reported once, then remembered (no rebuild per device)
        monkeypatch.delenv("RETARGET_VTA_CC")
        monkeypatch.setenv("RETARGET_VTA_CFLAGS", "--no-such-flag")
        with pytest.raises(DeviceError, match="building the VTA C simulator failed"):
            VTADevice("pynq", memory_bytes=DRAM, simulator="c")
        calls = []
        monkeypatch.setattr(build.subprocess, "run", lambda *a, **k: calls.append(a))
        for f in (build.library_path, binding.load_library):
            f.cache_clear()
        assert isinstance(VTADevice("pynq", memory_bytes=DRAM).sim, Simulator) and not calls
    finally:
        for f in (build.library_path, binding.load_library):
            f.cache_clear()


# ---- the driver API ----------------------------------------------------------------------------

def driver():
    lib = binding.load_library()
    lib.VTAMemAlloc.restype = C.c_void_p
    lib.VTAMemAlloc.argtypes = [C.c_size_t, C.c_int]
    lib.VTAMemFree.argtypes = [C.c_void_p]
    lib.VTAMemGetPhyAddr.restype = C.c_uint32
    lib.VTAMemGetPhyAddr.argtypes = [C.c_void_p]
    lib.VTAMemCopyFromHost.argtypes = [C.c_void_p, C.c_void_p, C.c_size_t]
    lib.VTAMemCopyToHost.argtypes = [C.c_void_p, C.c_void_p, C.c_size_t]
    lib.VTADeviceAlloc.restype = C.c_void_p
    lib.VTADeviceFree.argtypes = [C.c_void_p]
    lib.VTADeviceRun.argtypes = [C.c_void_p, C.c_uint32, C.c_uint32, C.c_uint32]
    lib.VTACsimLastError.restype = C.c_char_p
    return lib


def test_driver_api_runs_a_program_like_the_python_simulator():
    cfg = preset("pynq")       # the driver's compiled-in core
    prog = blocked_gemm(cfg, 64, 128, 32, 2)
    image = gemm_image(cfg, prog, 6)
    lib = driver()
    dev = lib.VTADeviceAlloc()
    buf = lib.VTAMemAlloc(image.size, 1)
    phys = lib.VTAMemGetPhyAddr(buf)
    assert phys and phys % 4096 == 0
    lib.VTAMemCopyFromHost(buf, image.ctypes.data, image.size)
    stream = encode_stream(relocate(prog.insns, cfg, phys), layout_for(cfg))
    ibuf = lib.VTAMemAlloc(len(stream), 0)
    lib.VTAMemCopyFromHost(ibuf, stream, len(stream))
    assert lib.VTADeviceRun(dev, lib.VTAMemGetPhyAddr(ibuf), len(stream) // 16, 10 ** 6) == 0
    got = np.empty_like(image)
    lib.VTAMemCopyToHost(got.ctypes.data, buf, image.size)
    want = image.copy()
    Simulator(cfg, dram=want).run(prog.stream())
    assert np.array_equal(got, want)
    # a stream that would read memory no buffer holds is refused, naming the instruction
    lib.VTAMemFree(buf)
    assert lib.VTADeviceRun(dev, lib.VTAMemGetPhyAddr(ibuf), len(stream) // 16, 0) == 2
    assert b"outside the memory this task was given" in lib.VTACsimLastError()
    # and a stream that cannot finish is a deadlock (a board's timeout)
    lock = encode_stream([G(0, 0, deps=Deps(pop_prev=True)), FinishInsn()], layout_for(cfg))
    lib.VTAMemCopyFromHost(ibuf, lock, len(lock))
    assert lib.VTADeviceRun(dev, lib.VTAMemGetPhyAddr(ibuf), 2, 0) == 1
    assert b"deadlock" in lib.VTACsimLastError()
    lib.VTAMemFree(ibuf)
    lib.VTADeviceFree(dev)


MAIN_C = r"""
#include <stdio.h>
#include <string.h>
#include "vta_driver.h"
/* Only the driver API: load an image and a stream built for physical address IMAGE_PHYS, run,
 * write the image back. */
int main(int argc, char **argv) {
  static unsigned char image[IMAGE_BYTES], insns[INSN_BYTES];
  FILE *f = fopen(argv[1], "rb"); fread(image, 1, IMAGE_BYTES, f); fclose(f);
  f = fopen(argv[2], "rb"); fread(insns, 1, INSN_BYTES, f); fclose(f);
  VTADeviceHandle dev = VTADeviceAlloc();
  void *buf = VTAMemAlloc(IMAGE_BYTES, VTA_CACHED);
  if (VTAMemGetPhyAddr(buf) != IMAGE_PHYS) return 3;
  void *ibuf = VTAMemAlloc(INSN_BYTES, VTA_NOT_CACHED);
  VTAMemCopyFromHost(buf, image, IMAGE_BYTES);
  VTAMemCopyFromHost(ibuf, insns, INSN_BYTES);
  VTAFlushCache(buf, VTAMemGetPhyAddr(buf), IMAGE_BYTES);
  int rc = VTADeviceRun(dev, VTAMemGetPhyAddr(ibuf), INSN_BYTES / 16, 1000000);
  VTAInvalidateCache(buf, VTAMemGetPhyAddr(buf), IMAGE_BYTES);
  VTAMemCopyToHost(image, buf, IMAGE_BYTES);
  f = fopen(argv[3], "wb"); fwrite(image, 1, IMAGE_BYTES, f); fclose(f);
  VTAMemFree(ibuf); VTAMemFree(buf); VTADeviceFree(dev);
  return rc;
}
"""


def test_driver_api_links_into_a_program_without_python(tmp_path):
    cfg = preset("pynq")
    prog = blocked_gemm(cfg, 64, 64, 32, 1)
    image = gemm_image(cfg, prog, 7)
    phys = 4096                # the first buffer the driver hands out
    stream = encode_stream(relocate(prog.insns, cfg, phys), layout_for(cfg))
    (tmp_path / "main.c").write_text(MAIN_C)
    image.tofile(tmp_path / "image.bin")
    (tmp_path / "insns.bin").write_bytes(stream)
    src = build.HERE
    cc = build.compiler()
    subprocess.run([*cc, "-O2", "-std=c11", f"-I{src}", f"-DIMAGE_BYTES={image.size}",
                    f"-DINSN_BYTES={len(stream)}", f"-DIMAGE_PHYS={phys}", "-o",
                    str(tmp_path / "model"), str(tmp_path / "main.c"),
                    *(str(src / n) for n in build.SOURCES)], check=True, capture_output=True)
    subprocess.run([str(tmp_path / "model"), "image.bin", "insns.bin", "out.bin"],
                   cwd=tmp_path, check=True, env={}, timeout=60)
    want = image.copy()
    Simulator(cfg, dram=want).run(prog.stream())
    assert np.array_equal(np.fromfile(tmp_path / "out.bin", np.uint8), want)


@pytest.mark.parametrize("cflags", ["-O2", "-O2 -mavx2"])
def test_portable_builds_are_bit_identical(cflags, monkeypatch, tmp_path):
    """The GEMM has AVX-512 VNNI, AVX2 and plain C forms; each gives the same bytes."""
    if cflags.endswith("avx2") and "avx2" not in open("/proc/cpuinfo").read():
        pytest.skip("no AVX2 here")
    monkeypatch.setenv("RETARGET_VTA_CFLAGS", cflags)
    monkeypatch.setenv("RETARGET_CACHE_DIR", str(tmp_path))
    for f in (build.library_path, binding.load_library):
        f.cache_clear()
    try:
        for cfg_name in ("pynq", "2x16", "1x64"):
            cfg = preset(cfg_name)
            prog = blocked_gemm(cfg, 64, 128, 64, 2)
            compare_runs(cfg, prog, gemm_image(cfg, prog, 8))
    finally:
        for f in (build.library_path, binding.load_library):
            f.cache_clear()


@pytest.mark.parametrize("cfg_name", ["pynq", "2x16"])
def test_mutated_streams_agree_with_the_python_simulator(cfg_name):
    """Random bit flips in a valid program's instructions: whatever each does (runs, faults,
    deadlocks, strays out of DRAM), both simulators agree on the outcome, the instruction and
    the state; the C one never crashes."""
    cfg = preset(cfg_name)
    prog = blocked_gemm(cfg, 64, 64, 32, 2)
    image = gemm_image(cfg, prog, 10)
    good = np.frombuffer(prog.stream(), np.uint8)
    rng = np.random.default_rng(11)
    outcomes = set()
    for _ in range(80):
        raw = good.copy()
        for bit in rng.integers(0, raw.size * 8, rng.integers(1, 4)):
            raw[bit // 8] ^= 1 << (bit % 8)
        py, cs = both(cfg, image)
        results = []
        for sim in (py, cs):
            try:
                results.append(sim.run(raw.tobytes()))
            except SimulationError as e:
                results.append((type(e), e.index))
        assert results[0] == results[1], raw
        assert_same_state(py, cs)
        outcomes.add(results[0][0].__name__ if isinstance(results[0], tuple) else "ok")
    assert {"ok", "SimulationError"} <= outcomes, outcomes


EMULATED_RUN = """
import numpy as np
from retarget.targets.vta.builder import StreamBuilder
from retarget.targets.vta.config import preset
from retarget.targets.vta.csim import binding, build
from retarget.targets.vta.isa import MemType
from retarget.targets.vta.sim import Simulator
cfg = preset("pynq")
b = StreamBuilder(cfg)
b.alloc("x", (4, 2, 1, 16)); b.alloc("w", (2, 2, 16, 16)); b.alloc("y", (4, 2, 1, 16))
mac = b.uop_kernel([(j, k, j * 2 + k) for j in range(2) for k in range(2)], [(4, 2, 2)])
b.load_2d(MemType.INP, 0, "x", 0, 2, 4, 2); b.load_2d(MemType.WGT, 0, "w", 0, 2, 2, 2)
b.dep_push(1, 2); b.dep_pop(1, 2)
b.gemm(b.uop_kernel([(j, 0, 0) for j in range(2)], [(4, 2, 0)]), reset=True); b.gemm(mac)
b.dep_push(2, 3); b.dep_pop(2, 3); b.store_2d(0, "y", 0, 2, 4, 2)
p = b.finish()
rng = np.random.default_rng(0)
image = p.dram_image({n: rng.integers(-128, 128, p.buffers[n].shape).astype(np.int8) for n in "xw"})
a, c = image.copy(), image.copy()
Simulator(cfg, dram=a).run(p.stream())
binding.CSimulator(cfg, dram=c).run(p.stream())
print(" ".join(build.flag_sets()[0]), np.array_equal(a, c))
"""


@pytest.mark.skipif(shutil.which("qemu-x86_64") is None or platform.machine() != "x86_64",
                    reason="qemu-x86_64 is not installed (apt-get install qemu-user)")
def test_runs_on_an_emulated_avx2_cpu_whatever_cpu_compiles(tmp_path):
    """The process runs on an emulated Haswell (AVX2, no AVX-512) while gcc runs natively: the
    library is built for what the process can execute (with -march=native it would die of an
    illegal instruction), and gives the Python simulator's bytes."""
    python = os.path.realpath(sys.executable)
    env = dict(os.environ, RETARGET_CACHE_DIR=str(tmp_path),
               PYTHONPATH=str(Path(binding.__file__).resolve().parents[4]))
    env.pop("RETARGET_VTA_CFLAGS", None)
    r = subprocess.run(["qemu-x86_64", "-cpu", "Haswell", python, "-c", EMULATED_RUN], env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["-O3", "-mavx2", "-mfma", "True"]
