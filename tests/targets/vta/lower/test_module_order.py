"""vta's lowering modules import each other in one direction, at module level: the layer
lowerings (conv.py, alu_layers.py) take the schedule they are given, the cycle model (tuning.py)
lowers candidates to time them, and choose.py, above both, picks a schedule for a caller that
gives none. No import inside a function dodges a cycle."""
import ast
from pathlib import Path

import retarget.targets.vta.lower as lower

LOWER = Path(lower.__file__).parent


def imports(path: Path) -> tuple[list[str], list[str]]:
    """(modules of this package the file imports, 'function: module' of imports inside defs)."""
    tree = ast.parse(path.read_text())
    inner = []
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            inner += [f"{fn.name}: {ast.unparse(n)}" for n in ast.walk(fn)
                      if isinstance(n, (ast.Import, ast.ImportFrom))]
    local = []
    for n in ast.walk(tree):
        if isinstance(n, ast.ImportFrom) and n.level == 1:
            local += [n.module] if n.module else [a.name for a in n.names]
    return local, inner


def test_no_import_inside_a_function():
    found = {p.name: imports(p)[1] for p in LOWER.glob("*.py")}
    assert {k: v for k, v in found.items() if v} == {}


def test_lowering_comes_before_the_cycle_model_and_the_choice():
    for name in ("conv.py", "alu_layers.py", "walk.py", "schedule.py"):
        local, _ = imports(LOWER / name)
        assert not {"tuning", "choose"} & set(local), (name, local)
    local, _ = imports(LOWER / "tuning.py")
    assert "choose" not in local
