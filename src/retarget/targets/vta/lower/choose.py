"""The schedule a layer is lowered with when its caller gives none, and the layer lowerings
that ask for it: the package's lower_conv2d, lower_dense, lower_batched_matmul, lower_pool2d,
lower_residual_add and lower_requantize.

conv.py and alu_layers.py lower a layer with the schedule they are given. The cycle model
(tuning.py) times candidate schedules by lowering them, so choosing a schedule comes after
lowering in the import order, and lowering with a chosen schedule after both: this module.
"""
from __future__ import annotations

from functools import wraps

from ....errors import TargetError
from ..config import VTAConfig
from . import alu_layers, conv
from .layers import Layer, reason
from .schedule import CostFn, Schedule, candidates, estimate
from .tuning import model_schedule


def choose_schedule(layer: Layer, cfg: VTAConfig, vthreads: int | None = None,
                    cost: CostFn | None = None) -> Schedule:
    """The schedule to lower `layer` with (TargetError naming the layer when it cannot be
    lowered or no tiling fits).

    vthreads: 1 or 2, or None to let the choice include the thread count. cost: None (the
    default) lets the cycle model decide (tuning.model_schedule: candidates ranked
    analytically, the best few timed with timing.simulate_timing, cached by geometry and
    config); a CostFn instead picks the candidate of least cost(layer, cfg, schedule,
    estimate), e.g. dram_cost (fast, DRAM traffic only) or tuning.model_cost (times all)."""
    why = reason(layer, cfg)
    if why:
        raise TargetError(why)
    if cost is None:
        best = model_schedule(layer, cfg, vthreads)
    else:
        cands = ([] if vthreads == 2 else candidates(layer, cfg, vthreads or 1)) + \
            ([] if vthreads == 1 else candidates(layer, cfg, vthreads or 2))
        best = min(cands, key=lambda s: cost(layer, cfg, s, estimate(layer, cfg, s)),
                   default=None)
    if best is None:
        raise TargetError(f"{type(layer).__name__} '{layer.name}': no tiling fits the SRAMs of "
                          f"config {cfg.name!r} with {vthreads or '1 or 2'} virtual thread(s) "
                          f"(inp {cfg.inp_depth}, wgt {cfg.wgt_depth}, acc {cfg.acc_depth} "
                          "entries)")
    return best


def _with_chosen_schedule(lower):
    """`lower` (which takes schedule=) with schedule, vthreads and cost optional: no schedule
    given, choose_schedule(layer, cfg, vthreads, cost) picks it."""
    @wraps(lower, assigned=("__module__", "__name__", "__qualname__"))
    def lower_layer(ctx, layer, *args, schedule: Schedule | None = None,
                    vthreads: int | None = None, cost: CostFn | None = None, **kwargs):
        if schedule is None:
            schedule = choose_schedule(layer, ctx.cfg, vthreads, cost)
        return lower(ctx, layer, *args, schedule=schedule, **kwargs)
    lower_layer.__doc__ = (f"{lower.__doc__}\n\n    schedule: optional here; none given, "
                           "choose_schedule(layer, cfg, vthreads, cost) picks it.")
    del lower_layer.__wrapped__       # its signature is its own (the schedule optional)
    return lower_layer


lower_conv2d = _with_chosen_schedule(conv.lower_conv2d)
lower_dense = _with_chosen_schedule(conv.lower_dense)
lower_batched_matmul = _with_chosen_schedule(conv.lower_batched_matmul)
lower_pool2d = _with_chosen_schedule(alu_layers.lower_pool2d)
lower_residual_add = _with_chosen_schedule(alu_layers.lower_residual_add)
lower_requantize = _with_chosen_schedule(alu_layers.lower_requantize)
