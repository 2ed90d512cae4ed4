/* rt_pointwise_f32: a 1x1 convolution (any stride) as the matrix product it is,
   Y[K][P] = W[K][C] X[C][P] over the P = OH*OW output positions, with the same fused
   epilogue as rt_conv_f32 (bias, residual add, activation):

     y[n, k, p] = act(bias[k] + sum_c x[n, c, oh*sh, ow*sw] * w[k, c] + res[n, k, p])
                  where p = oh * OW + ow

   and, the same way, a convolution of an R x S window over few input channels (a network's
   first layer), its rows of X the im2col rows (c, r, s), read as zero in the padding (pt
   rows above, pl columns left: no padded copy of the input):

     y[n, k, p] = act(bias[k] + sum_{c,r,s} xpad[n, c, oh*sh + r, ow*sw + s] w[k, c, r, s]
                      + res[n, k, p])

   The vectors run along the positions, so the output rows (contiguous in NCHW) are stored
   whole, epilogue and all; the weights are broadcast from wp[ceil(K/RT_PB)][C][R][S][RT_PB],
   packed at build time, zero past K (below, C counts the rows of X: C R S). For a group of
   RT_PW positions a thread first copies their inputs into a panel [C][RT_PW] (zero past P;
   at stride > 1 this gathers them), which then streams from L1/L2 for every block of output
   channels instead of being re-read from RT_PW-float pieces of C rows far apart. A tile is
   RT_PB output channels by RT_PV vectors of positions, summing the channels in order (one
   summation order per lane, whatever the vector width).
   Any C: a panel holds RT_PC channels, so a wider layer is reduced in chunks of at most
   RT_PC channels, the panel packed once per chunk (when the chunk is small, a band of
   several groups' panels, so that each weight is loaded once per band). Between chunks a
   tile's partial sums wait in its own output elements (stored and reloaded exactly, so each
   lane still adds its channels one by one from 0 in order: the chunking changes no bit);
   the last chunk applies the epilogue. Threads split the (band, channel block) pairs into
   contiguous ranges of about equal cost (rt_pw_share), each thread packing a band's chunk
   once for the blocks of its range. */
#define RT_PB 12              /* output channels per packed weight block (routines.py) */
#if RT_VL >= 16
#define RT_PV 2               /* 12 x 2 accumulators: 24 of AVX-512's 32 registers */
#else
#define RT_PV 1               /* 12 of AVX2's 16 */
#endif
#define RT_PW (RT_PV * RT_VL)
#define RT_PANEL 16384        /* floats of a thread's panel */
#define RT_PC (RT_PANEL / 32)  /* channels per chunk: what a panel holds at the widest RT_PW */
/* How far ahead (floats) a tile prefetches its weights, which stream from L3 or memory in
   pieces of at most RT_PC * RT_PB floats: measured, ResNet-50's 1x1 calls take 21.5 ms
   with it against 26.7 without (one thread; docs/benchmarks.md, bench_aot_c, "1 x 1 layers
   of any width on the panel GEMM"). */
#define RT_PF 768
typedef char rt_pw_panel_holds_rt_pc[RT_PW <= 32 ? 1 : -1];

#ifdef _OPENMP
#include <omp.h>
#endif

/* What a group of np positions costs a channel: its multiply-adds (rt_pw_block's RT_PB x
   RT_PV vectors whole or partial, rt_pw_tail's 8 or RT_PW_TAIL accumulators). */
#define RT_PW_TAIL 16
RT_INLINE long rt_pw_group_cost(int np)
{
    if (RT_VL >= RT_PB && np <= 8) return 8;
    if (RT_VL >= RT_PB && np <= RT_PW_TAIL) return RT_PW_TAIL;
    return RT_PB * RT_PV;
}

/* The cost of band b of `band` groups (all whole but a map's last group). */
RT_INLINE long rt_pw_band_cost(int b, int band, int groups, int P)
{
    int gn = groups - b * band < band ? groups - b * band : band;
    int last = P - (b * band + gn - 1) * RT_PW;      /* the positions of its last group */
    return (gn - 1) * rt_pw_group_cost(RT_PW) + rt_pw_group_cost(last);
}

/* The first of the (band, block) items, band-major, each costing its band's cost, that
   starts at or past `target`. */
