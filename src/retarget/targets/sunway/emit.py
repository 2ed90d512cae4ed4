"""A Program as swTVM organises a network for Sunway (Fig. 1(c) of the paper):

- model.c, the MPE side: `model_run` (the entry point of targets/aot/entry.py's model.h) over
  the static memory plan, calling one layer function per layer. A CPE layer's function fills
  its parameter struct (`para_<layer>`: one rt_gmem handle per tensor, registered with its
  size) and runs `rt_spawn(slave_<layer>, &para)` (athread_spawn + athread_join), then keeps
  the CPEs' counters; an MPE layer (one the buffering cannot serve) is a plain C function.
- cpe_<layer>.c, the CPE side, one file per layer: `slave_<layer>(void *)` reads its CPE id,
  declares its LDM buffers (RT_LDM), runs each nest's share of its CPE loop, moves data only
  with rt_dma_get / rt_dma_put (the baselines also with global loads and stores), and meets the
  other CPEs at rt_sync() between nests (a nest's output is the next one's input).
- layers.h: the parameter structs and slave prototypes both sides include.
- athread_emu.h / athread_emu.c: the athread layer (runtime/), emulated on the host.
- main.c (targets/aot/entry.py), Makefile.

Everything is a pure function of the Program and the config, so an artifact's sources can be
printed again and compared.
"""
from __future__ import annotations

from importlib import resources

from ...errors import GraphError
from ...loopnest.c_printer import (C_TYPES, PRELUDE, _KernelPrinter, c_comment, c_float,
                                   c_identifier, outputs_needing_zero, print_kernel)
from ...loopnest.ir import Access, Affine, Copy, Kernel, Load, Loop, Store, Tensor, walk
from ...loopnest.schedule import substitute
from ..aot.entry import (MAKEFILE_CLEAN, main_c, model_h, model_run_head, output_copies,
                         pointer)
from ..aot.program import Call, Program
from .config import DEFAULT_CFLAGS, SunwayConfig
from .cost import pipeline_plan
from .double_buffer import Pipeline, doubled_buffers, ldm_bytes
from .cores import runs_on

RUNTIME = ("athread_emu.h", "athread_emu.c")
RUNNING = ("Returns 0; 1 when a pointer it needs is NULL; 2 when a layer's CPEs stopped with",
           "an error (model_error() says which). The CPE layers run under athread: here the",
           "host emulation in athread_emu.c (pthreads, one per CPE).")
# counters kept per layer: max over CPEs and sum, of each rt_counters field
COUNTER_FIELDS = ("get_bytes", "put_bytes", "dma_calls", "gld", "gst", "ldm_bytes")


def runtime_source(name: str) -> str:
    return resources.files("retarget.targets.sunway").joinpath("runtime", name).read_text(
        encoding="utf-8")


