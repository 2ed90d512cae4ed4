"""The conv tile walk (lower/walk.py) is what the emitter emits: on random convolutions and
schedules, the LOAD INP / LOAD WGT / GEMM / reset / STORE instructions of the lowered layer are
the ones the walk's records call for, and the records themselves cover the layer."""
import numpy as np
import pytest

from retarget.targets.vta.config import preset
from retarget.targets.vta.isa import GemmInsn, MemInsn, MemType, Opcode
from retarget.targets.vta.lower import (Conv2d, LoweringContext, Requant, Schedule, candidates,
                                        check_schedule)
from retarget.targets.vta.lower.conv import _window, lower_conv2d_for_timing
from retarget.targets.vta.lower.schedule import conv_geom
from retarget.targets.vta.lower.walk import PhaseStep, conv_rounds, conv_walk


def random_conv(rng, cfg) -> Conv2d:
    groups = int(rng.choice([1, 1, 2]))
    cin = int(rng.choice([16, 32, 48, 64])) * groups
    cout = int(rng.choice([16, 32, 64])) * groups
    k = int(rng.choice([1, 3]))
    stride = int(rng.choice([1, 2]))
    pad = int(rng.integers(0, k))
    h, w = int(rng.integers(3, 12)), int(rng.integers(3, 12))
    n = int(rng.choice([1, 1, 2])) * cfg.batch
    return Conv2d("c", (n, cin, h, w), cout, (k, k), (stride, stride), (pad,) * 4, groups,
                  Requant(7, 0, 127))


def counts_by_walk(g, s) -> dict:
    """Instructions the walk's records call for (the last tile's stores aside: the emitter cuts
    them in pieces to overlap its own epilogue)."""
    want = dict.fromkeys(("inp", "wgt", "gemm", "reset"), 0)
    for t in conv_walk(g, s):
        p = t.pos
        want["reset"] += 1
        _, r_n, ypb, ypa, rows = g.row_window(p.oh0, p.th)
        _, c_n, xpb, xpa, cols = _window(p.ow0, p.tw, g.sw, g.kw, g.pads[1], g.w)
        for st in t.steps:
            if st.load_input:
                if g.h * g.w == 1 and rows * cols == 1:     # one 2-D load of a matrix
                    want["inp"] += 1
                elif r_n == g.h and c_n == g.w and not (ypb or ypa or xpb or xpa):
                    want["inp"] += p.tn                     # whole images, one per batch block
                else:
                    want["inp"] += p.tn * st.phase.nci      # one window per input block
            want["wgt"] += st.load_weights
            want["gemm"] += 1 if p.th * p.tw == 1 else p.tn
    return want


def counts_emitted(layer, cfg, s) -> dict:
    ctx = LoweringContext(cfg)
    y = lower_conv2d_for_timing(ctx, layer, ctx.input("x", layer.in_shape), s)
    got = dict.fromkeys(("inp", "wgt", "gemm", "reset", "store"), 0)
    for i in ctx.finish([y]).program.insns:
        if isinstance(i, MemInsn) and i.y_size * i.x_size == 0:
            continue                  # the empty loads finish() ends a stream with
        if isinstance(i, MemInsn) and i.opcode is Opcode.LOAD:
            got["inp"] += i.memory_type is MemType.INP
            got["wgt"] += i.memory_type is MemType.WGT
        elif isinstance(i, MemInsn) and i.opcode is Opcode.STORE:
            got["store"] += 1
        elif isinstance(i, GemmInsn):
            got["reset" if i.reset else "gemm"] += 1
    return got


def random_cases(cfg, seed: int, layers: int, per_thread_count: int):
    """(layer, geometry, schedule): random convolutions, each with random fitting schedules
    of one and of two threads."""
    rng = np.random.default_rng(seed)
    for _ in range(layers):
        layer = random_conv(rng, cfg)
        g = conv_geom(layer, cfg)
        for v in (1, 2):
            cands = candidates(layer, cfg, v)
            for j in rng.choice(len(cands), min(per_thread_count, len(cands)), replace=False):
                yield layer, g, cands[j]


