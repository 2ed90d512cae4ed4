"""A Program as a standalone C project: model.h, model.c, main.c and a Makefile (plus the
weights blob, weights.bin, which kernel.py writes beside them).

- model.h: the documented entry point `model_run` and macros for the arena and weights sizes
  and every input's and output's name, dtype, shape and bytes.
- model.c: the loop-nest kernels as static functions (loopnest/c_printer.py), then
  `model_run`, which calls them in order with pointers into the weights, the arena and the
  caller's input and output buffers. It allocates nothing.
- main.c: a command-line runner: reads weights.bin and raw input files (each exactly the
  tensor's row-major bytes, as `x.astype(np.float32).tofile(path)` writes), runs the model
  once and writes raw output files. No .npy parsing: nothing but stdio.
- Makefile: `make` builds libmodel.so and `model` with `CC ?= gcc`, `CFLAGS ?= -O3
  -march=native -std=c99`, and OpenMP with `make OPENMP=1`.

Everything here is a pure function of the Program, so loading an artifact prints the same
text again and can compare it with the files the artifact ships.
"""
from __future__ import annotations

from ...loopnest.c_printer import C_TYPES, PRELUDE, c_comment, print_kernel
from .program import Place, Program, TensorSpec

SOURCES = ("model.h", "model.c", "main.c", "Makefile")
HEADER_CFLAGS = "-O3 -march=native -std=c99"


def _c_string(text: str) -> str:
    """`text` as a C string literal (printable ASCII; anything else escaped in octal)."""
    out = []
    for ch in text.encode("utf-8"):
        c = chr(ch)
        if c in '"\\':
            out.append("\\" + c)
        elif 32 <= ch < 127:
            out.append(c)
        else:
            out.append(f"\\{ch:03o}")
    return '"' + "".join(out) + '"'


def _describe(spec: TensorSpec) -> str:
    return f"{c_comment(spec.name)}: {spec.dtype}{list(spec.shape)}"


def model_h(p: Program) -> str:
    lines = [
        "#ifndef MODEL_H",
        "#define MODEL_H",
        "",
        f"/* Region {c_comment(p.name)}, compiled by retarget for target c (mode {p.mode}):",
        f" * {len(p.calls)} kernels, {len(p.inputs)} inputs, {len(p.outputs)} outputs.",
        " *",
        " * int model_run(const void *weights, void *arena,",
        " *               const void *const *inputs, void *const *outputs);",
        " *",
        " *   weights  the contents of weights.bin (MODEL_WEIGHTS_BYTES bytes); only read.",
        " *   arena    MODEL_ARENA_BYTES bytes of scratch that holds every intermediate tensor;",
        " *            need not be initialised. Concurrent calls need an arena each.",
        " *   inputs   MODEL_NUM_INPUTS pointers: inputs[i] to MODEL_INPUT_<i>_BYTES bytes, the",
        " *            tensor in row-major order; only read.",
        " *   outputs  MODEL_NUM_OUTPUTS pointers: outputs[j] to MODEL_OUTPUT_<j>_BYTES bytes,",
        " *            written in row-major order.",
        " *   Buffers may have any alignment; 64-byte aligned ones are fastest. Inputs, outputs,",
        " *   weights and arena must not overlap.",
        " *",
        " * Returns 0, or 1 when a pointer it needs is NULL. It allocates nothing. Built with",
        " * OpenMP (-fopenmp), its parallel loops run on OMP_NUM_THREADS threads.",
        " *",
    ]
    for i, s in enumerate(p.inputs):
        lines.append(f" * input {i}: {_describe(s)}")
    for j, s in enumerate(p.outputs):
        lines.append(f" * output {j}: {_describe(s)}")
    lines += [
        " */",
        "",
        f"#define MODEL_WEIGHTS_BYTES {p.weights_bytes}",
        f"#define MODEL_ARENA_BYTES {p.arena_bytes}",
        f"#define MODEL_NUM_INPUTS {len(p.inputs)}",
        f"#define MODEL_NUM_OUTPUTS {len(p.outputs)}",
    ]
    for kind, specs in (("INPUT", p.inputs), ("OUTPUT", p.outputs)):
        for i, s in enumerate(specs):
            m = f"MODEL_{kind}_{i}"
            lines += [
                "",
                f"#define {m}_NAME {_c_string(s.name)}",
                f"#define {m}_DTYPE \"{s.dtype}\"",
                f"#define {m}_RANK {len(s.shape)}",
                f"#define {m}_SHAPE {{{', '.join(map(str, s.shape))}}}",
                f"#define {m}_BYTES {s.nbytes}",
            ]
    lines += [
        "",
        "#ifdef __cplusplus",
        'extern "C" {',
        "#endif",
        "",
        "int model_run(const void *weights, void *arena,",
        "              const void *const *inputs, void *const *outputs);",
        "",
        "#ifdef __cplusplus",
        "}",
        "#endif",
        "",
        "#endif /* MODEL_H */",
        "",
    ]
    return "\n".join(lines)