RT_INLINE int rt_pw_item_at(long target, int bands, int blocks, int band, int groups, int P)
{
    long cum = 0, cost;
    int b;
    for (b = 0; b < bands; b++, cum += cost * blocks) {
        cost = rt_pw_band_cost(b, band, groups, P);
        if (cum + cost * blocks > target)
            return b * blocks + (int)((target - cum + cost - 1) / cost);
    }
    return bands * blocks;
}

/* This thread's share [*first, *last) of the items: contiguous, of about equal cost, so that
   the thread whose share holds a map's last, short group (a 14 x 14 map's last 4 positions)
   takes more blocks. Measured on two threads against equal counts of items: MobileNet v1's
   rt_pointwise_f32 calls 2.36 -> 2.22 ms, its 14 x 14 x 512 ones 0.237 -> 0.223 each
   (docs/benchmarks.md, bench_aot_c, "Issue 30, fourth round"). */
RT_INLINE void rt_pw_share(int bands, int blocks, int band, int groups, int P, int *first,
                           int *last)
{
#ifdef _OPENMP
    long t = omp_get_thread_num(), nt = omp_get_num_threads(), total = 0;
    int b;
    for (b = 0; b < bands; b++) total += rt_pw_band_cost(b, band, groups, P) * blocks;
    *first = rt_pw_item_at(total * t / nt, bands, blocks, band, groups, P);
    *last = rt_pw_item_at(total * (t + 1) / nt, bands, blocks, band, groups, P);
#else
    (void)band; (void)groups; (void)P;
    *first = 0;
    *last = bands * blocks;
#endif
}

/* A window's geometry: the input H x W padded by pt rows above and pl columns left, an
   R x S window at strides sh, sw, OW outputs per row. */
typedef struct { int H, W, pt, pl, R, S, sh, sw, OW; } rt_pw_geom;

RT_INLINE void rt_pw_zero(float *restrict d, int n)
{
    int k;
    for (k = 0; k < n; k++) d[k] = 0.0f;
}

/* d[k] = xr[iw + k sw] for k < n, zero where that column is outside 0 .. W - 1: zeros,
   then the columns inside (whole vectors at strides 1 and 2), then zeros. */
RT_INLINE void rt_pw_row(float *restrict d, const float *restrict xr, int iw, int W, int sw,
                         int n)
{
    int k = 0, hi = n;
    if (iw < 0) {                       /* the columns left of the row */
        k = (-iw + sw - 1) / sw;
        k = k < n ? k : n;
        rt_pw_zero(d, k);
    }
    if (iw + (n - 1) * sw >= W)         /* hi: the first output past the row */
        hi = W - iw > 0 ? (W - iw + sw - 1) / sw : 0;
    hi = hi > k ? hi : k;
    if (sw == 1)
        for (; k + RT_VL <= hi; k += RT_VL) rt_vstore(d + k, rt_vload(xr + iw + k));
    else if (sw == 2)
        for (; k + RT_VL <= hi && iw + 2 * k + 2 * RT_VL <= W; k += RT_VL)
            rt_vstore(d + k, rt_veven(rt_vload(xr + iw + 2 * k),
                                      rt_vload(xr + iw + 2 * k + RT_VL)));
    for (; k < hi; k++) d[k] = xr[iw + k * sw];
    rt_pw_zero(d + hi, n - hi);
}

/* Panel rows i0 .. i0 + n - 1 for positions p0 .. p0 + np - 1, zero past np. Row i is
   input channel i / (R S) at window offset (r, s) = (i / S % R, i % S): for a 1 x 1 window
   the channel itself, else the im2col row of that tap, reading zero in the padding. */
