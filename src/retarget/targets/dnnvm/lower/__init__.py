"""Lowering integer layers onto the dnnvm overlay, split the way targets/vta/lower/ is:

- tiles.py: feature maps in DDR, convolution tiles, what fits the buffers, the candidates and
  the analytical estimates a tile search ranks them by;
- buffers.py: on-chip buffer bookkeeping (double-buffered slots, resident weights, pool bands);
- lowering.py: `Lowering`, which emits the instruction stream layer by layer and fused group
  by fused group, and the tile choices that time their best candidates on a scratch lowering
  with the cycle model.
"""
from .lowering import (CC_JUDGED, PG_JUDGED, Lowering, choose_conv_conv_tile, choose_conv_tile,
                       choose_pool_group_tile, conv_pool_tile, time_conv, time_conv_conv)
# the tile-choice caches (benchmarks clear them to time cold compiles)
from .lowering import _CC_CHOICES, _CHOICES, _PG_CHOICES  # noqa: F401
from .tiles import (ISA_MAX_DIM, JUDGE_GAP, MAX_PAD, NEAR, ConvConvTile, ConvHead, ConvTile,
                    FeatureMap, conv_candidates, conv_conv_candidates, conv_conv_estimate,
                    conv_conv_fit, conv_conv_ok, conv_conv_resident, conv_estimate, conv_fit,
                    eq5_tile, pool_group_fit, pool_group_ok)

__all__ = ["CC_JUDGED", "ConvConvTile", "ConvHead", "ConvTile", "FeatureMap", "ISA_MAX_DIM",
           "JUDGE_GAP", "Lowering", "MAX_PAD", "NEAR", "PG_JUDGED", "choose_conv_conv_tile",
           "choose_conv_tile", "choose_pool_group_tile", "conv_candidates",
           "conv_conv_candidates", "conv_conv_estimate", "conv_conv_fit", "conv_conv_ok",
           "conv_conv_resident", "conv_estimate", "conv_fit", "conv_pool_tile", "eq5_tile",
           "pool_group_fit", "pool_group_ok", "time_conv", "time_conv_conv"]
