"""`retarget explore` end to end."""
import json

from retarget.cli import main

from .conftest import SPACE


def test_explore_cli_writes_jsonl_and_svg(tmp_path, capsys):
    space = tmp_path / "space.json"
    space.write_text(json.dumps(SPACE))
    results, plot = tmp_path / "r.jsonl", tmp_path / "front.svg"
    argv = ["explore", "zoo:resnet18:0.25", "--size", "32", "--target", "vta", "--space",
            str(space), "--results", str(results), "--plot", str(plot), "--workers", "2",
            "--spot-check", "1", "--no-progress"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    recs = [json.loads(l) for l in results.read_text().splitlines()]
    assert len(recs) == 8 and {r["status"] for r in recs} == {"ok", "error"}
    assert "Pareto front over latency, dsp, bram" in out
    assert "bit-exact vs the integer reference" in out
    svg = plot.read_text()
    assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>") and "<circle" in svg
    # rerun: everything is in the results file
    assert main(argv[:-3] + ["--no-progress"]) == 0
    assert "0 point(s) compiled in this run" in capsys.readouterr().out
    assert len(results.read_text().splitlines()) == 8


def test_explore_cli_errors(tmp_path, capsys):
    assert main(["explore", "zoo:resnet18:0.25", "--target", "cpu"]) == 2
    assert "declares no design space" in capsys.readouterr().err
    assert main(["explore", "zoo:resnet18:0.25", "--target", "vta", "--objective",
                 "speed"]) == 2
    assert "unknown objective" in capsys.readouterr().err
    assert main(["explore", str(tmp_path / "none.onnx"), "--target", "vta"]) == 2
    assert main(["explore", "zoo:resnet18:0.25", "--target", "vta", "--plot", "x.pdf"]) == 2