RT_INLINE void rt_pw_pack(const float *restrict x, float *restrict panel, int i0, int n,
                          rt_pw_geom g, int p0, int np)
{
    ptrdiff_t HW = (ptrdiff_t)g.H * g.W;
    int i, j;
    for (i = 0; i < n; i++) {
        int row = i0 + i, c = row / (g.R * g.S), r = row / g.S % g.R, s = row % g.S;
        const float *xc = x + c * HW;
        float *d = panel + i * RT_PW;
        int oh = p0 / g.OW, ow = p0 % g.OW;
        if (g.R == 1 && g.S == 1 && g.sh == 1 && g.sw == 1 && g.pt == 0 && g.pl == 0) {
            memcpy(d, xc + p0, (size_t)np * sizeof(float));   /* the input's positions */
        } else if (g.R == 1 && g.S == 1 && g.pt == 0 && g.pl == 0) {
            for (j = 0; j < np; j++) {
                d[j] = xc[(ptrdiff_t)oh * g.sh * g.W + (ptrdiff_t)ow * g.sw];
                if (++ow == g.OW) { ow = 0; oh++; }
            }
        } else {
            for (j = 0; j < np;) {          /* a run of one output row at a time */
                int run = g.OW - ow < np - j ? g.OW - ow : np - j;
                int ih = oh * g.sh + r - g.pt;
                if (ih < 0 || ih >= g.H)
                    rt_pw_zero(d + j, run);
                else
                    rt_pw_row(d + j, xc + (ptrdiff_t)ih * g.W, ow * g.sw + s - g.pl, g.W,
                              g.sw, run);
                j += run;
                ow = 0;
                oh++;
            }
        }
        for (j = np; j < RT_PW; j++) d[j] = 0.0f;
    }
}

RT_INLINE void rt_pw_tile(const float *restrict panel, const float *restrict wb,
                          rt_vf acc[RT_PB][RT_PV], int C)
{
    int c, i, v;
    for (c = 0; c < C; c++) {
        rt_vf xv[RT_PV];
#if RT_VECTOR_EXTENSIONS
        __builtin_prefetch(wb + RT_PF);    /* a hint: past the weights it reads nothing */
#endif
        for (v = 0; v < RT_PV; v++) xv[v] = rt_vload(panel + c * RT_PW + v * RT_VL);
        for (i = 0; i < RT_PB; i++)
            for (v = 0; v < RT_PV; v++) acc[i][v] = rt_vfma(acc[i][v], xv[v], wb[i]);
        wb += RT_PB;
    }
}

/* Output channels kb * RT_PB .. (those below K) at positions p0 .. p0 + np - 1, over the
   `cn` channels of the panel, whose weights start at wb: from 0 (`first` chunk) or from the
   partial sums in y, to the partial sums in y or (`last` chunk) through the epilogue. */
RT_INLINE void rt_pw_block(const float *restrict panel, const float *restrict wb,
                           const float *restrict bias, const float *restrict rn,
                           float *restrict yn, int K, int P, int kb, int p0, int np, int cn,
                           int first, int last, int act, float lo, float hi)
{
    RT_ALIGN64 float out[RT_PW];       /* a partial group's lanes, through memory */
    rt_vf acc[RT_PB][RT_PV];
    int i, v, j;
    for (i = 0; i < RT_PB; i++) {
        int k = kb * RT_PB + i;
        const float *part = out;
        if (first || k >= K) {
            for (v = 0; v < RT_PV; v++) acc[i][v] = rt_vbcast(0.0f);
            continue;
        }
        if (np == RT_PW)
            part = yn + (ptrdiff_t)k * P + p0;
        else
            for (j = 0; j < RT_PW; j++) out[j] = j < np ? yn[(ptrdiff_t)k * P + p0 + j] : 0.0f;
        for (v = 0; v < RT_PV; v++) acc[i][v] = rt_vload(part + v * RT_VL);
    }
    rt_pw_tile(panel, wb, acc, cn);
    for (i = 0; i < RT_PB && kb * RT_PB + i < K; i++) {
        int k = kb * RT_PB + i;
        ptrdiff_t o = (ptrdiff_t)k * P + p0;
        rt_vf b = rt_vbcast(bias ? bias[k] : 0.0f);
        for (v = 0; v < RT_PV; v++) {
            /* the epilogue, as rt_conv_f32's: bias + sum, + res, act */
            rt_vf t = last ? rt_vadd(b, acc[i][v]) : acc[i][v];
            if (np < RT_PW) {
                rt_vstore(out + v * RT_VL, t);
                continue;
            }
            if (last && rn) t = rt_vadd(t, rt_vload(rn + o + v * RT_VL));
            rt_vstore(yn + o + v * RT_VL, last ? rt_vact(t, act, lo, hi) : t);
        }
        for (j = 0; j < (np < RT_PW ? np : 0); j++) {  /* a partial group */
            float t = out[j];
            if (last && rn) t = t + rn[o + j];
            yn[o + j] = last ? rt_act(t, act, lo, hi) : t;
        }
    }
}

