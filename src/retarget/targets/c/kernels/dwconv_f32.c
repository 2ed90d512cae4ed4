/* rt_dwconv_f32: a depthwise convolution (group = C = K, one filter per channel) of an NCHW
   input with its zero padding done inside the routine (pt rows above, pl columns left; the
   rows and columns past H and W that the window reaches read zero too), the weights as they
   are ([C][1][R][S]), and the same fused epilogue as rt_conv_f32 (bias, residual add,
   activation):

     y[n, c, oh, ow] = act(bias[c] + sum_{r,s} xpad[n, c, oh*sh + r, ow*sw + s] * w[c, r, s]
                           + res[n, c, oh, ow])

   No padded copy of the input is made: the input rows a block of output rows reads are
   staged into a small per-thread buffer, padded and split into their sw column phases
   (phase q holds the padded columns q, q + sw, q + 2 sw, ...), so that the taps of RT_VL
   neighbouring outputs are RT_VL contiguous floats at any stride. A whole block is staged
   before it is read: a vector load right after the narrow stores that wrote its row would
   wait for them (no store-to-load forwarding), which made a row-at-a-time ring 3x slower on
   14 x 14 planes. An output vector then
   accumulates its R x S taps in registers (rt_dw_row: one summation order per lane whatever
   the vector width). Threads split the channel planes. */
#define RT_DW_STAGE 8192      /* floats of a thread's staged rows: at least R of
                                 sw * rt_dw_phase_len each */
#define RT_DW_TAPS 64         /* at most R * S taps */
/* routines.py dw_fits sizes the staging buffer for vectors of at most 16 lanes */
typedef char rt_dw_vl_at_most_16[RT_VL <= 16 ? 1 : -1];

/* The floats of one column phase of a staged row: the outputs rounded up to whole vectors,
   plus the furthest tap's offset. */
RT_INLINE int rt_dw_phase_len(int OW, int S, int sw)
{
    return (OW + RT_VL - 1) / RT_VL * RT_VL + (S - 1) / sw;
}

/* Column `col` of a row of W, `fill` outside it. */
RT_INLINE float rt_dw_col(const float *xr, int col, int W, float fill)
{
    return col >= 0 && col < W ? xr[col] : fill;
}

/* Input row `ih` of one plane (`fill` outside 0..H-1) into `dst`, padded by pl columns and
   split into sw phases of `len` floats. */
RT_INLINE void rt_dw_stage_row(const float *restrict xp, float *restrict dst, int ih, int H,
                               int W, int pl, int sw, int len, float fill)
{
    int q, j;
    /* plain loops, not memset / memcpy: the rows are short (7 to 30 floats on 7 x 7 to
       28 x 28 planes), where a library call costs about what the copy does (measured: 5 %
       of a 14 x 14 layer) */
    if (ih < 0 || ih >= H) {
        for (j = 0; j < sw * len; j++) dst[j] = fill;
        return;
    }
    xp += (ptrdiff_t)ih * W;
    if (sw == 1) {      /* the common case: one phase, a copy between zero borders */
        int n = W < len - pl ? W : len - pl;
        for (j = 0; j < pl && j < len; j++) dst[j] = fill;
        for (j = 0; j < n; j++) dst[pl + j] = xp[j];
        for (j = pl + (n > 0 ? n : 0); j < len; j++) dst[j] = fill;
        return;
    }
    if (sw == 2) {      /* stride 2: both phases in one loop, which vectorises as loads of
                           pairs; j0 <= j < j1 reads columns 2j - pl and 2j + 1 - pl inside */
        int j0 = (pl + 1) / 2, j1 = (W + pl) / 2;
        if (j1 > len) j1 = len;
        if (j0 > j1) j0 = j1;
        for (j = 0; j < len; j++) {
            if (j == j0)
                for (; j < j1; j++) {
                    dst[j] = xp[2 * j - pl];
                    dst[len + j] = xp[2 * j + 1 - pl];
                }
            if (j == len)
                break;
            dst[j] = rt_dw_col(xp, 2 * j - pl, W, fill);
            dst[len + j] = rt_dw_col(xp, 2 * j + 1 - pl, W, fill);
        }
        return;
    }
    for (q = 0; q < sw; q++)    /* phase q, column j: input column j * sw + q - pl */
        for (j = 0; j < len; j++)
            dst[q * len + j] = rt_dw_col(xp, j * sw + q - pl, W, fill);
}

/* One output row: `taps[t]` is where tap t of output column 0 lies in the staged rows `in`.
   A constant R x S (the 3 x 3 case below) unrolls the tap loop and keeps the weights in
   registers.
   `room`: the floats from y to the end of the plane. A vector that runs past the row but not
   past the plane is stored whole (its spill lands on the next rows, which are written after
   this one): narrow rows (7 or 14 columns) then need no lane-by-lane tail. */
