"""A bug in what `retarget compile` prints about a module (a kernel's summary line, the cycle-
model report) is a one-line warning: the compile still writes its artifact, and the artifact
runs. Only a report the user asked for and did not get shows in the exit status (1)."""
from __future__ import annotations

import pytest

from retarget.cli import main
from retarget.targets.nvdla.kernel import NvdlaKernel
from retarget.zoo.builder import OnnxBuilder


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    b = OnnxBuilder("small", seed=4)
    x = b.input("x", (1, 3, 8, 8))
    b.output(b.relu(b.conv(x, 4, 3, "conv", bias=True), "relu"), "y")
    path = tmp_path_factory.mktemp("model") / "small.onnx"
    path.write_bytes(b.model().SerializeToString())
    return path


def broken(*args, **kwargs):
    # what the throughput model raised on a loadable of no layers
    raise ValueError("zero-size array to reduction operation maximum which has no identity\n"
                     "(a second line the warning leaves out)")


def compile_to(model_file, out, *extra):
    return main(["compile", str(model_file), "--target", "nvdla:nv_small", "-o", str(out),
                 *extra])


def warnings_in(err: str) -> list[str]:
    """The CLI's own warnings (Python's, e.g. about random calibration, look different)."""
    return [line for line in err.splitlines() if line.startswith("warning:")]


def test_a_failing_summary_is_one_warning_and_the_artifact_is_written(model_file, tmp_path,
                                                                       capsys, monkeypatch):
    monkeypatch.setattr(NvdlaKernel, "summary", broken)
    out = tmp_path / "mod"
    assert compile_to(model_file, out) == 0
    captured = capsys.readouterr()
    assert f"wrote {out}" in captured.out
    (line,) = warnings_in(captured.err)
    assert line.startswith("warning: the summary of region nvdla_0 failed (ValueError: "
                           "zero-size array") and "second line" not in line
    monkeypatch.undo()
    assert main(["run", str(out), "--check"]) == 0
    assert "bit-exact" in capsys.readouterr().out


def test_a_failing_report_asked_for_is_a_warning_and_exit_status_1(model_file, tmp_path,
                                                                   capsys, monkeypatch):
    from retarget.cli import report_options     # the report as the cli calls it
    monkeypatch.setattr(report_options, "module_report", broken)
    out = tmp_path / "mod"
    assert compile_to(model_file, out, "--report") == 1
    captured = capsys.readouterr()
    assert f"wrote {out}" in captured.out
    (line,) = warnings_in(captured.err)
    assert line.startswith("warning: the report failed (ValueError:")
    assert (out / "manifest.json").is_file()


def test_debug_shows_the_traceback_instead(model_file, tmp_path, monkeypatch):
    monkeypatch.setattr(NvdlaKernel, "summary", broken)
    with pytest.raises(ValueError, match="zero-size array"):
        main(["--debug", "compile", str(model_file), "--target", "nvdla:nv_small"])


def test_an_untouched_compile_prints_no_warning(model_file, tmp_path, capsys):
    assert compile_to(model_file, tmp_path / "mod", "--report") == 0
    captured = capsys.readouterr()
    assert warnings_in(captured.err) == []
    assert "nvdla nvdla_0: 1 hardware layers" in captured.out
