"""`retarget deploy ARTIFACT -o DIR`: a compiled module (target vta, compiled with `--host c`)
as a self-contained C project whose `make` builds one program, `DIR/model`, that runs the
whole network without Python (docs/deploy.md).

    DIR/main.c          the schedule: every region in order, over one static arena
    DIR/rt_deploy.[ch]  .npy input / output, gather tables, VTA regions via the driver API
    DIR/host/<region>/  each host region's generated C (model.c, model.h), as --host c built it
    DIR/host_<region>.c its model_run renamed <region>_run, so all regions link together
    DIR/vta/            vta_driver.h and retarget's C simulator implementing it (the default
                        driver; `make VTA_DRIVER=...` links another)
    DIR/model.bin       every constant (host weights, VTA images and streams, tables),
                        linked into the program by blob.c (.incbin)
    DIR/Makefile

The steps of main.c:
- a host region compiled as C: one call of its model_run (weights in the blob, a shared
  scratch arena for its intermediates);
- a host node the c host refused that only moves data (a Slice, a Gather of int32, ...; the
  int8 Gather / Transpose of vta's window packing run as C in their host region): one gather
  table computed by running the node's own definition on element numbers;
- a VTA region: deploy/vta.py.
Values that cross steps live in one arena at offsets from passes/memory_plan.py (values
whose lifetimes do not overlap share bytes). Nothing is compiled or run here: this writes
files only.
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import InputError, TargetError, UnsupportedOpError
from ..ir.graph import Node, Value
from ..loopnest.c_printer import c_comment, c_identifier
from ..targets.aot.memory_plan import Step, plan_memory
from ..ops.reference import run_node
from ..targets.vta.csim import build as csim_build
from .blob import Blob, index_map, numbered
from .vta import VTARegionCode, driver_defines, vta_region

HERE = Path(__file__).resolve().parent
RUNTIME = ("rt_deploy.c", "rt_deploy.h")
# Host nodes that only move elements (one non-constant input, constant parameters): the
# deployed program runs them as a gather table.
MOVEMENT_OPS = frozenset({"Gather", "Transpose", "Reshape", "Flatten", "Squeeze", "Unsqueeze",
                          "Identity", "Slice"})


@dataclass(frozen=True, slots=True)
class HostCall:
    region: str
    function: str
    weights_offset: int
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class GatherStep:
    node: str
    source: str
    dest: str
    count: int
    elem: int
    map_offset: int


# Targets whose regions this package writes as C (vta.py): a module compiled for one of them
# (with --host c) is deployed.
DEPLOYED_TARGETS: tuple[str, ...] = ("vta",)


def deployable(target: str) -> bool:
    """Whether `deploy` writes a program for a module compiled for the target named `target`
    (several comma-separated targets are not deployed)."""
    return target in DEPLOYED_TARGETS


def deploy(module, directory: str | Path) -> Path:
    """Write the C project of `module` into `directory`; returns its path."""
    target = module.target.name
    if not deployable(target):
        raise UnsupportedOpError(f"retarget deploy: target {target!r} is not supported yet; "
                                  f"only {', '.join(DEPLOYED_TARGETS)} modules (compiled with "
                                  f"--host c) are deployed")
    if module.host is None:
        raise InputError("retarget deploy: the module's CPU regions run on the NumPy "
                         "reference; compile it with --host c so they are generated C")
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    blob = Blob()
    steps: list = []
    values: dict[str, Value] = {}
    for region in module.regions:
        if region.target != "cpu":
            code = vta_region(region.name, module.kernels[region.name], blob)
            steps.append(code)
            _record(values, region.inputs + region.outputs)
        elif region.name in module.host.kernels:
            steps.append(_host_call(out, region, module.host.kernels[region.name], blob))
            _record(values, region.inputs + region.outputs)
        else:
            for node in region.nodes:
                steps.append(_gather_step(node, blob))
                _record(values, [v for v in node.inputs + node.outputs
                                 if v is not None and not v.is_const])
    plan = _plan(module.graph, steps, values)
    scratch = max([k.program.arena_bytes for k in module.host.kernels.values()] or [0])
    (out / "model.bin").write_bytes(blob.tobytes())
    (out / "blob.c").write_text(BLOB_C, encoding="utf-8")
    (out / "main.c").write_text(_main_c(module, steps, plan, scratch), encoding="utf-8")
    (out / "Makefile").write_text(_makefile(module, steps), encoding="utf-8")
    for name in RUNTIME:
        shutil.copyfile(HERE / name, out / name)
    (out / "vta").mkdir(exist_ok=True)
    for path in csim_build.source_paths():
        shutil.copyfile(path, out / "vta" / path.name)
    return out


def _record(values: dict[str, Value], vs) -> None:
    for v in vs:
        if v.type is None:
            raise TargetError(f"deploy: value {v.name!r} has no type")
        values[v.name] = v


def _host_call(out: Path, region, kernel, blob: Blob) -> HostCall:
    program = kernel.program
    names_in = tuple(s.name for s in program.inputs)
    names_out = tuple(s.name for s in program.outputs)
    if names_in != tuple(v.name for v in region.inputs) or \
            names_out != tuple(v.name for v in region.outputs):
        raise TargetError(f"deploy: host region {region.name!r}: its C takes {names_in} -> "
                          f"{names_out}, the region {[v.name for v in region.inputs]} -> "
                          f"{[v.name for v in region.outputs]}")
    sources = kernel.sources()
    ident = c_identifier(region.name)
    folder = out / "host" / ident
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("model.c", "model.h"):
        (folder / name).write_text(sources[name], encoding="utf-8")
    (out / f"host_{ident}.c").write_text(
        f"/* Host region {c_comment(region.name)} (generated by retarget deploy): its model_run "
        f"as {ident}_run. */\n#define model_run {ident}_run\n"
        f'#include "host/{ident}/model.c"\n', encoding="utf-8")
    return HostCall(region.name, f"{ident}_run", blob.add(kernel.weights), names_in, names_out)


def _gather_step(node: Node, blob: Blob) -> GatherStep:
    moving = [v for v in node.inputs if v is not None and not v.is_const]
    if node.op not in MOVEMENT_OPS or len(moving) != 1 or len(node.outputs) != 1:
        raise UnsupportedOpError(
            f"retarget deploy: {node.op} {node.name!r} runs on the NumPy reference (the c host "
            f"has no code for it) and is not a pure data movement a gather table can do; the "
            f"deployed program would need it as C")
    src, dst = moving[0], node.outputs[0]
    args = [numbered(src.type.shape) if v is src else (None if v is None else v.const)
            for v in node.inputs]
    coded = run_node(node, args)[0]
    if tuple(coded.shape) != tuple(dst.type.shape):
        raise TargetError(f"deploy: {node.op} {node.name!r} gives {coded.shape} on element "
                          f"numbers, its output is {dst.type}")
    table = index_map(coded)
    return GatherStep(node.name, src.name, dst.name, table.size,
                      np.dtype(src.type.dtype).itemsize, blob.add(table))


def _io(step) -> tuple[tuple[str, ...], tuple[str, ...]]:
    if isinstance(step, HostCall):
        return step.inputs, step.outputs
    if isinstance(step, GatherStep):
        return (step.source,), (step.dest,)
    return tuple(b.value for b in step.inputs), tuple(b.value for b in step.outputs)


def _plan(graph, steps, values: dict[str, Value]):
    for v in graph.inputs + graph.outputs:
        values[v.name] = v
    plan_steps = [Step(f"step{i}", *_io(s)) for i, s in enumerate(steps)]
    # graph inputs are read once, before the first inference, and kept for --repeat
    plan = plan_memory(plan_steps, {n: v.type.nbytes for n, v in values.items()},
                       keep=[v.name for v in graph.inputs + graph.outputs])
    plan.check()
    return plan


def _tensor(v: Value, offset: int) -> str:
    shape = ", ".join(str(int(d)) for d in v.type.shape) or "0"
    return (f'{{"{c_comment(v.name)}", "{np.dtype(v.type.dtype).str}", {len(v.type.shape)}, '
            f"{{{shape}}}, {offset}, {v.type.nbytes}}}")


def _main_c(module, steps, plan, scratch: int) -> str:
    graph = module.graph
    lines = [f"/* main.c: {c_comment(graph.name or 'the model')} compiled by retarget for "
             f"{module.target.spec} with a C host, as one program (generated by retarget "
             f"deploy; docs/deploy.md).",
             " *",
             " *   ./model --input x.npy ... --output y.npy ... [--repeat N]",
             " *",
             " * One .npy per graph input and output, in the graph's order (below). --repeat runs",
             " * the network N times and prints the wall and CPU time per inference on stderr. */",
             "#define _POSIX_C_SOURCE 199309L",
             "#include <stdio.h>", "#include <stdlib.h>", "#include <string.h>",
             "#include <time.h>", "", '#include "rt_deploy.h"', "",
             "extern const uint8_t rt_blob[];",
             "typedef int (*rt_model_run)(const void *, void *, const void *const *, "
             "void *const *);"]
    for s in steps:
        if isinstance(s, HostCall):
            lines.append(f"int {s.function}(const void *, void *, const void *const *, "
                         f"void *const *);")
    lines += ["", f"#define ARENA_BYTES {plan.arena_bytes}u",
              f"#define SCRATCH_BYTES {scratch}u",
              f"#define NUM_INPUTS {len(graph.inputs)}",
              f"#define NUM_OUTPUTS {len(graph.outputs)}", "",
              "static const rt_tensor inputs[] = {" + ", ".join(
                  _tensor(v, plan.offsets[v.name]) for v in graph.inputs) + "};",
              "static const rt_tensor outputs[] = {" + ", ".join(
                  _tensor(v, plan.offsets[v.name]) for v in graph.outputs) + "};", ""]
    vta = [s for s in steps if isinstance(s, VTARegionCode)]
    for r in vta:
        ident = c_identifier(r.name)
        for kind, items in (("in", r.inputs), ("out", r.outputs)):
            rows = ", ".join(f"{{{plan.offsets[b.value]}, {b.buffer_offset}, {b.count}, "
                             f"{b.map_offset}}}" for b in items)
            lines.append(f"static const rt_binding {ident}_{kind}[] = {{{rows}}};")
        lines.append(
            f'static rt_vta_region {ident} = {{"{c_comment(r.name)}", {r.image_offset}, '
            f"{r.image_bytes}, {r.insn_offset}, {r.insn_count}u, {r.reloc_offset}, "
            f"{r.reloc_count}u, {r.dram_base_lo}, {r.dram_base_bits}, {r.image_align}, "
            f"{len(r.inputs)}, {len(r.outputs)}, {ident}_in, {ident}_out, NULL, NULL}};")
    lines += ["", "/* One inference: every region in the schedule's order. */",
              "static int run(VTADeviceHandle dev, uint8_t *arena, uint8_t *scratch) {",
              "  (void)dev; (void)scratch;"]
    for s in steps:
        if isinstance(s, HostCall):
            ins = ", ".join(f"arena + {plan.offsets[n]}" for n in s.inputs) or "NULL"
            outs = ", ".join(f"arena + {plan.offsets[n]}" for n in s.outputs) or "NULL"
            lines += [f"  {{ /* host region {c_comment(s.region)}: generated C */",
                      f"    const void *const in[] = {{{ins}}};",
                      f"    void *const out[] = {{{outs}}};",
                      f"    if ({s.function}(rt_blob + {s.weights_offset}, scratch, in, out)) {{",
                      f'      fprintf(stderr, "model: host region %s failed\\n", '
                      f'"{c_comment(s.region)}");',
                      "      return 1;", "    }", "  }"]
        elif isinstance(s, GatherStep):
            lines.append(f"  /* {c_comment(s.node)}: data movement as a gather table */")
            lines.append(f"  rt_gather(arena + {plan.offsets[s.dest]}, arena + "
                         f"{plan.offsets[s.source]}, (const int32_t *)(rt_blob + "
                         f"{s.map_offset}), {s.count}u, {s.elem}u);")
        else:
            lines.append(f"  /* VTA region {c_comment(s.name)}: {s.insn_count} instructions */")
            lines.append(f"  if (rt_vta_run(dev, &{c_identifier(s.name)}, rt_blob, arena)) "
                         f"return 1;")
    lines += ["  return 0;", "}", ""]
    lines += _MAIN_BODY.replace("@LOAD@", "\n".join(
        f"  if (rt_vta_load(&{c_identifier(r.name)}, rt_blob)) return 1;" for r in vta)).replace(
        "@FREE@", "\n".join(f"  rt_vta_free(&{c_identifier(r.name)});" for r in vta)).split("\n")
    return "\n".join(lines)


_MAIN_BODY = r"""static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  const char *in_paths[NUM_INPUTS + 1], *out_paths[NUM_OUTPUTS + 1];
  int n_in = 0, n_out = 0;
  long repeat = 1;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--input") && i + 1 < argc && n_in < NUM_INPUTS) in_paths[n_in++] = argv[++i];
    else if (!strcmp(argv[i], "--output") && i + 1 < argc && n_out < NUM_OUTPUTS) out_paths[n_out++] = argv[++i];
    else if (!strcmp(argv[i], "--repeat") && i + 1 < argc) repeat = strtol(argv[++i], NULL, 10);
    else {
      fprintf(stderr, "usage: %s --input X.npy (x%d) --output Y.npy (x%d) [--repeat N]\n",
              argv[0], NUM_INPUTS, NUM_OUTPUTS);
      return 2;
    }
  }
  if (n_in != NUM_INPUTS || n_out != NUM_OUTPUTS || repeat < 1) {
    fprintf(stderr, "model: %d input(s) and %d output(s) needed (got %d and %d)\n",
            NUM_INPUTS, NUM_OUTPUTS, n_in, n_out);
    return 2;
  }
  uint8_t *arena = rt_alloc(ARENA_BYTES), *scratch = rt_alloc(SCRATCH_BYTES);
  if (!arena || !scratch) { fprintf(stderr, "model: out of memory\n"); return 1; }
  for (int i = 0; i < NUM_INPUTS; i++)
    if (rt_read_npy(in_paths[i], &inputs[i], arena + inputs[i].offset)) return 1;
  VTADeviceHandle dev = VTADeviceAlloc();
  if (!dev) { fprintf(stderr, "model: VTADeviceAlloc failed\n"); return 1; }