/* A last group of at most RT_PW_TAIL positions (a 14 x 14 map's last 4, a 28 x 28 one's
   last 16) turned around: the block's 12 output channels in the lanes of one vector, a
   position's input broadcast, `nt` accumulators (8 or RT_PW_TAIL, a constant the compiler
   unrolls into registers; those past np sum the panel's zeros). Each output still sums its
   channels one by one in order from the same start, so the bits are the positions-in-lanes
   tile's, but the group costs nt multiply-adds a channel instead of 24 vectors mostly idle
   (MobileNet v1's 14 x 14 1 x 1 layers 0.477 -> 0.431 ms a call; a 7 x 7 map's last 17, at
   20 accumulators, gained nothing). Needs RT_VL >= RT_PB. */
RT_INLINE void rt_pw_tail(const float *restrict panel, const float *restrict wb,
                          const float *restrict bias, const float *restrict rn,
                          float *restrict yn, int K, int P, int kb, int p0, int np, int cn,
                          int first, int last, int nt, int act, float lo, float hi)
{
    RT_ALIGN64 float lanes[RT_VL];
    rt_vf acc[RT_PW_TAIL], w;
    int kn = K - kb * RT_PB < RT_PB ? K - kb * RT_PB : RT_PB, i, j, c;
    for (j = 0; j < nt; j++) {
        for (i = 0; i < RT_VL; i++)
            lanes[i] = first || i >= kn || j >= np ? 0.0f :
                       yn[(ptrdiff_t)(kb * RT_PB + i) * P + p0 + j];
        acc[j] = rt_vload(lanes);
    }
    for (c = 0; c < cn; c++) {
        if (c + 1 < cn) {
            w = rt_vload(wb + c * RT_PB);     /* lanes past 12: the next channel's, unused */
        } else {                              /* the last: not past the weights' end */
            for (i = 0; i < RT_VL; i++) lanes[i] = i < RT_PB ? wb[c * RT_PB + i] : 0.0f;
            w = rt_vload(lanes);
        }
        for (j = 0; j < nt; j++) acc[j] = rt_vfma(acc[j], w, panel[c * RT_PW + j]);
    }
    for (j = 0; j < np; j++) {
        rt_vstore(lanes, acc[j]);
        for (i = 0; i < kn; i++) {
            ptrdiff_t o = (ptrdiff_t)(kb * RT_PB + i) * P + p0 + j;
            float t = lanes[i];
            if (last) {       /* the epilogue, as rt_pw_block's: bias + sum, + res, act */
                t = (bias ? bias[kb * RT_PB + i] : 0.0f) + t;
                if (rn) t = t + rn[o];
                t = rt_act(t, act, lo, hi);
            }
            yn[o] = t;
        }
    }
}