class CpePrinter(_KernelPrinter):
    """A kernel as a CPE slave function. Main-memory tensors are rt_gmem handles; LDM buffers
    are RT_LDM arrays; Copy statements are DMA calls, one per contiguous run; in the
    baselines, Store statements may read and write main memory with rt_gld / rt_gst. In swTVM mode
    a Store touching main memory is refused: the slave code must go through DMA."""

    def __init__(self, kernel: Kernel, baseline: bool, plan: tuple[Pipeline, ...] = ()):
        super().__init__(kernel)
        self.baseline = baseline
        self.globals = {t.name for t in kernel.params}
        self.suffix = "d" if self.ftype == "double" else "f"
        # In a nest without a CPE loop every CPE runs everything (each fills its own LDM)
        # but only CPE 0 writes main memory: the others would write the same values.
        self.one_writer = False
        # double buffering (double_buffer.py): the pipelined loops, by identity
        loops = [s for s, _ in walk(kernel.body) if isinstance(s, Loop)]
        self.pipelined = {id(loops[p.loop]): p for p in plan}
        self.doubled = doubled_buffers(plan)
        self.prefetching = False      # printing a prefetch: gets are issued, not waited for

    def _place_locals(self) -> dict[str, bool]:
        return {}       # every LDM buffer is declared once, at the top of the slave function

    def ref(self, acc: Access, extents) -> str:
        if acc.tensor.name in self.globals:
            self._check_global(acc)
            return (f"rt_gld_{self.suffix}({self.names[acc.tensor.name]}, "
                    f"{self.flat(acc, extents)})")
        return super().ref(acc, extents)

    def expr(self, e, extents) -> str:
        if not (isinstance(e, Load) and e.fill is not None
                and e.access.tensor.name in self.globals):
            return super().expr(e, extents)
        # A padded read of main memory: one global access whether or not it is in range (the
        # OpenACC-style code evaluates it either way), the element read only when it is.
        self._check_global(e.access)
        conds = self.in_bounds(e.access, extents)
        cond = "0" if conds is None else " && ".join(conds) or "1"
        at = "0" if conds is None else self.flat(e.access, extents)
        return (f"rt_gld_or_{self.suffix}({self.names[e.access.tensor.name]}, {cond}, "
                f"({cond}) ? {at} : 0, {c_float(e.fill, self.ftype)})")

    def _check_global(self, acc: Access) -> None:
        if not self.baseline:
            raise GraphError(f"kernel {self.k.name!r}: a CPE statement reads or writes "
                             f"{acc.tensor.name!r} in main memory directly; slave code may "
                             f"only move data with DMA")

    def store(self, s: Store, extents) -> None:
        if s.dst.tensor.name not in self.globals:
            return super().store(s, extents)
        self._check_global(s.dst)
        value = self.expr(s.value, extents)
        where = f"{self.names[s.dst.tensor.name]}, {self.flat(s.dst, extents)}"
        old = f"rt_gld_{self.suffix}({where})"
        if s.reduce == "+":
            value = f"{old} + {value}"
        elif s.reduce is not None:
            value = f"rt_{s.reduce}{'f' if self.ftype == 'float' else ''}({old}, {value})"
        self.emit(f"{self._guard()}rt_gst_{self.suffix}({where}, {value});")

    def _guard(self) -> str:
        return "if (id == 0) " if self.one_writer else ""

    def copy(self, c: Copy, extents) -> None:
        super().copy(c, extents)
        if not self.prefetching:
            self.emit("rt_dma_wait();")

    def move(self, dst_t: Tensor, d_at: str, src_t: Tensor, s_at: str, run: int) -> None:
        d, s_ = self.names[dst_t.name], self.names[src_t.name]
        size = f"sizeof({C_TYPES[dst_t.dtype]})"
        if src_t.name in self.globals and dst_t.name not in self.globals:
            get = "rt_dma_iget" if self.prefetching else "rt_dma_get"
            self.emit(f"{get}(&{d}[{d_at}], {s_}, ({s_at}) * {size}, {run} * {size});")
        elif dst_t.name in self.globals and src_t.name not in self.globals:
            self.emit(f"{self._guard()}rt_dma_put({d}, ({d_at}) * {size}, &{s_}[{s_at}], "
                      f"{run} * {size});")
        elif src_t.name in self.globals:
            raise GraphError(f"kernel {self.k.name!r}: a copy from main memory to main memory "
                             f"({src_t.name!r} -> {dst_t.name!r}) has no DMA form")
        else:
            super().move(dst_t, d_at, src_t, s_at, run)

    def loop(self, s: Loop, extents, in_parallel: bool) -> None:
        if id(s) in self.pipelined:
            return self.pipelined_loop(s, extents, self.pipelined[id(s)])
        if s.kind != "parallel":
            return super().loop(s, extents, True)
        v = self.vars[s.var]
        self.emit(f"for (int {v} = RT_LO({s.extent}, id, cpes); "
                  f"{v} < RT_HI({s.extent}, id, cpes); {v}++) {{  /* this CPE's share */")
        self.depth += 1
        self.stmts(s.body, {**extents, s.var: s.extent}, True)
        self.depth -= 1
        self.emit("}")

    def pipelined_loop(self, s: Loop, extents, p: Pipeline) -> None:
        """A double-buffered loop: the first iteration's tiles fetched before it; then each
        iteration points its buffers at half (i - lo) % 2, waits for its tiles, issues the
        next iteration's into the other half, and computes."""
        v = self.vars[s.var]
        v_lo, v_hi = (c_identifier(f"{v}_{end}", self.taken) for end in ("lo", "hi"))
        self.taken |= {v_lo, v_hi}
        inner = {**extents, s.var: s.extent}
        lo, hi = (f"RT_LO({s.extent}, id, cpes)", f"RT_HI({s.extent}, id, cpes)") \
            if s.kind == "parallel" else ("0", str(s.extent))
        buffers = [t for t in self.k.locals if t.name in p.buffers]

        def halves(which: str) -> None:
            for t in buffers:
                n = self.names[t.name]
                self.emit(f"{C_TYPES[t.dtype]} *const {n} = {n}_x2 + (({which} - {v_lo}) & 1)"
                          f" * {t.size};")

        def fetch(copies) -> None:
            self.prefetching = True
            for c in copies:
                self.copy(c, inner)
            self.prefetching = False

        nxt = [substitute(c, {s.var: Affine.of(s.var) + 1}) for c in p.copies]
        self.emit(f"{{  /* double-buffered {'CPE ' if s.kind == 'parallel' else ''}loop "
                  f"{c_comment(s.var)}: fetch iteration i + 1 while computing i */")
        self.depth += 1
        self.emit(f"const int {v_lo} = {lo}, {v_hi} = {hi};")
        self.emit(f"if ({v_lo} < {v_hi}) {{  /* the first iteration's tiles */")
        self.depth += 1
        self.emit(f"const int {v} = {v_lo};")
        halves(v)
        fetch(p.copies)
        self.depth -= 1
        self.emit("}")
        self.emit(f"for (int {v} = {v_lo}; {v} < {v_hi}; {v}++) {{")
        self.depth += 1
        halves(v)
        self.emit("rt_dma_wait_async();  /* this iteration's tiles have arrived */")
        self.emit(f"if ({v} + 1 < {v_hi}) {{  /* the next iteration's, into the other half */")
        self.depth += 1
        halves(f"{v} + 1")
        fetch(nxt)
        self.depth -= 1
        self.emit("}")
        fetched = {id(c) for c in p.copies}
        self.stmts(tuple(b for b in s.body if id(b) not in fetched), inner, True)
        self.depth -= 1
        self.emit("}")
        self.depth -= 1
        self.emit("}")

    def slave(self, name: str, para: str, comment: str) -> str:
        k = self.k
        self.emit(f"/* {c_comment(comment)}: kernel {c_comment(k.name)} on the CPEs */")
        self.emit(f"void slave_{name}(void *arg)")
        self.emit("{")
        self.depth = 1
        self.emit(f"const {para} *para = (const {para} *)arg;")
        self.emit("const int id = rt_myid(), cpes = rt_cpes();")
        for t in k.params:
            self.emit(f"const rt_gmem {self.names[t.name]} = para->{self.names[t.name]};"
                      f"  /* {c_comment(t.name)}: {t.dtype}{list(t.shape)} */")
        for t in k.locals:
            if t.name in self.doubled:      # two halves; the pipelined loop points into them
                self.emit(f"RT_LDM({C_TYPES[t.dtype]}, {self.names[t.name]}_x2, {2 * t.size});"
                          f"  /* {c_comment(t.name)}{list(t.shape)}, double-buffered */")
                continue
            self.emit(f"RT_LDM({C_TYPES[t.dtype]}, {self.names[t.name]}, {t.size});"
                      f"  /* {c_comment(t.name)}{list(t.shape)} */")
        self.emit("(void)id;")
        self.emit("(void)cpes;")
        for i, s in enumerate(k.body):
            if i:
                self.emit("rt_sync();  /* the next nest reads what this one wrote */")
            shared = isinstance(s, Loop) and any(
                isinstance(x, Loop) and x.kind == "parallel" for x, _ in walk((s,)))
            if not shared:
                self.emit("/* no loop to share: every CPE runs this nest, CPE 0 writes */")
            self.one_writer = not shared
            self.stmts((s,), {}, True)
            self.one_writer = False
        self.depth = 0
        self.emit("}")
        return "\n".join(self.lines) + "\n"


