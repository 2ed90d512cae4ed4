"""Lowering integer layers onto VTA (docs/vta-lowering.md).

    ctx = LoweringContext(cfg)
    x = ctx.input("x", (1, 64, 56, 56))
    y = lower_conv2d(ctx, Conv2d("c2", (1, 64, 56, 56), 64, (3, 3), pads=(1, 1, 1, 1),
                                 requant=Requant(8, 0, 127)), x, weight, bias)
    seg = ctx.finish([y])
    run = run_segment(seg, {"x": x_int8})      # run.outputs["c2/out"], run.result.counters
"""
from .alu import Region, emit_requant, requant_vectors
from .choose import (choose_schedule, lower_batched_matmul, lower_conv2d, lower_dense,
                     lower_pool2d, lower_requantize, lower_residual_add)
from .conv import pack_conv_weight
from .context import LayerReport, LoweredSegment, LoweringContext, TokenTracker
from .layers import (Conv2d, Dense, Layer, Pool2d, Requant, RequantizeLayer, ResidualAdd,
                     conv_groups, reason)
from .reference import reference
from .run import SegmentRun, dram_image, run_segment
from .schedule import CostFn, Estimate, Schedule, candidates, check_schedule, dram_cost, estimate
from .tensor import PackedTensor
from .tuning import (compute_floor, conv_cycles, model_cost, model_cycles, model_schedule,
                     time_schedule)

__all__ = ["Conv2d", "CostFn", "Dense", "Estimate", "LayerReport", "Layer",
           "LoweredSegment", "LoweringContext", "PackedTensor", "Pool2d", "Region", "Requant",
           "RequantizeLayer", "ResidualAdd", "Schedule", "SegmentRun", "TokenTracker",
           "candidates", "check_schedule", "choose_schedule", "conv_groups", "dram_cost",
           "dram_image", "emit_requant", "estimate", "lower_batched_matmul", "lower_conv2d", "lower_dense", "lower_pool2d",
           "lower_requantize", "lower_residual_add", "compute_floor", "conv_cycles", "model_cost", "model_cycles",
           "model_schedule", "time_schedule",
           "pack_conv_weight", "reason", "reference", "requant_vectors", "run_segment"]
