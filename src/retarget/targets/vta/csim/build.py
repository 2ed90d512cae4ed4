"""Building the C simulator's shared library with the system C compiler, cached by source hash.

The library is built once per distinct (sources, compiler command, machine) into
`$RETARGET_CACHE_DIR/vta-csim/<hash>/libvtacsim.so` (default cache directory:
`$XDG_CACHE_HOME/retarget`, else `~/.cache/retarget`), written under a temporary name and
renamed into place, so concurrent processes never load a half-written file. The compiler is
`$RETARGET_VTA_CC` (words split as a shell would), else `cc`, else `gcc`; it is asked for `-O3`
with the vector extensions *this process* can execute, as NumPy detected them at run time
(AVX-512 VNNI or AVX2 on x86; the GEMM has a form for each), and, should that fail, for plain
`-O2`; `$RETARGET_VTA_CFLAGS` replaces both (e.g. "-O2" for a portable build). Not
`-march=native`: the compiler may run on another CPU than the process that loads the library
(an emulated CPU, a cache shared between machines), and the cache key includes the flags.
"""
from __future__ import annotations

import hashlib
import os
import platform
import shlex
import shutil
import subprocess
import tempfile
from functools import lru_cache
from pathlib import Path

from ....errors import TargetError

HERE = Path(__file__).resolve().parent
SOURCES = ("vta_csim.c", "vta_driver_sim.c")
HEADERS = ("vta_csim.h", "vta_driver.h")
LIBRARY = "libvtacsim.so"
CC_ENV = "RETARGET_VTA_CC"
CACHE_ENV = "RETARGET_CACHE_DIR"
CFLAGS_ENV = "RETARGET_VTA_CFLAGS"
# x86 extensions by NumPy's runtime CPU feature names: what the GEMM's forms need, best first
X86_FLAGS = ((("AVX512F", "AVX512BW", "AVX512VNNI", "AVX2", "FMA3"),
              ("-mavx2", "-mfma", "-mavx512f", "-mavx512bw", "-mavx512vnni")),
             (("AVX2", "FMA3"), ("-mavx2", "-mfma")))
COMMON_FLAGS = ("-std=c11", "-fPIC", "-shared")
BUILD_TIMEOUT_S = 300


class CSimUnavailable(TargetError):
    """The C simulator cannot be built here (no C compiler, or the build failed)."""


def cache_root() -> Path:
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "retarget"


def compiler() -> list[str]:
    """The C compiler command; CSimUnavailable when there is none."""
    if os.environ.get(CC_ENV):
        return shlex.split(os.environ[CC_ENV])
    for name in ("cc", "gcc"):
        if shutil.which(name):
            return [name]
    raise CSimUnavailable(f"no C compiler found (cc or gcc on PATH, or ${CC_ENV}) to build the "
                          f"VTA C simulator")


def source_paths() -> list[Path]:
    return [HERE / n for n in SOURCES + HEADERS]


def cpu_features() -> dict[str, bool]:
    """The CPU features NumPy found at run time (by CPUID: the CPU this process runs on)."""
    try:
        from numpy._core._multiarray_umath import __cpu_features__
    except ImportError:   # NumPy < 2
        from numpy.core._multiarray_umath import __cpu_features__
    return dict(__cpu_features__)


def vector_flags() -> tuple[str, ...]:
    """Compiler flags for the best vector extensions this process can run (none off x86)."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return ()
    features = cpu_features()
    for needed, flags in X86_FLAGS:
        if all(features.get(f) for f in needed):
            return flags
    return ()


def flag_sets() -> tuple[tuple[str, ...], ...]:
    if os.environ.get(CFLAGS_ENV) is not None:
        return (tuple(shlex.split(os.environ[CFLAGS_ENV])),)
    return (("-O3", *vector_flags()), ("-O2",))


def _key(cc: list[str]) -> str:
    h = hashlib.sha256()
    for p in source_paths():
        h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    h.update(repr((cc, flag_sets(), COMMON_FLAGS, platform.machine(), platform.system())).encode())
    return h.hexdigest()[:20]


# Builds that failed in this process, by key: "auto" devices fall back to the Python simulator
# at once instead of re-running a failing compiler for every device.
_FAILED: dict[str, CSimUnavailable] = {}


@lru_cache(maxsize=None)
def library_path() -> Path:
    """The built library, compiling it on first use (cached on disk across processes)."""
    cc = compiler()
    key = _key(cc)
    if key in _FAILED:
        raise _FAILED[key]
    try:
        return _build(cc, cache_root() / "vta-csim" / key / LIBRARY)
    except CSimUnavailable as e:
        _FAILED[key] = e
        raise


def _build(cc: list[str], target: Path) -> Path:
    if target.is_file():
        return target
    errors = []
    for flags in flag_sets():
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".build-", suffix=".so", dir=target.parent)
        except OSError as e:
            raise CSimUnavailable(f"cannot write the VTA C simulator's build cache "
                                  f"{target.parent} ({e}); set ${CACHE_ENV}") from None
        os.close(fd)
        cmd = [*cc, *flags, *COMMON_FLAGS, "-o", tmp, *(str(HERE / n) for n in SOURCES)]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as e:
            os.unlink(tmp)
            raise CSimUnavailable(f"cannot run the C compiler {shlex.join(cc)!r} to build the "
                                  f"VTA C simulator: {e}") from None
        if done.returncode == 0:
            os.replace(tmp, target)
            return target
        os.unlink(tmp)
        errors.append(f"`{shlex.join(cmd)}`: {(done.stderr or done.stdout).strip()[-1500:]}")
    raise CSimUnavailable("building the VTA C simulator failed:\n" + "\n".join(errors))