def cpe_calls(p: Program) -> list[Call]:
    return [c for c in p.calls if runs_on(c.kernel, p.mode) == "cpe"]


def layers_h(p: Program) -> str:
    out = ["/* layers.h: what the MPE and CPE sides of region " + c_comment(p.name) +
           " share (generated by retarget, target sunway). */",
           "#ifndef LAYERS_H", "#define LAYERS_H", "", '#include "athread_emu.h"', ""]
    for call in cpe_calls(p):
        names = [f"in{i}" for i in range(len(call.kernel.inputs))] + \
                [f"out{j}" for j in range(len(call.kernel.outputs))]
        out.append(f"typedef struct {{ rt_gmem {', '.join(names)}; }} para_{call.function};"
                   if names else f"typedef struct {{ int unused; }} para_{call.function};")
        out.append(f"RT_SLAVE_PROTO({call.function});")
    out += ["", "#endif /* LAYERS_H */", ""]
    return "\n".join(out)


def cpe_c(p: Program, call: Call, config: SunwayConfig) -> str:
    head = [f"/* cpe_{call.function}.c: the CPE side of {c_comment(call.node)} (generated by "
            f"retarget, target sunway, mode {p.mode}); compile with sw5cc -slave, or for the "
            "host emulation with -DRT_EMULATE. */",
            "#include <math.h>", "#include <string.h>", "",
            *([] if p.mode != "swtvm" else ["#define RT_NO_GLOBAL_ACCESS"]),
            '#include "layers.h"', "", PRELUDE.rstrip("\n"), ""]
    body = CpePrinter(call.kernel, p.mode != "swtvm",
                      pipeline_plan(call.kernel, p.mode, config)).slave(
        call.function, f"para_{call.function}", call.node)
    return "\n".join(head) + "\n" + body


