"""Coverage of ONNX's backend node tests on retarget's CPU reference executor.

Prints how many of ONNX's node test cases pass, fail, and are unsupported (ops retarget does
not register, dtypes it lacks, features rejected with UnsupportedOpError), the unsupported ops
by number of cases, and every failure with its first error line.

    python benchmarks/onnx_backend_coverage.py [-v]   (-v: list every unsupported case's reason)
"""
from __future__ import annotations

import argparse
import collections
import importlib.util
import logging
import sys
from pathlib import Path

_TESTS = Path(__file__).resolve().parent.parent / "tests" / "ops" / "test_onnx_backend.py"


def _load_runner():
    # The case classification and runner live with the test so both always agree.
    spec = importlib.util.spec_from_file_location("onnx_backend_runner", _TESTS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-v", "--verbose", action="store_true", help="list unsupported cases")
    args = ap.parse_args(argv)
    logging.disable(logging.WARNING)  # the importer warns about opsets newer than it was tested on
    runner = _load_runner()
    cases = runner.backend_cases()
    passed, failed, unsupported = [], [], []
    missing_ops: collections.Counter = collections.Counter()
    for case in cases:
        reason = runner.classify(case)
        if reason is not None:
            unsupported.append((case.name, reason))
            if reason.startswith("op "):
                missing_ops.update(reason[3:].split(", "))
            else:
                missing_ops["(rejected feature/dtype)"] += 1
            continue
        try:
            runner.run_case(case)
        except runner.UnsupportedOpError as e:  # rejected only when run, not by the shape rule
            unsupported.append((case.name, f"rejected at run time: {e}"))
            missing_ops["(rejected at run time)"] += 1
        except Exception as e:  # report every kind of failure, keep going
            first = (str(e).strip().splitlines() or [""])[0]
            failed.append((case.name, f"{type(e).__name__}: {first[:160]}"))
        else:
            passed.append(case.name)
    known = set(runner.KNOWN_FAILURES)
    print(f"ONNX backend node cases: {len(cases)}")
    print(f"  passed      {len(passed):5d}")
    print(f"  failed      {len(failed):5d}  ({sum(n in known for n, _ in failed)} of them known)")
    print(f"  unsupported {len(unsupported):5d}")
    print(f"  supported pass rate: {len(passed) / max(len(passed) + len(failed), 1):.1%}")
    print("\nunsupported, by op (cases):")
    print("  " + ", ".join(f"{op} ({n})" for op, n in sorted(missing_ops.items())))
    if args.verbose:
        print("\nunsupported cases:")
        for name, reason in unsupported:
            print(f"  {name}: {reason[:200]}")
    if failed:
        print("\nfailures:")
        for name, msg in failed:
            print(f"  {name}{' [known]' if name in known else ''}: {msg}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
