"""Per-layer debugging on nvdla: a compiler that corrupts one weight in the loadable it
writes (a buggy outside compiler) is caught by `run --check`, and `--per-layer` names the
layer; `retarget disasm` reads the loadable it left in the artifact."""
from __future__ import annotations

import sys
import textwrap

import numpy as np
import onnx
import pytest

from retarget import zoo
from retarget.cli import main

BAD_LAYER = "/layer2.0.conv1/Conv"

# Runs the real nvdla compiler, then overwrites one output channel's weights of one layer in
# the loadable it wrote (through the loadable's own writer, so the file is well formed and its
# CRC right: only the numbers are wrong, as after a compiler bug). A single weight can hide
# behind a ReLU on random data; a whole channel at 127 cannot.
CORRUPTING_COMPILER = textwrap.dedent(f'''
    import sys
    from pathlib import Path
    import numpy as np
    from retarget.targets.nvdla.compile import main
    from retarget.targets.nvdla.loadable import Loadable
    args = sys.argv[1:]
    status = main(args)
    out = Path(args[args.index("-o") + 1])
    ld = Loadable.from_bytes(out.read_bytes())
    for rec in ld.layers:
        if ld.string(int(rec["name"])).startswith("{BAD_LAYER}+"):
            a = ld.addresses[int(rec["wgt"])]
            blob = bytearray(ld.blob)
            row = a.nbytes // a.shape[0]            # output channel 0's weights -> 127
            blob[a.offset:a.offset + row] = b"\\x7f" * row
            ld.blob = bytes(blob)
    out.write_bytes(ld.to_bytes())
    sys.exit(status)
''')


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "r18.onnx"
    onnx.save(zoo.build("resnet18", size=32, num_classes=10, width=0.25), str(path))
    return path


def test_per_layer_all_equal(model_file, tmp_path, capsys):
    out = tmp_path / "mod"
    assert main(["compile", str(model_file), "--target", "nvdla:nv_small", "-o", str(out)]) == 0
    dump = tmp_path / "layers.npz"
    assert main(["run", str(out), "--check", "--per-layer", "--dump-layers", str(dump)]) == 0
    text = capsys.readouterr().out
    assert "bit-exact" in text and "per-layer: all" in text
    with np.load(dump) as z:
        assert any(k.startswith("nvdla_0/0:") for k in z.files)
    assert main(["disasm", str(out / "kernels" / "nvdla_0")]) == 0
    listing = capsys.readouterr().out
    assert "CONV @input_q" in listing and "memories (3)" in listing and "cvt(" in listing


def test_per_layer_names_the_corrupted_layer(model_file, tmp_path, capsys):
    script = tmp_path / "buggy_compiler.py"
    script.write_text(CORRUPTING_COMPILER)
    out = tmp_path / "mod"
    cmd = f"{sys.executable} {script} {{json}} -o {{out}}"
    assert main(["compile", str(model_file), "--target", "nvdla:nv_small", "-o", str(out),
                 "--config", f"compiler={cmd}"]) == 0
    capsys.readouterr()
    assert main(["run", str(out), "--check"]) == 1          # the outputs differ ...
    assert "MISMATCH" in capsys.readouterr().out
    assert main(["run", str(out), "--check", "--per-layer"]) == 1
    text = capsys.readouterr().out
    first = text.split("first layer that differs:")[1]
    assert f"({BAD_LAYER}+" in first                          # ... and here is where
    rows = [line for line in text.splitlines() if line.startswith("nvdla_0")]
    before = rows[:next(i for i, r in enumerate(rows) if "MISMATCH" in r)]
    assert before and all(" ok " in r for r in before)


def test_per_layer_needs_check_and_a_layer_reporting_target(model_file, capsys):
    assert main(["run", str(model_file), "--target", "nvdla", "--per-layer"]) == 2
    assert "--per-layer is part of --check" in capsys.readouterr().err
    assert main(["run", str(model_file), "--target", "c", "--check", "--per-layer"]) == 2
    assert "is not bit-exact" in capsys.readouterr().err


@pytest.mark.parametrize("target", ["nvdla", "vta", "vta:pynq_alu"])
def test_per_layer_on_a_vit(target, tmp_path, capsys):
    """Attention, LayerNorm on the host, 5-D reshapes refused by nvdla's rules (a loadable's
    addresses have 4 dimensions); every offloaded layer still equals the reference."""
    path = tmp_path / "vit.onnx"
    onnx.save(zoo.build("vit", size=32, num_classes=10), str(path))
    assert main(["run", str(path), "--target", target, "--check", "--per-layer"]) == 0
    out = capsys.readouterr().out
    assert "bit-exact" in out and "per-layer: all" in out
