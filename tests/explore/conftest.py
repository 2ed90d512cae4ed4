"""A tiny problem for the explore tests: zoo ResNet-18 at 32 x 32, a quarter of the width,
quantised once per session; and a space of 8 vta points around pynq."""
import pytest

from retarget.explore import Problem
from retarget.targets.vta.target import VTATarget

# 2 x 2 x 2 = 8 points. The four with log_acc_buff_size=9 (8 accumulator entries) meet the
# space's constraints but leave no tiling for the max-pool: they fail to compile.
SPACE = {"only": True,
         "params": {"log_batch": [0, 1], "log_inp_buff_size": [14, 15],
                    "log_acc_buff_size": [9, 17]}}


@pytest.fixture(scope="session")
def problem():
    return Problem.prepare("zoo:resnet18:0.25", "vta", size=32)


@pytest.fixture()
def space():
    return VTATarget.design_space().restricted(SPACE)
