#!/usr/bin/env bash
# Set up (editable install with the test and torch extras), check the package layers
# (import-linter's contract in pyproject.toml; docs/architecture.md) and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --disable-pip-version-check -e ".[test,torch]"
# QEMU's user-mode emulator runs the onnxruntime comparisons again on an emulated AVX2 CPU
# (tests/frontend/test_ort_avx2_emulated.py); without it those two tests are skipped.
if ! command -v qemu-x86_64 >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    (apt-get update -qq && apt-get install -y -qq qemu-user) >/dev/null 2>&1 \
      || echo "note: could not install qemu-user; the AVX2-emulation tests will be skipped"
  else
    echo "note: qemu-x86_64 not found (apt-get install qemu-user); the AVX2-emulation tests will be skipped"
  fi
fi
lint-imports --no-cache
# One pytest worker per core (pytest-xdist): most tests are single-threaded Python, and the
# suite would otherwise leave all but one core idle. Pass -n 0 to run in one process.
python3 -m pytest -n auto "$@"