@LOAD@
  double t0 = now();
  clock_t c0 = clock();
  for (long k = 0; k < repeat; k++)
    if (run(dev, arena, scratch)) return 1;
  if (repeat > 1)
    fprintf(stderr, "model: %.3f ms per inference, %.3f ms CPU (%ld runs)\n",
            (now() - t0) * 1e3 / repeat, (clock() - c0) * 1e3 / CLOCKS_PER_SEC / repeat, repeat);
  for (int j = 0; j < NUM_OUTPUTS; j++)
    if (rt_write_npy(out_paths[j], &outputs[j], arena + outputs[j].offset)) return 1;
@FREE@
  VTADeviceFree(dev);
  free(arena);
  free(scratch);
  return 0;
}
"""

BLOB_C = r"""/* blob.c: model.bin (every constant of the program) linked in as rt_blob, 64-byte
 * aligned (generated by retarget deploy). */
__asm__(".section .rodata\n"
        ".balign 64\n"
        ".globl rt_blob\n"
        "rt_blob:\n"
        ".incbin \"model.bin\"\n"
        ".previous\n");
"""


def _makefile(module, steps) -> str:
    hosts = " ".join(f"host_{c_identifier(s.region)}.c" for s in steps if isinstance(s, HostCall))
    return "\n".join([
        f"# Builds `model`: {module.target.spec} with a C host, generated by retarget deploy.",
        "#   make                                  with retarget's VTA simulator as the driver",
        "#   make VTA_DRIVER='driver.c' LDLIBS=... with another implementation of vta/vta_driver.h",
        "#   make CC=arm-linux-gnueabihf-gcc CFLAGS='-O3 -mcpu=cortex-a9 -mfpu=neon'",
        "#                                         cross-compiled (docs/deploy.md)",
        "ifeq ($(origin CC),default)",
        "CC = gcc",
        "endif",
        "CFLAGS ?= -O3 -march=native",
        "LDLIBS ?= -lm",
        "VTA_DRIVER ?= vta/vta_driver_sim.c vta/vta_csim.c",
        "# the core the program was compiled for (retarget's simulator driver reads these)",
        "VTA_CONFIG = " + " ".join(driver_defines(module.target.config)),
        f"SOURCES = main.c rt_deploy.c blob.c {hosts}",
        "",
        "model: $(SOURCES) rt_deploy.h model.bin",
        "\t$(CC) $(CFLAGS) -std=c11 -I. -Ivta $(VTA_CONFIG) -o $@ $(SOURCES) $(VTA_DRIVER) "
        "$(LDLIBS)",
        "",
        "clean:",
        "\trm -f model",
        "",
        ".PHONY: clean",
        "",
    ])


__all__ = ["MOVEMENT_OPS", "deploy"]
