"""The schedule search ranks without lowering (lower/tuning.py): on every convolution and dense
layer the zoo's networks give the vta target, the analytic estimate's choice must be within 1 %
of the best schedule the full cycle model finds among the candidates (tuning.choice_vs_model:
all of them when there are few, else the estimate's best 12 of each thread count).
benchmarks/bench_vta_estimate.py runs the same check at 224 px."""
import pytest

from retarget import compiler
from retarget.targets.vta.lower import Conv2d, Dense, tuning

from ..e2e.conftest import build_graph, calibration_for


def conv_geometries(name: str) -> list:
    """(layer geometry, config) of every conv/dense layer the search saw compiling `name`."""
    tuning.clear_cache()
    g = build_graph(name)
    compiler.compile(g, "vta", calibration=calibration_for(g, 1))
    out = []
    for layer, cfg, vthreads in tuning.searched_layers():
        if vthreads is None and isinstance(layer, (Conv2d, Dense)):
            out.append((layer, cfg))
    return out


@pytest.mark.parametrize("name", ["resnet18", "resnet50", "mobilenet_v1", "googlenet"])
def test_estimate_choice_within_one_percent_of_the_model(name):
    geoms = conv_geometries(name)
    assert geoms
    worst = max((tuning.choice_vs_model(layer, cfg) + (layer,) for layer, cfg in geoms),
                key=lambda r: r[0])
    assert worst[0] <= 1.01, worst
