"""`retarget compile --target vta`, `retarget run DIR --check` and `retarget demo`, in process."""

from retarget.cli import main



def test_all_on_cpu_still_checks_exactly(r18_file, tmp_path, capsys):
    # Every node forced onto the host: no lowering involved, the check path is the exact one.
    model, calib = r18_file
    out = tmp_path / "cpu_only.rtm"
    assert main(["compile", str(model), "--target", "vta", "--cpu-node", "*", "-o", str(out),
                 "--calibration", str(calib)]) == 0
    capsys.readouterr()
    assert main(["run", str(out), "--check"]) == 0
    assert "bit-exact vs the integer reference" in capsys.readouterr().out


def test_bad_calibration_file(r18_file, tmp_path, capsys):
    model, _ = r18_file
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not an npz")
    assert main(["compile", str(model), "--target", "vta", "--calibration", str(bad)]) == 2
    assert "--calibration" in capsys.readouterr().err
