"""The package layers (pyproject.toml's import-linter contract, docs/architecture.md) hold, and
the checker CI runs would catch a change that breaks them.

The second test copies the package to a temporary directory, adds one import that points up
the stack, inside a function (the kind of import that used to hide cycles), and requires
`lint-imports` to fail on the copy, naming it; the same run on the unmodified copy passes.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("importlinter")

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "src" / "retarget"
# A function-level import from the lowest layers (ir) of the highest one (cli).
BAD_IMPORT = '''

def _reaches_up():
    from ..cli import main
    return main
'''


def lint(src: Path) -> subprocess.CompletedProcess:
    """`lint-imports` with the repository's contract, on the package found under `src`."""
    code = "import sys; from importlinter.cli import lint_imports_command; lint_imports_command()"
    return subprocess.run([sys.executable, "-c", code, "--config", str(REPO / "pyproject.toml"),
                           "--no-cache"], cwd=src, capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin"})


def test_the_package_keeps_its_layers():
    done = lint(PACKAGE.parent)
    assert done.returncode == 0, done.stdout + done.stderr


def test_an_import_up_the_stack_breaks_the_contract(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(PACKAGE, src / "retarget", ignore=shutil.ignore_patterns("__pycache__"))
    assert lint(src).returncode == 0
    with open(src / "retarget" / "ir" / "types.py", "a") as f:
        f.write(BAD_IMPORT)
    done = lint(src)
    assert done.returncode != 0
    assert "retarget.ir is not allowed to import retarget.cli" in done.stdout, done.stdout
