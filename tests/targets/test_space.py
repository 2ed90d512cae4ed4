"""The resource model, the parts table, constraints and space files."""
import json

import pytest

from retarget.errors import InputError
from retarget.targets.space import PARTS, bram18, canonical_key, pareto_front
from retarget.targets.dnnvm.config import PRESETS as DNNVM_PRESETS
from retarget.targets.dnnvm.space import resources as dnnvm_resources
from retarget.targets.vta.config import PRESETS, VTAConfig
from retarget.targets.vta.space import design_space, resources
from retarget.targets.vta.target import VTATarget


def test_bram18_shapes():
    assert bram18(512, 36) == 1 and bram18(1024, 18) == 1 and bram18(2048, 9) == 1
    assert bram18(16384, 1) == 1 and bram18(513, 36) == 2
    assert bram18(2048, 128) == 15          # 2K x 9 blocks, ceil(128 / 9) wide
    assert bram18(1024, 2048) == 114        # 1K x 18, ceil(2048 / 18) wide
    assert bram18(0, 8) == 0


def test_pynq_fits_the_zynq_7020():
    r = resources(PRESETS["pynq"])
    assert r.macs_per_cycle == 256 and r.dsp == 128
    # uop 8K x 32 -> 16, inp 2K x 128 -> 15, wgt 1K x 2048 -> 114, acc 2K x 512 -> 57,
    # out 2K x 128 -> 15
    assert {b.name: b.bram18 for b in r.buffers} == {"uop": 16, "inp": 15, "wgt": 114,
                                                     "acc": 57, "out": 15}
    assert r.bram18 == 217 and r.onchip_bytes == (32 + 32 + 256 + 128 + 32) * 1024
    assert PARTS["xc7z020"].dsp == 220 and PARTS["xc7z020"].bram18 == 280
    assert r.fits(PARTS["xc7z020"]) and r.why_not(PARTS["xc7z020"]) is None


def test_oversized_points_are_flagged():
    big = resources(PRESETS["1x64"])            # 4096 MACs per cycle
    why = big.why_not(PARTS["xc7z020"])
    assert big.dsp == 2048 and "DSP" in why and "xc7z020" in why
    assert not big.fits(PARTS["xczu2eg"]) and big.fits(PARTS["xczu9eg"]) is (big.bram18 <= 1824)
    wide = resources(VTAConfig(log_wgt_buff_size=19, log_inp_buff_size=13,
                               log_acc_buff_size=16))   # 512 KiB of weights: BRAM, not DSP
    assert "BRAM18" in wide.why_not(PARTS["xc7z020"]) and "DSP" not in wide.why_not(
        PARTS["xc7z020"])


def test_dnnvm_dsp_formula_matches_the_paper_on_zu9():
    # DNNVM paper Table V: 1,542 DSPs on ZU9 (3 engines of 32 x 16 x 8)
    assert dnnvm_resources(DNNVM_PRESETS["zu9"]).dsp == 1536
    assert dnnvm_resources(DNNVM_PRESETS["zu2"]).dsp == 144


def test_space_constraints_and_alu_stage():
    s = VTATarget.design_space()
    assert set(s.params) >= {"log_batch", "log_block_in", "log_block_out", "log_inp_buff_size",
                             "log_wgt_buff_size", "log_acc_buff_size", "log_uop_buff_size",
                             "clock_mhz"}
    assert ("alu_stage" in s.params) == hasattr(VTAConfig(), "alu_stage")
    assert s.violation({}) is None
    assert "buffer depths" in s.violation({"log_wgt_buff_size": 12})     # 16 weight blocks
    assert s.violation({"log_block_in": 3, "log_inp_buff_size": 15}).startswith("config")


def test_space_file(tmp_path):
    s = design_space().restricted({"params": {"log_block_in": [4, 5]}, "only": True,
                                   "fixed": {"bus_bytes": 16}})
    assert list(s.params) == ["log_block_in"] and s.size == 2
    assert s.config({"log_block_in": 5}).bus_bytes == 16
    with pytest.raises(InputError, match="legal"):
        design_space().restricted({"params": {"log_block_in": [9]}})
    with pytest.raises(InputError, match="no config field"):
        design_space().restricted({"params": {"nope": [1]}})


def test_pareto_front_and_keys():
    pts = [(1, 5), (2, 2), (5, 1), (3, 3), (2, 2)]
    assert pareto_front(pts, key=lambda p: p) == [(1, 5), (2, 2), (5, 1), (2, 2)]
    assert canonical_key({"b": 1, "a": 2.0}) == json.dumps({"a": 2.0, "b": 1},
                                                           separators=(",", ":"))