@pytest.mark.parametrize("cfg_name", ["pynq", "1x32"])
def test_emitted_loads_and_gemms_are_the_walks(cfg_name):
    cfg = preset(cfg_name)
    checked = 0
    for layer, g, s in random_cases(cfg, 29, 6, 3):
        got = counts_emitted(layer, cfg, s)
        want = counts_by_walk(g, s)
        assert {k: got[k] for k in want} == want, (layer, s)
        tiles = list(conv_walk(g, s))
        assert got["store"] >= len(tiles), (layer, s)     # at least one per tile
        checked += 1
    assert checked >= 12


def test_walk_covers_the_layer_once_and_alternates_threads():
    for layer, g, s in random_cases(preset("pynq"), 3, 8, 12):
        v = s.vthreads
        tiles = list(conv_walk(g, s))
        covered = np.zeros((g.nb, g.cob, g.oh, g.ow), dtype=int)
        for t in tiles:
            p, c = t.pos, t.cout
            covered[p.n0:p.n0 + p.tn, c.c0:c.c0 + c.tco, p.oh0:p.oh0 + p.th,
                    p.ow0:p.ow0 + p.tw] += 1
            assert t.thread == t.index % v
            assert t.more == (t.index + v < len(tiles))
            # the phases reduce the whole of the tile's groups, once
            assert sum(st.phase.tci for st in t.steps) == g.cig
            assert [st.index for st in t.steps] == list(range(len(t.steps)))
            assert [st.last for st in t.steps] == [False] * (len(t.steps) - 1) + [True]
            # two tiles never share both input and weights: every phase loads
            assert all(st.load_input or st.load_weights for st in t.steps)
        # the loads are those of a thread keeping what it loaded last
        held_in, held_w = [None] * v, [None] * v
        for t in tiles:
            for st in t.steps:
                ph = st.phase
                want_in = (tuple(t.pos), ph.ci0, ph.nci)
                want_w = (t.cout.c0, t.cout.tco, ph.p0, ph.tci)
                assert st.load_input == (held_in[t.thread] != want_in), (layer, s, t)
                assert st.load_weights == (held_w[t.thread] != want_w), (layer, s, t)
                held_in[t.thread], held_w[t.thread] = want_in, want_w
        assert (covered == 1).all(), (layer, s)
        assert [t.index for t in tiles] == list(range(len(tiles)))
        rounds = list(conv_rounds(g, s))
        assert [t for r in rounds for t in r] == tiles
        assert all(len(r) == v for r in rounds[:-1]) and 0 < len(rounds[-1]) <= v


def test_a_thread_reloads_only_what_it_does_not_hold():
    # 64 -> 64 channels as one channel tile of one phase: with one thread, every tile needs
    # the weights the previous one loaded; with two, each thread keeps its own copy after its
    # first tile. The input changes with every position.
    cfg = preset("pynq")
    layer = Conv2d("c", (1, 64, 8, 8), 64, (3, 3), (1, 1), (1, 1, 1, 1), 1, Requant(7, 0, 127))
    g = conv_geom(layer, cfg)
    for v in (1, 2):
        s = Schedule(tile_n=1, tile_h=2, tile_w=8, tile_co=g.cob, tile_ci=g.cig, vthreads=v)
        check_schedule(layer, cfg, s)
        tiles = list(conv_walk(g, s))
        assert len(tiles) > v
        assert [t.steps[0].load_weights for t in tiles] == [True] * v + [False] * (len(tiles) - v)
        assert all(t.steps[0].load_input for t in tiles)


def test_phase_step_fields_in_the_order_the_cost_model_unpacks_them():
    # tuning.conv_cycles reads PhaseStep by unpacking (its hot loop): a reordering must fail here
    assert PhaseStep._fields == ("phase", "index", "last", "load_input", "load_weights")