def _pointer(p: Program, place: Place, ctype: str, const: bool) -> str:
    q = "const " if const else ""
    if place.space == "input":
        return f"({q}{ctype} *)inputs[{place.index}]"
    if place.space == "output":
        return f"({q}{ctype} *)outputs[{place.index}]"
    base = "w" if place.space == "weights" else "a"
    return f"({q}{ctype} *)({base} + {place.index})"


def _place_name(p: Program, place: Place) -> str:
    """What lives at `place`, for comments."""
    if place.space == "input":
        return f"input {place.index}"
    if place.space == "output":
        return f"output {place.index}"
    return f"{place.space} + {place.index}"


def model_c(p: Program) -> str:
    out = [f"/* model.c: region {c_comment(p.name)}, generated by retarget (target c, mode "
           f"{p.mode}). model.h documents the entry point. */",
           '#include "model.h"', "", PRELUDE.rstrip("\n"), ""]
    for call in p.calls:
        out.append(print_kernel(call.kernel, name=call.function, static=True, comment=call.node))
    out += ["int model_run(const void *weights, void *arena,",
            "              const void *const *inputs, void *const *outputs)",
            "{",
            "    const unsigned char *const w = (const unsigned char *)weights;",
            "    unsigned char *const a = (unsigned char *)arena;",
            "    if ((MODEL_WEIGHTS_BYTES > 0 && !w) || (MODEL_ARENA_BYTES > 0 && !a) ||",
            "        (MODEL_NUM_INPUTS > 0 && !inputs) || (MODEL_NUM_OUTPUTS > 0 && !outputs))",
            "        return 1;",
            "    (void)w;",
            "    (void)a;"]
    for call in p.calls:
        k = call.kernel
        out.append("")
        out.append(f"    /* {c_comment(call.node)} */")
        out.append(f"    {call.function}(")
        for i, (t, place) in enumerate(zip(k.params, call.args)):
            arg = _pointer(p, place, C_TYPES[t.dtype], const=t in k.inputs)
            end = "," if i < len(k.params) - 1 else ");"
            out.append(f"        {arg}{end}  /* {c_comment(t.name)} */")
        if not k.params:
            out[-1] += ");"
    for cp in p.copies:
        src = _pointer(p, cp.source, "unsigned char", const=True)
        out.append("")
        out.append(f"    /* output {cp.output} ({c_comment(p.outputs[cp.output].name)}) is the "
                   f"bytes of {_place_name(p, cp.source)} */")
        out.append(f"    memcpy(outputs[{cp.output}], {src}, {cp.nbytes});")
    out += ["    return 0;", "}", ""]
    return "\n".join(out)


