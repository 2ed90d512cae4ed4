"""Where the time of a zoo network's generated C goes, call by call: the `c` target's project
(targets.c.generate_c, float or int8) with every call of model_run timed by clock_gettime, run
on one thread, the best of --runs runs per call after one warm-up, the slowest calls first.

    python benchmarks/profile_c_layers.py vgg16 [--int8] [--size 224] [--runs 5] [--top 25]
                                          [--cflags "-O3 -march=native -std=c99"]

The instrumented model.c is the generated one with a timer around each call (model_run writes
one `/* node */` comment before each call and a blank line after it: the script refuses a
model.c without them); the calls themselves are unchanged. For a machine shared with other
work, compare calls of one run rather than runs.
"""
from __future__ import annotations

import argparse
import re
import subprocess
import tempfile
import warnings
from pathlib import Path

import numpy as np

import retarget
from retarget import zoo
from retarget.frontend.onnx import import_model
from retarget.passes import rewrite_for
from retarget.targets.c import CConfig, CTarget, generate_c

TIMER = """#include <time.h>
static double prof_best[PROF_CALLS], prof_now_t0;
static double prof_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}
#define PROF_BEGIN prof_now_t0 = prof_now();
#define PROF_END(i) { double d = prof_now() - prof_now_t0; \\
    if (prof_best[i] == 0 || d < prof_best[i]) prof_best[i] = d; }
double prof_call_ms(int i) { return 1e3 * prof_best[i]; }
int prof_calls(void) { return PROF_CALLS; }
"""

DRIVER = """#include <stdio.h>
#include <stdlib.h>
#include "model.h"
double prof_call_ms(int i);
int prof_calls(void);
int main(int argc, char **argv)
{
    int runs = atoi(argv[1]), r, i;
    unsigned char *raw = malloc(MODEL_ARENA_BYTES + 64);
    void *w = malloc(MODEL_WEIGHTS_BYTES + 1), *a = raw + (64 - (size_t)raw % 64) % 64;
    const void *in[MODEL_NUM_INPUTS + 1];
    void *out[MODEL_NUM_OUTPUTS + 1];
    size_t in_bytes[] = {MODEL_INPUT_0_BYTES}, out_bytes[] = {MODEL_OUTPUT_0_BYTES};
    FILE *f = fopen("weights.bin", "rb");
    if (!f || fread(w, 1, MODEL_WEIGHTS_BYTES, f) != MODEL_WEIGHTS_BYTES) return 2;
    fclose(f);
    in[0] = calloc(in_bytes[0], 1);
    out[0] = malloc(out_bytes[0]);
    for (r = 0; r <= runs; r++)          /* run 0: the warm-up, whose times are dropped */
        if (model_run(w, a, in, out)) return 3;
    for (i = 0; i < prof_calls(); i++) printf("%.4f\\n", prof_call_ms(i));
    return 0;
}
"""


def instrument(model_c: str) -> tuple[str, list[str]]:
    """model.c with a timer around every call of model_run, and the calls' comments."""
    head, sep, body = model_c.partition("int model_run(")
    if not sep:
        raise SystemExit("model.c has no model_run")
    out, names, open_call = [], [], False
    for line in body.split("\n"):
        comment = re.fullmatch(r"    /\* (.*) \*/", line)
        if comment and not open_call:
            names.append(comment.group(1))
            out += [line, "    PROF_BEGIN"]
            open_call = True
            continue
        if open_call and (not line.strip() or line.startswith("    return")):
            out.append(f"    PROF_END({len(names) - 1})")
            open_call = False
        out.append(line)
    if not names or open_call:
        raise SystemExit("model_run's calls are not one comment, the call, a blank line each")
    return (head + f"#define PROF_CALLS {len(names)}\n" + TIMER + sep + "\n".join(out),
            names)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("net")
    ap.add_argument("--int8", action="store_true", help="the network quantised (per channel)")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--cflags", default="-O3 -march=native -std=c99")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    graph = import_model(zoo.build(args.net, size=args.size))
    if args.int8:
        x = np.random.default_rng(0).standard_normal(graph.inputs[0].type.shape)
        graph = retarget.quantize(graph, [{graph.inputs[0].name: x.astype(np.float32)}],
                                  per_channel=True)
    cfg = CConfig(openmp=False)
    project = generate_c(rewrite_for(graph, CTarget(cfg)), cfg)
    with tempfile.TemporaryDirectory() as d:
        directory = project.write(Path(d) / "model")
        text, names = instrument(project.sources["model.c"])
        (directory / "model.c").write_text(text)
        (directory / "profile_main.c").write_text(DRIVER)
        subprocess.run(["gcc", *args.cflags.split(), "-D_POSIX_C_SOURCE=200809L", "-o",
                        "profile", "profile_main.c",
                        "model.c", "-lm"], cwd=directory, check=True)
        run = subprocess.run(["./profile", str(args.runs)], cwd=directory, check=True,
                             capture_output=True, text=True)
    ms = [float(v) for v in run.stdout.split()]
    print(f"{args.net} {'int8' if args.int8 else 'float'}: calls sum to {sum(ms):.2f} ms "
          f"(best of {args.runs} each, one thread)")
    for t, name in sorted(zip(ms, names), reverse=True)[:args.top]:
        print(f"{t:8.3f}  {100 * t / sum(ms):5.1f}%  {name[:110]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