def model_c(p: Program, config: SunwayConfig) -> str:
    cpe = {id(c) for c in cpe_calls(p)}
    n = len(p.calls)
    out = [f"/* model.c: the MPE side of region {c_comment(p.name)} (generated by retarget, "
           f"target sunway, mode {p.mode}): model_run and one layer function per layer. "
           "Compile with sw5cc -host, or for the host emulation with athread_emu.c. */",
           '#include "model.h"', '#include "layers.h"', "", "#include <math.h>",
           "#include <stdio.h>", "#include <string.h>", "", PRELUDE.rstrip("\n"), "",
           f"#define RT_CPES {config.cpes}", f"#define RT_LDM_BYTES {config.ldm_bytes}",
           f"#define RT_LAYERS {n}", f"#define RT_FIELDS {2 * len(COUNTER_FIELDS)}", "",
           "/* per layer: the max over CPEs, then the sum, of each counter (athread_emu.h) */",
           "static long long layer_counters[RT_LAYERS > 0 ? RT_LAYERS : 1][RT_FIELDS];",
           "static int failed_layer = -1;", ""]
    for call in p.calls:
        if id(call) not in cpe:
            out.append(print_kernel(call.kernel, name=f"mpe_{call.function}", static=True,
                                    comment=call.node))
    out += ["static void keep_counters(int layer)",
            "{",
            "    int c, f;",
            "    memset(layer_counters[layer], 0, sizeof layer_counters[layer]);",
            "    for (c = 0; c < RT_CPES; c++) {",
            "        const rt_counters *k = rt_cpe_counters(c);",
            "        const long long v[] = {" + ", ".join(f"k->{f}" for f in COUNTER_FIELDS) + "};",
            f"        for (f = 0; f < {len(COUNTER_FIELDS)}; f++) {{",
            "            if (v[f] > layer_counters[layer][f])",
            "                layer_counters[layer][f] = v[f];",
            f"            layer_counters[layer][{len(COUNTER_FIELDS)} + f] += v[f];",
            "        }",
            "    }",
            "}",
            ""]
    for index, call in enumerate(p.calls):
        k = call.kernel
        fn = call.function
        out.append(f"/* layer {index}: {c_comment(call.node)} */")
        out.append(f"static int layer_{fn}(const unsigned char *w, unsigned char *a, "
                   "const void *const *inputs, void *const *outputs)")
        out.append("{")
        args = []
        for t, place in zip(k.params, call.args):
            args.append((t, pointer(p, place, C_TYPES[t.dtype], const=t in k.inputs)))
        if id(call) in cpe:
            out.append(f"    para_{fn} para;")
            out.append("    rt_forget_tensors();")
            ptr_of = {t.name: ptr for t, ptr in args}
            for t in outputs_needing_zero(k):     # the MPE zeroes them in main memory first
                out.append(f"    memset((void *){ptr_of[t.name]}, 0, {t.nbytes});")
            for i, (t, ptr) in enumerate(args):
                field = f"in{i}" if i < len(k.inputs) else f"out{i - len(k.inputs)}"
                out.append(f"    para.{field} = rt_register((void *){ptr}, {t.nbytes});"
                           f"  /* {c_comment(t.name)} */")
            out += [f"    if (RT_SPAWN({fn}, &para))",
                    "        return 2;",
                    f"    keep_counters({index});"]
        else:
            out.append(f"    mpe_{fn}(" + ", ".join(ptr for _, ptr in args) + ");"
                       "  /* on the MPE: its reads can leave their tensors (padding) */")
        out += ["    (void)w;", "    (void)a;", "    (void)inputs;", "    (void)outputs;",
                "    return 0;", "}", ""]
    out += model_run_head()
    out += ["    if (rt_init(RT_CPES, RT_LDM_BYTES))",
            "        return 2;",
            "    failed_layer = -1;"]
    for index, call in enumerate(p.calls):
        out.append(f"    if (layer_{call.function}(w, a, inputs, outputs)) {{")
        out.append(f"        failed_layer = {index};")
        out.append("        return 2;")
        out.append("    }")
    out += output_copies(p)
    out += ["    return 0;", "}", "",
            "/* What stopped the last model_run (\"\" when nothing did). */",
            "const char *model_error(void)",
            "{",
            "    static char text[640];",
            "    if (failed_layer < 0)",
            "        return \"\";",
            "    snprintf(text, sizeof text, \"layer %d: %s\", failed_layer, rt_error());",
            "    return text;",
            "}",
            "",
            "/* The counters of layer `layer` after the last model_run: RT_FIELDS numbers. */",
            "int model_layer_counters(int layer, long long *out)",
            "{",
            "    if (layer < 0 || layer >= RT_LAYERS)",
            "        return 1;",
            "    memcpy(out, layer_counters[layer], sizeof layer_counters[layer]);",
            "    return 0;",
            "}",
            ""]
    return "\n".join(out)


