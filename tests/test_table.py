"""table.py: alignment, footers, number formatting, bad rows."""
from __future__ import annotations

import numpy as np
import pytest

from retarget.table import format_cell, format_table, si


def test_columns_align_and_footer_is_ruled_off():
    text = format_table(["op", "n", "MACs"], [["Conv", 20, si(1.8e9)], ["Gemm", 1, "512K"]],
                        footer=[["total", 21, "1.8G"]], title="by op")
    lines = text.splitlines()
    assert lines[0] == "by op"
    assert lines[1] == "op      n  MACs" and lines[2] == "-----  --  ----"
    assert lines[3] == "Conv   20  1.8G" and lines[4] == "Gemm    1  512K"
    assert lines[5] == lines[2] and lines[6] == "total  21  1.8G"
    assert len({len(line) for line in lines[1:]}) == 1  # every row as wide as the header


def test_explicit_alignment_and_cell_formats():
    text = format_table(["a", "b"], [[1234567, 0.5], [np.int64(3), np.float32(1 / 3)]],
                        align="<<")
    assert text.splitlines()[2] == "1,234,567  0.5"
    assert text.splitlines()[3] == "3          0.3333"
    assert format_cell(None) == "" and format_cell(True) == "True"


def test_si_prefixes():
    assert [si(x) for x in (0, 950, 1500, 11_689_512, 1.82e9, 3e12)] == \
        ["0", "950", "1.5K", "11.7M", "1.82G", "3T"]


def test_bad_rows_and_alignment_raise():
    with pytest.raises(ValueError, match="2 cells"):
        format_table(["a", "b", "c"], [[1, 2]])
    with pytest.raises(ValueError, match="align"):
        format_table(["a"], [[1]], align="^")
