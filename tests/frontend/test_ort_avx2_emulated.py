"""The onnxruntime comparisons again, on an AVX2 CPU without VNNI: the kind of machine where
onnxruntime's integer kernels saturate (OrtIntegerArithmetic) and NumPy's SIMD loops and
OpenBLAS take their AVX2 paths. QEMU's user-mode emulator with `-cpu Haswell` reports exactly
that CPU to the Python process under test, so a comparison that holds only on the machine that
wrote it fails here, on any host. (A test that assumed onnxruntime's exact VNNI arithmetic
failed this way on a real AVX2 EPYC, and fails the same way under this emulation.)

Needs `qemu-x86_64` (Debian's qemu-user); CI installs it and sets RETARGET_REQUIRE_QEMU so a
missing emulator fails there instead of skipping. Subprocesses the emulated tests start (a
BYOC compiler, gcc) run natively: only the test process itself sees the Haswell CPU."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
QEMU = shutil.which("qemu-x86_64")
UNDER_EMULATION = "RETARGET_UNDER_EMULATION"

# every test file that compares with onnxruntime's integer kernels or compares two float paths
# bit for bit
EMULATED = [
    "tests/frontend/test_ort_integer_arithmetic.py",
    "tests/quantize/test_onnx_quantized_multiplier.py",
    "tests/quantize/test_onnx_quantized.py",
    "tests/examples/test_toy_byoc.py",
]

pytestmark = [
    pytest.mark.skipif(os.environ.get(UNDER_EMULATION) == "1",
                       reason="already running under the emulator"),
    pytest.mark.skipif(QEMU is None and not os.environ.get("RETARGET_REQUIRE_QEMU"),
                       reason="qemu-x86_64 is not installed (apt-get install qemu-user)"),
]


def _emulated(*args: str, timeout: float) -> subprocess.CompletedProcess:
    if QEMU is None:
        pytest.fail("RETARGET_REQUIRE_QEMU is set but qemu-x86_64 is not installed")
    # the interpreter binary itself (not a wrapper script), so qemu can load it
    python = os.path.realpath(sys.executable)
    env = dict(os.environ, **{UNDER_EMULATION: "1", "PYTHONPATH": str(ROOT / "src")})
    return subprocess.run([QEMU, "-cpu", "Haswell", python, *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_the_emulated_cpu_gets_onnxruntimes_saturating_kernels():
    # the emulation is only worth something if onnxruntime really takes its AVX2 path there
    r = _emulated("-c", "from retarget.frontend.ort_check import ort_integer_arithmetic as a; "
                        "print(a().exact, a().probe)", timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["False", "32767"]


def test_onnxruntime_comparisons_hold_on_an_avx2_cpu():
    r = _emulated("-m", "pytest", "-q", "-p", "no:cacheprovider", *EMULATED, timeout=1800)
    tail = "\n".join(r.stdout.splitlines()[-40:])
    assert r.returncode == 0, f"under qemu -cpu Haswell:\n{tail}\n{r.stderr[-2000:]}"