def makefile(p: Program, config: SunwayConfig) -> str:
    slaves = " ".join(f"cpe_{c.function}.c" for c in cpe_calls(p))
    return "\n".join([
        f"# Builds region {p.name} (generated by retarget, target sunway) with the host",
        "# emulation of athread (athread_emu.c):",
        "#   make          libmodel.so and the `model` runner (see main.c)",
        "# On a Sunway machine the same sources go to sw5cc: model.c with -host, cpe_*.c with",
        "# -slave, linked against the real athread instead of athread_emu.c.",
        "",
        "ifeq ($(origin CC),default)",
        "CC = gcc",
        "endif",
        f"CFLAGS ?= {DEFAULT_CFLAGS}",
        "EMUFLAGS = -DRT_EMULATE -Werror=implicit-function-declaration",
        "LDLIBS = -lm -pthread",
        f"SLAVES = {slaves}",
        "SOURCES = model.c $(SLAVES) athread_emu.c",
        "",
        "all: libmodel.so model",
        "",
        "libmodel.so: $(SOURCES) model.h layers.h athread_emu.h",
        "\t$(CC) $(CFLAGS) $(EMUFLAGS) -fPIC -shared -o $@ $(SOURCES) $(LDLIBS)",
        "",
        "model: main.c $(SOURCES) model.h layers.h athread_emu.h",
        "\t$(CC) $(CFLAGS) $(EMUFLAGS) -o $@ main.c $(SOURCES) $(LDLIBS)",
        "",
        *MAKEFILE_CLEAN,
    ])


def units(p: Program) -> tuple[str, ...]:
    """The C files the library is built from."""
    return ("model.c", *(f"cpe_{c.function}.c" for c in cpe_calls(p)), "athread_emu.c")


def sources(p: Program, config: SunwayConfig) -> dict[str, str]:
    files = {"model.h": model_h(p, "sunway", RUNNING), "model.c": model_c(p, config),
             "layers.h": layers_h(p), "main.c": main_c(p), "Makefile": makefile(p, config)}
    for call in cpe_calls(p):
        files[f"cpe_{call.function}.c"] = cpe_c(p, call, config)
    for name in RUNTIME:
        files[name] = runtime_source(name)
    return files


def check_ldm(p: Program, config: SunwayConfig) -> None:
    """The generator's LDM check: every CPE layer's buffers fit `ldm_bytes` (each RT_LDM
    buffer starts at a 64-byte boundary; a double-buffered one takes twice its size)."""
    for call in cpe_calls(p):
        plan = pipeline_plan(call.kernel, p.mode, config)
        used = ldm_bytes(call.kernel.locals, doubled_buffers(plan))
        if used > config.ldm_bytes:
            raise GraphError(f"{call.node}: its LDM buffers need {used} bytes, more than the "
                             f"{config.ldm_bytes}-byte LDM of a CPE")


__all__ = ["COUNTER_FIELDS", "CpePrinter", "check_ldm", "cpe_calls", "sources", "units"]
