"""Where the generated C of a zoo network spends its time, call by call: the `c` target's
model.c with a clock read after every call of model_run, built as a standalone program, run
`--runs` times; each call keeps its best time.

    python benchmarks/profile_aot_c.py --net mobilenet_v1 [--size 224] [--runs 20]
                                       [--threads 1] [--top 25] [--cflags "-O3 ..."]
    python benchmarks/profile_aot_c.py --net resnet18 --threads 2 --compare 4 --runs 10
    python benchmarks/profile_aot_c.py --net mobilenet_v1 --against "-O3 ... -DRT_FMA=0"

Prints the slowest calls (ms, share of the sum, the call's comment from model.c: op, node and
what is fused into it) and the sum per leading op. The sum of best times is a lower bound of
one inference (no run has every call at its best), which makes it steadier than a whole run
on a shared machine; compare variants in alternation, and report the load average. The best
whole run is printed beside it: with `--threads 2` the difference is what the calls lose
between and around each other (waiting at each call's barrier for a thread the machine has
descheduled, waking the team), not inside them. The environment is passed on, so
`OMP_WAIT_POLICY=passive` or `GOMP_SPINCOUNT=...` before the command measures libgomp's
waiting policies. `--compare ROUNDS` alternates one thread and `--threads` on the same build
and lists the calls that lose most against a perfect split, the speedup per routine, and the
sums against the whole runs. `--against CFLAGS` alternates the build with `--cflags` (A)
and one with CFLAGS (B) `--rounds` times and lists the calls that differ most.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import tempfile
from pathlib import Path

import retarget
from retarget import zoo
from retarget.frontend.onnx import import_model

_TIMER = r'''
#include <time.h>
static double rt_prof_best[4096], rt_prof_last;
static double rt_prof_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}
static void rt_prof_mark(int i)   /* call i-1 ended now */
{
    double now = rt_prof_now();
    if (i > 0 && (rt_prof_best[i - 1] == 0 || now - rt_prof_last < rt_prof_best[i - 1]))
        rt_prof_best[i - 1] = now - rt_prof_last;
    rt_prof_last = now;
}
double rt_prof_get(int i) { return rt_prof_best[i]; }
double rt_prof_now_ms(void) { return rt_prof_now(); }
'''

_MAIN = r'''
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "model.h"
double rt_prof_get(int i);
double rt_prof_now_ms(void);
static void *zeroed(size_t n)
{
    void *p = aligned_alloc(64, (n + 63) / 64 * 64);
    return p ? memset(p, 0, (n + 63) / 64 * 64) : p;
}
int main(int argc, char **argv)
{
    int runs = atoi(argv[1]), calls = atoi(argv[2]), r, i;
    double whole = 0, t0, t;
    FILE *f = fopen("weights.bin", "rb");
    void *w = zeroed(MODEL_WEIGHTS_BYTES), *a = zeroed(MODEL_ARENA_BYTES);
    float *x = zeroed(MODEL_INPUT_0_BYTES), *y = zeroed(MODEL_OUTPUT_0_BYTES);
    const void *in[1] = {x};
    void *out[1] = {y};
    if (!f || fread(w, 1, MODEL_WEIGHTS_BYTES, f) != MODEL_WEIGHTS_BYTES) return 1;
    for (i = 0; i < (int)(MODEL_INPUT_0_BYTES / 4); i++) x[i] = (float)(i % 7) * 0.1f;
    for (r = 0; r < runs; r++) {
        t0 = rt_prof_now_ms();
        model_run(w, a, in, out);
        t = rt_prof_now_ms() - t0;
        if (r == 0 || t < whole) whole = t;
    }
    for (i = 0; i < calls; i++) printf("%.5f\n", rt_prof_get(i));
    printf("%.5f\n", whole);
    return 0;
}
'''


def instrument(model_c: str) -> tuple[str, list[str], list[str]]:
    """model.c with rt_prof_mark(i) before each commented call of model_run and before its
    return; the calls' comments; what each call runs (its routine, else the comment's op)."""
    head, body = model_c.split("int model_run(", 1)
    lines, labels, kinds = [], [], []
    body_lines = body.split("\n")
    for i, line in enumerate(body_lines):
        m = re.match(r"\s+/\* (.*) \*/$", line)
        if m:
            lines.append(f"    rt_prof_mark({len(labels)});")
            labels.append(m.group(1))
            call = re.match(r"\s+(rt_\w+)\(", body_lines[i + 1] if i + 1 < len(body_lines) else "")
            kinds.append(call.group(1) if call else m.group(1).split(" ")[0])
        if line.startswith("    return 0;"):
            lines.append(f"    rt_prof_mark({len(labels)});")
        lines.append(line)
    head = head.replace('#include "model.h"', '#include "model.h"\n' + _TIMER, 1)
    return head + "int model_run(" + "\n".join(lines), labels, kinds


def profile(src: Path, threads: int, runs: int, calls: int,
            exe: str = "prof") -> tuple[list[float], float]:
    """The built ./prof in `src` on `threads` threads: each call's best and the best whole run."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    out = subprocess.run([f"./{exe}", str(runs), str(calls)], cwd=src, env=env,
                         check=True, capture_output=True, text=True).stdout
    *times, whole = [float(t) for t in out.split()]
    return times, whole