RT_INLINE void rt_dw_row(const float *restrict in, const int *restrict taps,
                         const float *restrict wc, float b, const float *restrict res,
                         float *restrict y, int RS, int OW, ptrdiff_t room, int act, float lo,
                         float hi)
{
    RT_ALIGN64 float out[RT_VL];
    int ow, t, l;
    for (ow = 0; ow < OW; ow += RT_VL) {
        /* three partial sums (taps t, t + 3, ...: a 3 x 3 window's columns), so that the
           adds of a narrow row are not one chain of R * S */
        rt_vf acc = rt_vbcast(b), acc1 = rt_vbcast(0.0f), acc2 = rt_vbcast(0.0f);
        for (t = 0; t + 3 <= RS; t += 3) {
            acc = rt_vfma(acc, rt_vload(in + taps[t] + ow), wc[t]);
            acc1 = rt_vfma(acc1, rt_vload(in + taps[t + 1] + ow), wc[t + 1]);
            acc2 = rt_vfma(acc2, rt_vload(in + taps[t + 2] + ow), wc[t + 2]);
        }
        for (; t < RS; t++)
            acc = rt_vfma(acc, rt_vload(in + taps[t] + ow), wc[t]);
        acc = rt_vadd(rt_vadd(acc, acc1), acc2);
        if (ow + RT_VL <= room) {
            if (res) acc = rt_vadd(acc, rt_vload(res + ow));
            rt_vstore(y + ow, rt_vact(acc, act, lo, hi));
            continue;
        }
        rt_vstore(out, acc);      /* the plane's last, partial vector */
        for (l = 0; l < OW - ow; l++) {
            float v = out[l];
            if (res) v = v + res[ow + l];
            y[ow + l] = rt_act(v, act, lo, hi);
        }
    }
}

/* One output row of a max pool: the largest tap, -inf to start with, a tap taken where it
   is strictly larger (the loop-nest IR's max: a NaN tap is passed over), taps in (r, s)
   order. */
RT_INLINE void rt_max_row(const float *restrict in, const int *restrict taps,
                          float *restrict y, int RS, int OW, ptrdiff_t room)
{
    RT_ALIGN64 float out[RT_VL];
    int ow, t, l;
    for (ow = 0; ow < OW; ow += RT_VL) {
        rt_vf acc = rt_vbcast(-INFINITY);
        for (t = 0; t < RS; t++)
            acc = rt_vmax(acc, rt_vload(in + taps[t] + ow));
        if (ow + RT_VL <= room) {
            rt_vstore(y + ow, acc);
            continue;
        }
        rt_vstore(out, acc);
        for (l = 0; l < OW - ow; l++) y[ow + l] = out[l];
    }
}

/* The plane loop of rt_dwconv_f32 and rt_maxpool_f32 (`max`): stage, then one row at a
   time. */
RT_INLINE void rt_window_f32(const float *restrict x, const float *restrict w,
                             const float *restrict bias, const float *restrict res,
                             float *restrict y, int N, int C, int H, int W, int pt, int pl,
                             int R, int S, int sh, int sw, int OH, int OW, int act, float lo,
                             float hi, int max)
{
    int len = rt_dw_phase_len(OW, S, sw), row = sw * rt_dw_phase_len(OW, S, sw);
    int block = (RT_DW_STAGE / row - R) / sh + 1;   /* output rows per staged block */
    int p;
    RT_PARALLEL_FOR
    for (p = 0; p < N * C; p++) {
        RT_ALIGN64 float stage[RT_DW_STAGE];
        int taps[RT_DW_TAPS];
        int c = p % C, oh0, oh, i, r, s;
        const float *xp = x + (ptrdiff_t)p * H * W;
        const float *wc = max ? 0 : w + (ptrdiff_t)c * R * S;
        float b = bias ? bias[c] : 0.0f;
        for (r = 0; r < R; r++)
            for (s = 0; s < S; s++) taps[r * S + s] = r * row + (s % sw) * len + s / sw;
        for (oh0 = 0; oh0 < OH; oh0 += block) {
            int rows = OH - oh0 < block ? OH - oh0 : block;
            for (i = 0; i < (rows - 1) * sh + R; i++)
                rt_dw_stage_row(xp, stage + i * row, oh0 * sh - pt + i, H, W, pl, sw, len,
                                max ? -INFINITY : 0.0f);
            for (oh = oh0; oh < oh0 + rows; oh++) {
                ptrdiff_t o = ((ptrdiff_t)p * OH + oh) * OW, room = (ptrdiff_t)(OH - oh) * OW;
                const float *in = stage + (oh - oh0) * sh * row;
                if (max)
                    rt_max_row(in, taps, y + o, R * S, OW, room);
                else if (R == 3 && S == 3)
                    rt_dw_row(in, taps, wc, b, res ? res + o : 0, y + o, 9, OW, room, act, lo,
                              hi);
                else
                    rt_dw_row(in, taps, wc, b, res ? res + o : 0, y + o, R * S, OW, room,
                              act, lo, hi);
            }
        }
    }
}

static void rt_dwconv_f32(const float *restrict x, const float *restrict w,
                          const float *restrict bias, const float *restrict res,
                          float *restrict y, int N, int C, int H, int W, int pt, int pl,
                          int R, int S, int sh, int sw, int OH, int OW, int act, float lo,
                          float hi)
{
    rt_window_f32(x, w, bias, res, y, N, C, H, W, pt, pl, R, S, sh, sw, OH, OW, act, lo, hi,
                  0);
}

/* rt_maxpool_f32: MaxPool (2-D, no dilation) of an NCHW input, its padding (and ceil_mode's
   overhang) read as -inf inside the routine: y[n, c, oh, ow] = max over the R x S window at
   (oh * sh - pt, ow * sw - pl). The arguments are rt_dwconv_f32's; w, bias and res are
   unused (NULL) and act is RT_ACT_NONE. */
static void rt_maxpool_f32(const float *restrict x, const float *restrict w,
                           const float *restrict bias, const float *restrict res,
                           float *restrict y, int N, int C, int H, int W, int pt, int pl,
                           int R, int S, int sh, int sw, int OH, int OW, int act, float lo,
                           float hi)
{
    (void)w; (void)bias; (void)res; (void)act; (void)lo; (void)hi;
    rt_window_f32(x, 0, 0, 0, y, N, C, H, W, pt, pl, R, S, sh, sw, OH, OW, RT_ACT_NONE, 0.0f,
                  0.0f, 1);
}
