"""VTA configuration: presets are valid, derived sizes match the spec, bad configs fail clearly."""
import json

import pytest

from retarget.errors import TargetError
from retarget.targets.vta.config import PRESETS, VTAConfig, load_config, preset
from retarget.targets.vta.isa import layout_for


def test_default_matches_spec():
    c = VTAConfig()
    assert c.name == "pynq" and c.clock_mhz == 100.0 and c.bus_bytes == 8
    assert (c.batch, c.block_in, c.block_out) == (1, 16, 16)
    assert (c.uop_depth, c.inp_depth, c.wgt_depth, c.acc_depth, c.out_depth) == \
        (8192, 2048, 1024, 2048, 2048)
    assert (c.inp_elem_bytes, c.wgt_elem_bytes, c.acc_elem_bytes, c.out_elem_bytes) == \
        (16, 256, 64, 16)
    assert c.target_name == "1x16_i8w8a32_15_15_18_17"
    assert c.peak_gops == pytest.approx(51.2)


@pytest.mark.parametrize("name", ["pynq", "ultra96", "1x32", "1x64", "2x16"])
def test_presets_valid(name):
    c = preset(name)
    layout_for(c)  # must not raise
    assert c.name == name


def test_preset_shapes():
    assert preset("ultra96").clock_mhz == 333.0 and preset("ultra96").bus_bytes == 16
    assert preset("1x32").block_in == 32 and preset("1x64").block_out == 64
    assert preset("2x16").batch == 2 and preset("2x16").block_in == 16


def test_unknown_preset():
    with pytest.raises(TargetError, match="unknown VTA preset 'zz'"):
        preset("zz")


@pytest.mark.parametrize("changes, msg", [
    (dict(log_acc_buff_size=18), "acc depth 4096"),          # 12-bit dst factors overflow
    (dict(log_inp_buff_size=16), "inp depth 4096"),
    (dict(log_wgt_buff_size=19), "wgt depth 2048"),
    (dict(log_uop_buff_size=16), "uop buffer depth 16384"),
    (dict(log_inp_width=4), "8-bit inputs"),
    (dict(log_block_in=9), "log_block_in=9"),
    (dict(log_acc_buff_size=5), "smaller than one element"),
    (dict(bus_bytes=12), "power of two"),
    (dict(clock_mhz=0.0), "clock_mhz"),
    (dict(host_gmacs=0.0), "host_gmacs"),
    (dict(host_gmacs=float("nan")), "host_gmacs"),
    (dict(alu_ii=-1), "alu_ii"),
    (dict(log_batch=1.5), "must be an integer"),
])
def test_invalid_configs(changes, msg):
    with pytest.raises(TargetError, match=msg) as e:
        VTAConfig(name="bad", **changes)
    assert "'bad'" in str(e.value)


def test_smaller_buffers_get_narrower_fields():
    c = VTAConfig(log_acc_buff_size=15, log_inp_buff_size=13, name="small")
    L = layout_for(c)
    assert L.field("uop", "dst").width == 9 and L.field("gemm", "src_factor_in").width == 9
    # The micro-op src field must index ACC for the ALU as well as INP for GEMM.
    assert L.field("uop", "src").width == 9


def test_dict_roundtrip_and_json(tmp_path):
    c = preset("1x32")
    assert VTAConfig.from_dict(c.to_dict()) == c
    p = tmp_path / "c.json"
    p.write_text(json.dumps(c.to_dict()))
    assert load_config(str(p)) == c
    assert load_config(None) == PRESETS["pynq"] and load_config("2x16") == PRESETS["2x16"]
    with pytest.raises(TargetError, match="unknown VTA config field"):
        VTAConfig.from_dict({"log_blok": 3})
    with pytest.raises(TargetError, match="unknown VTA config"):
        load_config("nope")
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(TargetError, match="not valid JSON"):
        load_config(str(bad))