static void rt_pointwise_f32(const float *restrict x, const float *restrict wp,
                             const float *restrict bias, const float *restrict res,
                             float *restrict y, int N, int C0, int H, int W, int pt, int pl,
                             int R, int S, int sh, int sw, int K, int OH, int OW, int act,
                             float lo, float hi)
{
    /* C: the panel rows, an input channel per row (1 x 1) or per tap (im2col) */
    int C = C0 * R * S, P = OH * OW, blocks = (K + RT_PB - 1) / RT_PB;
    int groups = (P + RT_PW - 1) / RT_PW;
    int chunks = (C + RT_PC - 1) / RT_PC, chunk = (C + chunks - 1) / chunks;  /* even ones */
    rt_pw_geom geom = {H, W, pt, pl, R, S, sh, sw, OW};
    int band = RT_PANEL / (RT_PW * chunk), bands;
    int n;
    band = band < groups ? band : groups;
    bands = (groups + band - 1) / band;
    for (n = 0; n < N; n++) {
        const float *xn = x + (ptrdiff_t)n * C0 * H * W;
        const float *rn = res ? res + (ptrdiff_t)n * K * P : 0;
        float *yn = y + (ptrdiff_t)n * K * P;
#ifdef _OPENMP
#pragma omp parallel
#endif
        {
            RT_ALIGN64 float panel[RT_PANEL];
            int first, last, b;
            rt_pw_share(bands, blocks, band, groups, P, &first, &last);
            for (b = first / blocks; first < last && b * blocks < last; b++) {
                int g0 = b * band, gn = groups - g0 < band ? groups - g0 : band;
                int kb0 = first > b * blocks ? first - b * blocks : 0;
                int kb1 = last < (b + 1) * blocks ? last - b * blocks : blocks;
                int c0, kb, g;
                for (c0 = 0; c0 < C; c0 += chunk) {
                    int cn = C - c0 < chunk ? C - c0 : chunk;
                    for (g = 0; g < gn; g++) {
                        int p0 = (g0 + g) * RT_PW;
                        rt_pw_pack(xn, panel + g * cn * RT_PW, c0, cn, geom, p0,
                                   P - p0 < RT_PW ? P - p0 : RT_PW);
                    }
                    for (kb = kb0; kb < kb1; kb++)
                        for (g = 0; g < gn; g++) {
                            /* first and last chunk as constants: four inlined copies */
                            int p0 = (g0 + g) * RT_PW, np = P - p0 < RT_PW ? P - p0 : RT_PW;
                            const float *pg = panel + g * cn * RT_PW;
                            const float *wb = wp + ((ptrdiff_t)kb * C + c0) * RT_PB;
#define RT_PW_BLOCK(f, l) rt_pw_block(pg, wb, bias, rn, yn, K, P, kb, p0, np, cn, f, l, \
                                      act, lo, hi)
#define RT_PW_TAIL_CALL(f, l, nt) rt_pw_tail(pg, wb, bias, rn, yn, K, P, kb, p0, np, cn, \
                                             f, l, nt, act, lo, hi)
#define RT_PW_TAIL_CASES(nt) { \
                                if (c0 == 0 && c0 + cn == C) RT_PW_TAIL_CALL(1, 1, nt); \
                                else if (c0 == 0) RT_PW_TAIL_CALL(1, 0, nt); \
                                else if (c0 + cn == C) RT_PW_TAIL_CALL(0, 1, nt); \
                                else RT_PW_TAIL_CALL(0, 0, nt); }
                            /* (the tail's accumulator count as a constant too) */
                            if (RT_VL >= RT_PB && np <= 8) RT_PW_TAIL_CASES(8)
                            else if (RT_VL >= RT_PB && np <= RT_PW_TAIL)
                                RT_PW_TAIL_CASES(RT_PW_TAIL)
                            else if (c0 == 0 && c0 + cn == C) RT_PW_BLOCK(1, 1);
                            else if (c0 == 0) RT_PW_BLOCK(1, 0);
                            else if (c0 + cn == C) RT_PW_BLOCK(0, 1);
                            else RT_PW_BLOCK(0, 0);
#undef RT_PW_TAIL_CASES
#undef RT_PW_TAIL_CALL
#undef RT_PW_BLOCK
                        }
                }
            }
        }
    }
}

/* rt_pointwise_cl_f32: a 1 x 1 layer at stride 1 on a map of few positions (MobileNet v1's
   and ResNet-50's 7 x 7 ones), turned around: the vectors along the output channels, the
   weights packed wp[ceil(K/16)][C][16], a position's input broadcast straight from x (its
   channels P floats apart), RT_CL_NT positions at a time. Positions in lanes, 49 positions
   fill 64 lanes, and rt_pw_tail's 12-channel blocks fill 12 of 16; here every lane is an
   output. A map's last group of positions starts early enough to end at its last position
   (it recomputes some outputs of the group before it, which write the same values). Each
   output sums its channels one by one from 0 in order, then bias + sum, + res, act:
   rt_pointwise_f32's order, so the same bits. */
#define RT_CL_B 16                       /* output channels per packed block (routines.py) */
#define RT_CL_V (RT_CL_B / RT_VL)        /* vectors of a block: 1 (AVX-512) or 2 */
#define RT_CL_NT (RT_CL_V == 1 ? 25 : 12 / RT_CL_V)   /* positions: 25 accumulators */
typedef char rt_cl_block_is_whole_vectors[RT_CL_B % RT_VL == 0 ? 1 : -1];

/* Output channels kb * 16 .. (those below K) at positions p0 .. p0 + nt - 1 (nt: a constant
   once inlined), over all C channels, through the epilogue. */