def by_kind(times: list[float], kinds: list[str]) -> dict[str, float]:
    """Summed times per routine (or op, for printed nests), largest first."""
    sums: dict[str, float] = {}
    for t, kind in zip(times, kinds):
        sums[kind] = sums.get(kind, 0.0) + t
    return dict(sorted(sums.items(), key=lambda kv: -kv[1]))


def report(times: list[float], whole: float, labels: list[str], kinds: list[str],
           threads: int, runs: int, top: int) -> None:
    total = sum(times)
    for t, label in sorted(zip(times, labels), reverse=True)[:top]:
        print(f"{t:8.3f} ms {100 * t / total:5.1f} %  {label}")
    print(f"sum of best call times {total:.2f} ms ({threads} thread(s), best of {runs}); "
          "by routine or op: "
          + ", ".join(f"{k} {v:.2f}" for k, v in by_kind(times, kinds).items()))
    print(f"best whole run {whole:.2f} ms (the clock reads included): "
          f"{whole - total:+.2f} ms beyond the sum of best calls")


def compare(one: tuple[list[float], float], many: tuple[list[float], float], n: int,
            labels: list[str], kinds: list[str], top: int) -> None:
    """One thread against `n`: the calls furthest above 1/n of their one-thread time, the
    speedup per routine, and the sums against the whole runs."""
    (t1, w1), (tn, wn) = one, many
    rows = sorted(zip(t1, tn, labels), key=lambda r: -(r[1] - r[0] / n))
    print(f"calls furthest above 1/{n} of their one-thread time (ms lost = {n}-thread time - "
          f"one-thread time / {n}):")
    for a, b, label in rows[:top]:
        print(f"  1: {a:7.3f}  {n}: {b:7.3f}  x{a / b:4.2f}  lost {b - a / n:6.3f}  {label}")
    k1, kn = by_kind(t1, kinds), by_kind(tn, kinds)
    print("by routine or op: " + ", ".join(f"{k} {v:.2f} -> {kn[k]:.2f} (x{v / kn[k]:.2f})"
                                           for k, v in k1.items() if kn[k] > 0))
    print(f"sum of best calls {sum(t1):.2f} -> {sum(tn):.2f} ms (x{sum(t1) / sum(tn):.2f}); "
          f"best whole run {w1:.2f} -> {wn:.2f} ms (x{w1 / wn:.2f})")


def against(a: tuple[list[float], float], b: tuple[list[float], float], labels: list[str],
            kinds: list[str], top: int) -> None:
    """Build A (--cflags) against build B (--against): the calls that differ most, the sum
    per routine, and the sums and whole runs."""
    (ta, wa), (tb, wb) = a, b
    rows = sorted(zip(ta, tb, labels), key=lambda r: -abs(r[1] - r[0]))
    print("calls that differ most (ms; B / A):")
    for x, y, label in rows[:top]:
        print(f"  A: {x:7.3f}  B: {y:7.3f}  x{y / x:4.2f}  {label}")
    ka, kb = by_kind(ta, kinds), by_kind(tb, kinds)
    print("by routine or op (A -> B): " + ", ".join(f"{k} {v:.3f} -> {kb[k]:.3f}"
                                                   for k, v in ka.items()))
    print(f"sum of best calls {sum(ta):.2f} -> {sum(tb):.2f} ms; best whole run {wa:.2f} -> "
          f"{wb:.2f} ms")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--net", default="mobilenet_v1")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--compare", type=int, default=0, metavar="ROUNDS",
                    help="instead: one thread against --threads, alternated ROUNDS times "
                         "(each call keeps its best over all rounds)")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--cflags", default="-O3 -march=native -std=c99")
    ap.add_argument("--against", metavar="CFLAGS",
                    help="instead: the build with --cflags (A) against one with these (B), "
                         "alternated --rounds times, each call's best over all rounds")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    graph = import_model(zoo.build(args.net, size=args.size))
    with tempfile.TemporaryDirectory() as tmp:
        module = retarget.compile(graph, "c", config={"build_dir": tmp})
        src = Path(tmp) / "c_0"
        text, labels, kinds = instrument((src / "model.c").read_text())
        (src / "prof.c").write_text(text)
        (src / "profmain.c").write_text(_MAIN)
        for exe, cflags in (("prof", args.cflags), ("prof_b", args.against)):
            if cflags is not None:
                subprocess.run(["gcc", *cflags.split(), "-D_GNU_SOURCE", "-fopenmp", "-o", exe,
                                "prof.c", "profmain.c", "-lm"], cwd=src, check=True)
        if args.against is not None:
            best: dict[str, tuple[list[float], float]] = {}
            for _ in range(args.rounds):
                for exe in ("prof", "prof_b"):
                    t, w = profile(src, args.threads, args.runs, len(labels), exe)
                    if exe in best:
                        t, w = [min(a, b) for a, b in zip(best[exe][0], t)], min(best[exe][1], w)
                    best[exe] = (t, w)
            against(best["prof"], best["prof_b"], labels, kinds, args.top)
        elif not args.compare:
            times, whole = profile(src, args.threads, args.runs, len(labels))
            report(times, whole, labels, kinds, args.threads, args.runs, args.top)
        else:
            best: dict[int, tuple[list[float], float]] = {}
            for _ in range(args.compare):
                for n in (1, args.threads):
                    t, w = profile(src, n, args.runs, len(labels))
                    if n in best:
                        t, w = [min(a, b) for a, b in zip(best[n][0], t)], min(best[n][1], w)
                    best[n] = (t, w)
            compare(best[1], best[args.threads], args.threads, labels, kinds, args.top)
        module.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
