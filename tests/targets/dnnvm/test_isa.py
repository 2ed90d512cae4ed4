"""The dnnvm ISA: every field round-trips at its extremes, range errors name the field, and
malformed words are refused."""
import random

import pytest

from retarget.targets.dnnvm.isa import (CLASSES, INSN_BYTES, SIGNED, WIDTHS, Conv, IsaError,
                                        Load, Opcode, decode_insn, decode_stream, encode_insn,
                                        encode_stream, field_names)


def extremes(name):
    bits = WIDTHS[name]
    if name in SIGNED:
        return [-(1 << (bits - 1)), -1, 0, (1 << (bits - 1)) - 1]
    return [0, 1, (1 << bits) - 1]


@pytest.mark.parametrize("opcode", list(Opcode), ids=lambda o: o.name)
def test_every_field_round_trips_at_every_extreme(opcode):
    cls = CLASSES[opcode]
    rng = random.Random(int(opcode))
    for name in field_names(opcode) + ("wait", "signal"):
        for v in (extremes(name) if name in WIDTHS else [0, 1, 31]):
            others = {n: rng.choice(extremes(n)) for n in field_names(opcode) if n != name}
            insn = cls(**{**others, name: v}, **({} if name in ("wait", "signal") else
                                                  {"wait": 5, "signal": 17}))
            raw = encode_insn(insn)
            assert len(raw) == INSN_BYTES
            assert decode_insn(raw) == insn


def test_range_errors_name_the_field():
    with pytest.raises(IsaError, match=r"#3 CONV: field kh=16 outside 0..15 \(4 bits\)"):
        encode_insn(Conv(kh=16), 3)
    with pytest.raises(IsaError, match="shift=-65"):
        encode_insn(Conv(shift=-65))
    with pytest.raises(IsaError, match="wait=32"):
        encode_insn(Load(wait=32))
    with pytest.raises(IsaError, match="ddr_addr"):
        encode_insn(Load(ddr_addr=1 << 32))


def test_malformed_words_are_refused():
    with pytest.raises(IsaError, match="unknown opcode 9"):
        decode_insn(bytes([9]) + bytes(INSN_BYTES - 1))
    with pytest.raises(IsaError, match="non-zero bits above"):
        decode_insn(bytes([int(Opcode.END)]) + bytes(INSN_BYTES - 2) + b"\x80")
    with pytest.raises(IsaError, match="whole number"):
        decode_stream(b"\x00" * 33)
    stream = [Load(rows=3), Conv(kh=3, kw=3)]
    assert decode_stream(encode_stream(stream)) == stream