RT_INLINE void rt_cl_group(const float *restrict xn, const float *restrict wb,
                           const float *restrict bias, const float *restrict rn,
                           float *restrict yn, int C, int K, int P, int kb, int p0, int nt,
                           int act, float lo, float hi)
{
    RT_ALIGN64 float lanes[RT_CL_B];
    rt_vf acc[RT_CL_NT][RT_CL_V], w[RT_CL_V], b[RT_CL_V];
    const float *xc = xn + p0;
    int kn = K - kb * RT_CL_B < RT_CL_B ? K - kb * RT_CL_B : RT_CL_B, c, i, j, v;
    RT_UNROLL
    for (j = 0; j < nt; j++)
        for (v = 0; v < RT_CL_V; v++) acc[j][v] = rt_vbcast(0.0f);
    for (c = 0; c < C; c++, xc += P, wb += RT_CL_B) {
#if RT_VECTOR_EXTENSIONS
        __builtin_prefetch(wb + RT_PF);    /* a hint: past the weights it reads nothing */
#endif
        for (v = 0; v < RT_CL_V; v++) w[v] = rt_vload(wb + v * RT_VL);
        RT_UNROLL
        for (j = 0; j < nt; j++)
            for (v = 0; v < RT_CL_V; v++) acc[j][v] = rt_vfma(acc[j][v], w[v], xc[j]);
    }
    for (i = 0; i < RT_CL_B; i++) lanes[i] = bias && i < kn ? bias[kb * RT_CL_B + i] : 0.0f;
    for (v = 0; v < RT_CL_V; v++) b[v] = rt_vload(lanes + v * RT_VL);
    for (j = 0; j < nt; j++) {
        for (v = 0; v < RT_CL_V; v++) {   /* the epilogue: bias + sum, (+ res,) act */
            rt_vf t = rt_vadd(b[v], acc[j][v]);
            rt_vstore(lanes + v * RT_VL, rn ? t : rt_vact(t, act, lo, hi));
        }
        for (i = 0; i < kn; i++) {
            ptrdiff_t o = (ptrdiff_t)(kb * RT_CL_B + i) * P + p0 + j;
            yn[o] = rn ? rt_act(lanes[i] + rn[o], act, lo, hi) : lanes[i];
        }
    }
}

/* Every group of nt positions (P >= nt) of block kb. */
RT_INLINE void rt_cl_groups(const float *restrict xn, const float *restrict wb,
                            const float *restrict bias, const float *restrict rn,
                            float *restrict yn, int C, int K, int P, int kb, int nt, int act,
                            float lo, float hi)
{
    int p0 = 0, last = 0;
    for (; !last; p0 += nt) {
        if (p0 + nt >= P) p0 = P - nt, last = 1;
        rt_cl_group(xn, wb, bias, rn, yn, C, K, P, kb, p0, nt, act, lo, hi);
    }
}

/* The arguments are rt_pointwise_f32's; the window is 1 x 1 at stride 1, unpadded
   (check_routine holds it to that), so H W = OH OW = P. */
static void rt_pointwise_cl_f32(const float *restrict x, const float *restrict wp,
                                const float *restrict bias, const float *restrict res,
                                float *restrict y, int N, int C, int H, int W, int pt, int pl,
                                int R, int S, int sh, int sw, int K, int OH, int OW, int act,
                                float lo, float hi)
{
    int P = OH * OW, blocks = (K + RT_CL_B - 1) / RT_CL_B, n, kb;
    (void)H; (void)W; (void)pt; (void)pl; (void)R; (void)S; (void)sh; (void)sw;
    for (n = 0; n < N; n++) {
        const float *xn = x + (ptrdiff_t)n * C * P;
        const float *rn = res ? res + (ptrdiff_t)n * K * P : 0;
        float *yn = y + (ptrdiff_t)n * K * P;
        RT_PARALLEL_FOR
        for (kb = 0; kb < blocks; kb++) {
            const float *wb = wp + (ptrdiff_t)kb * C * RT_CL_B;
            /* the positions a group takes (at most P), a constant in each inlined copy */
#define RT_CL_GROUPS(nt) rt_cl_groups(xn, wb, bias, rn, yn, C, K, P, kb, \
                                      (nt) < RT_CL_NT ? (nt) : RT_CL_NT, act, lo, hi)
            if (P >= RT_CL_NT) RT_CL_GROUPS(RT_CL_NT);
            else if (P >= 8) RT_CL_GROUPS(8);
            else if (P >= 4) RT_CL_GROUPS(4);
            else RT_CL_GROUPS(1);
#undef RT_CL_GROUPS
        }
    }
}
