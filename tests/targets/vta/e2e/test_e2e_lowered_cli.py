"""Lowered end to end through the CLI: compile -> artifact -> run --check, and the demo."""

from retarget.cli import main


def test_compile_run_check_bit_exact(r18_file, tmp_path, capsys):
    model, calib = r18_file
    out = tmp_path / "r18.rtm"
    assert main(["compile", str(model), "--target", "vta:1x32", "-o", str(out),
                 "--calibration", str(calib)]) == 0
    text = capsys.readouterr().out
    assert "vta:1x32" in text and "/conv1/Conv" in text
    assert (out / "kernels").is_dir()
    assert main(["run", str(out), "--check", "--profile"]) == 0
    text = capsys.readouterr().out
    assert "bit-exact vs the integer reference" in text and "MISMATCH" not in text
    assert "gemm_counter" in text


def test_demo_accuracy_and_exactness(capsys):
    assert main(["demo"]) == 0
    text = capsys.readouterr().out
    assert "top-1 float" in text and "top-1 int8 (vta simulator)" in text
    assert "demo: OK" in text and "bit-exact vs the integer reference: 360/360" in text
    assert "gemm_counter" in text and "vta:pynq" in text