def main_c(p: Program) -> str:
    def table(ctype: str, name: str, items: list[str]) -> str:
        return f"static const {ctype} {name}[] = {{{', '.join(items + ['0'])}}};"

    return "\n".join([
        f"/* main.c: runs region {c_comment(p.name)} (generated by retarget) on raw files.",
        " *",
        " *   ./model weights.bin INPUT_0 ... OUTPUT_0 ...",
        " *",
        " * Each input file holds exactly the tensor's bytes in row-major order (native byte",
        " * order), as numpy's x.astype(np.float32).tofile(path) writes them; each output is",
        " * written the same way (np.fromfile(path, np.float32).reshape(shape) reads it). The",
        " * order, names and shapes are in model.h. Memory is allocated once, at start-up.",
        " */",
        "#include <stdint.h>",
        "#include <stdio.h>",
        "#include <stdlib.h>",
        "",
        '#include "model.h"',
        "",
        table("size_t", "input_bytes", [f"MODEL_INPUT_{i}_BYTES" for i in range(len(p.inputs))]),
        table("size_t", "output_bytes", [f"MODEL_OUTPUT_{j}_BYTES" for j in range(len(p.outputs))]),
        "",
        "/* n bytes (at least one) at a 64-byte boundary inside *block, which free() releases. */",
        "static void *alloc64(size_t n, void **block)",
        "{",
        "    unsigned char *raw = (unsigned char *)malloc(n + 64);",
        "    *block = raw;",
        "    if (!raw)",
        "        return NULL;",
        "    return raw + (64 - (uintptr_t)raw % 64) % 64;",
        "}",
        "",
        "/* Read exactly n bytes from path: a file of any other size is an error. */",
        "static int read_exact(const char *path, void *dst, size_t n)",
        "{",
        "    FILE *f = fopen(path, \"rb\");",
        "    int ok;",
        "    if (!f) {",
        "        fprintf(stderr, \"model: cannot open %s\\n\", path);",
        "        return 0;",
        "    }",
        "    ok = fread(dst, 1, n, f) == n && fgetc(f) == EOF;",
        "    fclose(f);",
        "    if (!ok)",
        "        fprintf(stderr, \"model: %s does not hold exactly %lu bytes\\n\", path,",
        "                (unsigned long)n);",
        "    return ok;",
        "}",
        "",
        "static int write_all(const char *path, const void *src, size_t n)",
        "{",
        "    FILE *f = fopen(path, \"wb\");",
        "    int ok;",
        "    if (!f) {",
        "        fprintf(stderr, \"model: cannot create %s\\n\", path);",
        "        return 0;",
        "    }",
        "    ok = fwrite(src, 1, n, f) == n;",
        "    ok = fclose(f) == 0 && ok;",
        "    if (!ok)",
        "        fprintf(stderr, \"model: cannot write %s\\n\", path);",
        "    return ok;",
        "}",
        "",
        "int main(int argc, char **argv)",
        "{",
        "    void *blocks[MODEL_NUM_INPUTS + MODEL_NUM_OUTPUTS + 2];",
        "    const void *inputs[MODEL_NUM_INPUTS + 1];",
        "    void *outputs[MODEL_NUM_OUTPUTS + 1];",
        "    void *weights, *arena;",
        "    int i, n = 0, status = 0;",
        "    if (argc != 2 + MODEL_NUM_INPUTS + MODEL_NUM_OUTPUTS) {",
        "        fprintf(stderr, \"usage: %s weights.bin\", argv[0]);",
        "        for (i = 0; i < MODEL_NUM_INPUTS; i++)",
        "            fprintf(stderr, \" INPUT_%d\", i);",
        "        for (i = 0; i < MODEL_NUM_OUTPUTS; i++)",
        "            fprintf(stderr, \" OUTPUT_%d\", i);",
        "        fprintf(stderr, \"\\n\");",
        "        return 2;",
        "    }",
        "    weights = alloc64(MODEL_WEIGHTS_BYTES, &blocks[n++]);",
        "    arena = alloc64(MODEL_ARENA_BYTES, &blocks[n++]);",
        "    status = !weights || !arena;",
        "    for (i = 0; i < MODEL_NUM_INPUTS && !status; i++) {",
        "        void *buf = alloc64(input_bytes[i], &blocks[n++]);",
        "        status = !buf || !read_exact(argv[2 + i], buf, input_bytes[i]);",
        "        inputs[i] = buf;",
        "    }",
        "    for (i = 0; i < MODEL_NUM_OUTPUTS && !status; i++) {",
        "        outputs[i] = alloc64(output_bytes[i], &blocks[n++]);",
        "        status = !outputs[i];",
        "    }",
        "    if (!status)",
        "        status = !read_exact(argv[1], weights, MODEL_WEIGHTS_BYTES);",
        "    if (!status)",
        "        status = model_run(weights, arena, inputs, outputs);",
        "    for (i = 0; i < MODEL_NUM_OUTPUTS && !status; i++)",
        "        status = !write_all(argv[2 + MODEL_NUM_INPUTS + i], outputs[i], output_bytes[i]);",
        "    while (n > 0)",
        "        free(blocks[--n]);",
        "    return status;",
        "}",
        "",
    ])


def makefile(p: Program) -> str:
    return "\n".join([
        f"# Builds region {p.name} (generated by retarget, target c) outside retarget:",
        "#   make                         libmodel.so and the `model` runner (see main.c)",
        "#   make OPENMP=1                parallel loops on OMP_NUM_THREADS threads (-fopenmp)",
        "#   make CC=clang CFLAGS='-O2 -std=c99'",
        "",
        "# make predefines CC as `cc`; keep an explicit CC=... but default to gcc",
        "ifeq ($(origin CC),default)",
        "CC = gcc",
        "endif",
        f"CFLAGS ?= {HEADER_CFLAGS}",
        "OPENMP ?= 0",
        "ifeq ($(OPENMP),1)",
        "OMPFLAGS = -fopenmp",
        "endif",
        "LDLIBS = -lm",
        "",
        "all: libmodel.so model",
        "",
        "libmodel.so: model.c model.h",
        "\t$(CC) $(CFLAGS) $(OMPFLAGS) -fPIC -shared -o $@ model.c $(LDLIBS)",
        "",
        "model: main.c model.c model.h",
        "\t$(CC) $(CFLAGS) $(OMPFLAGS) -o $@ main.c model.c $(LDLIBS)",
        "",
        "clean:",
        "\trm -f libmodel.so model",
        "",
        ".PHONY: all clean",
        "",
    ])


def sources(p: Program) -> dict[str, str]:
    """File name -> text of every source file (SOURCES)."""
    return {"model.h": model_h(p), "model.c": model_c(p), "main.c": main_c(p),
            "Makefile": makefile(p)}


__all__ = ["SOURCES", "main_c", "makefile", "model_c", "model_h", "sources"]
