/* rt_dwconv_f32: a depthwise convolution (group = C = K, one filter per channel) of an NCHW
   input with its zero padding done inside the routine (pt rows above, pl columns left; the
   rows and columns past H and W that the window reaches read zero too), the weights as they
   are ([C][1][R][S]), and the same fused epilogue as rt_conv_f32 (bias, residual add,
   activation):

     y[n, c, oh, ow] = act(bias[c] + sum_{r,s} xpad[n, c, oh*sh + r, ow*sw + s] * w[c, r, s]
                           + res[n, c, oh, ow])

   No padded copy of the input is made. A layer (or max pool) of at least RT_VL channels and
   at most RT_DW_LANES_MAX outputs a plane goes across channels (below: RT_VL channels a vector,
   threads splitting the groups of RT_VL channels). Otherwise, and for the channels left
   over, threads split the channel planes, and a plane is staged into a small per-thread
   buffer one of two ways:

   - flat (strides 1 and 2, a plane whose staged phases fit the buffer; at stride 1 only
     planes of at most RT_DW_FLAT1 floats, where it measured faster): the plane split into
     its sh x sw phases, each OW columns wide, so that an output plane is one run of vectors
     over oh * OW + ow (a 7 x 7 plane is 4 vectors, not 7 rows of one);
   - by rows (any other layer): blocks of input rows, padded and split into their sw column
     phases, an output row at a time.

   Either way the RT_VL outputs of a vector take their taps as contiguous loads, and every
   lane sums its R x S taps in the same order (three partial sums, below), so the three
   paths give the same bits and so does a build of any vector width. */
#define RT_DW_STAGE 16384     /* floats of a thread's staged rows: at least R of
                                 sw * rt_dw_phase_len each */
#define RT_DW_TAPS 64         /* at most R * S taps */
#define RT_DW_MAXS 16         /* at most S window columns on the flat path */
#ifndef RT_DW_FLAT
#define RT_DW_FLAT 1          /* 0: every layer by rows (the tests compare the two paths) */
#endif
/* Stride-1 planes up to this many staged floats go flat: one thread, MobileNet v1's
   depthwise layers (docs/benchmarks.md, bench_aot_c, "Depthwise layers flat"): 28 x 28
   0.073 -> 0.063 ms flat, 56 x 56 0.129 -> 0.119, but 112 x 112 0.104 -> 0.122, where the
   whole plane staged at once stays in L1 no longer. */
#define RT_DW_FLAT1 4096
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

/* floor(a / b) for b > 0 */
RT_INLINE int rt_dw_floordiv(int a, int b) { return a >= 0 ? a / b : -((b - 1 - a) / b); }

/* The flat path. A plane is staged split into its sh x sw phases (phase (a, b) row i,
   column j holds input row sh*i + a, column sw*j + b; at stride 1 the one phase is the plane
   itself), each OW columns wide (sw * OW >= W: they hold all its input columns) with
   `fill` around and past the input, so that tap (r, s) of output q = oh*OW + ow lies at
   q + dr*OW + ds of one phase, where r - pt = sh*dr + a and s - pl = sw*ds + b. A lane
   whose ow + ds leaves 0 .. OW - 1 would read the row before or after: it takes `fill`
   instead (a lane mask). The fill is written once per call and never overwritten: a plane
   writes the same rows and columns as the one before. */
typedef struct {
    int front;         /* floats before a phase's row 0: what dr < 0 and ds < 0 reach */
    int rows;          /* phase rows staged: 0 .. OH - 1 + max dr */
    int len;           /* floats of one phase: front, rows, then what the last vector's
                          lanes past the plane and the furthest tap reach (and the vector
                          after them) */
} rt_dw_flat_t;

RT_INLINE rt_dw_flat_t rt_dw_flat(int pt, int pl, int R, int S, int sh, int sw, int OH,
                                  int OW)
{
    rt_dw_flat_t f;
    int drmin = rt_dw_floordiv(-pt, sh), dsmin = rt_dw_floordiv(-pl, sw);
    int drmax = rt_dw_floordiv(R - 1 - pt, sh), dsmax = rt_dw_floordiv(S - 1 - pl, sw);
    f.front = -drmin * OW - dsmin;      /* and a vector more: rt_dw_flat_plane3 reads it */
    f.front = (f.front > 0 ? f.front : 0) + RT_VL;
    f.rows = OH + (drmax > 0 ? drmax : 0);
    f.len = f.front + f.rows * OW + (dsmax > 0 ? dsmax : 0) + 2 * RT_VL;
    return f;
}

/* Phase rows 0 .. f.rows - 1 of plane xp into the staged phases (their fill is already in
   place and is never overwritten). */
RT_INLINE void rt_dw_flat_stage(const float *restrict xp, float *restrict stage, rt_dw_flat_t f,
                                int H, int W, int sh, int sw, int OW)
{
    int a, i, j;
    if (sh == 1 && sw == 1 && OW == W) {      /* the plane itself, one copy */
        ptrdiff_t n = (ptrdiff_t)(H < f.rows ? H : f.rows) * W, k;
        float *d = stage + f.front;
        for (k = 0; k + RT_VL <= n; k += RT_VL) rt_vstore(d + k, rt_vload(xp + k));
        for (; k < n; k++) d[k] = xp[k];
        return;
    }
    for (i = 0; i < f.rows; i++)         /* the input rows in order: one stream */
        for (a = 0; a < sh && sh * i + a < H; a++) {
            const float *xr = xp + (ptrdiff_t)(sh * i + a) * W;
            float *d0 = stage + (ptrdiff_t)a * sw * f.len + f.front + (ptrdiff_t)i * OW;
            if (sw == 1) {
                int n = W < OW ? W : OW;
                for (j = 0; j + RT_VL <= n; j += RT_VL) rt_vstore(d0 + j, rt_vload(xr + j));
                for (; j < n; j++) d0[j] = xr[j];
            } else {                          /* sw == 2: even columns to phase b = 0 */
                float *d1 = d0 + f.len;
                int n0 = (W + 1) / 2 < OW ? (W + 1) / 2 : OW, n1 = W / 2 < OW ? W / 2 : OW;
                for (j = 0; 2 * j + 2 * RT_VL <= W && j + RT_VL <= n1; j += RT_VL) {
                    rt_vf u = rt_vload(xr + 2 * j), v = rt_vload(xr + 2 * j + RT_VL);
                    rt_vstore(d0 + j, rt_veven(u, v));
                    rt_vstore(d1 + j, rt_vodd(u, v));
                }
                for (; j < n1; j++) {
                    d0[j] = xr[2 * j];
                    d1[j] = xr[2 * j + 1];
                }
                for (; j < n0; j++) d0[j] = xr[2 * j];
            }
        }
}

/* Outputs q0 .. q0 + RT_VL - 1 of a plane from acc: + res, the activation (not for a max
   pool). */
RT_INLINE void rt_dw_store(rt_vf acc, const float *restrict res, float *restrict y, int q0,
                           int act, float lo, float hi, int max)
{
    if (res) acc = rt_vadd(acc, rt_vload(res + q0));
    rt_vstore(y + q0, max ? acc : rt_vact(acc, act, lo, hi));
}

/* Outputs q0 .. of a flat plane of P from acc, as rt_dw_store; the plane's last, partial
   vector through memory, lane by lane. */
RT_INLINE void rt_dw_flat_store(rt_vf acc, const float *restrict res, float *restrict y,
                                int q0, int P, int act, float lo, float hi, int max)
{
    RT_ALIGN64 float out[RT_VL];
    int l;
    if (q0 + RT_VL <= P) {
        rt_dw_store(acc, res, y, q0, act, lo, hi, max);
        return;
    }
    rt_vstore(out, acc);
    for (l = 0; l < P - q0; l++) {
        float v = out[l];
        if (res) v = v + res[q0 + l];
        y[q0 + l] = max ? v : rt_act(v, act, lo, hi);
    }
}

/* One plane's outputs, RT_VL lanes q0 .. q0 + RT_VL - 1 at a time. toff[t]: where tap t of
   output 0 lies in the stage; ds[s]: window column s's ds; lanes: ow of lanes 0 ..
   RT_VL - 1, RT_VL % OW and OW in every lane. */
RT_INLINE void rt_dw_flat_plane(const float *restrict stage, rt_dw_flat_t f,
                                const int *restrict toff, const int *restrict ds,
                                const float *restrict wc, float b, const float *restrict res,
                                float *restrict y, int R, int S, int OH, int OW,
                                const rt_vi *lanes, int act, float lo, float hi, float fill,
                                int max)
{
    int P = OH * OW, q0, r, s, t;
    rt_vi ow = lanes[0], step = lanes[1], vOW = lanes[2];
    rt_vf vfill = rt_vbcast(fill);
    for (q0 = 0; q0 < P; q0 += RT_VL) {
        rt_vf acc[3], v;
        rt_vi outside[RT_DW_MAXS];
        const float *in = stage + f.front + q0;
        for (s = 0; s < S; s++) outside[s] = rt_vi_outside(ow, ds[s], vOW);
        if (max) acc[0] = rt_vbcast(-INFINITY);
        else acc[0] = rt_vbcast(b), acc[1] = rt_vbcast(0.0f), acc[2] = rt_vbcast(0.0f);
        for (r = 0, t = 0; r < R; r++)
            for (s = 0; s < S; s++, t++) {
                v = rt_vload(in + toff[t]);
                if (ds[s]) v = rt_vsel(outside[s], v, vfill);
                if (max) acc[0] = rt_vmax(acc[0], v);
                /* rt_dw_row's partial sums: taps t, t + 3, ... into one (its tail taps
                   past the last whole three into the first) */
                else acc[t < R * S / 3 * 3 ? t % 3 : 0] =
                        rt_vfma(acc[t < R * S / 3 * 3 ? t % 3 : 0], v, wc[t]);
            }
        if (!max) acc[0] = rt_vadd(rt_vadd(acc[0], acc[1]), acc[2]);
        ow = rt_vi_step(ow, step, vOW);
        rt_dw_flat_store(acc[0], res, y, q0, P, act, lo, hi, max);
    }
}

/* rt_dw_flat_plane for a 3 x 3 window at stride 1 padded by one column (ds = -1, 0, 1):
   each window row's vector is loaded once per output vector, its left and right columns
   being lane shifts of it and the vectors beside it (one load instead of three, each of
   them across two cache lines: 14 x 14 planes 0.043 -> 0.037 ms a layer). The same taps
   in the same order, so the same bits. */
RT_INLINE void rt_dw_flat_plane3(const float *restrict stage, rt_dw_flat_t f,
                                 const float *restrict wc, float b, const float *restrict res,
                                 float *restrict y, int OH, int OW, int pt, const rt_vi *lanes,
                                 int act, float lo, float hi, float fill, int max)
{
    int P = OH * OW, q0, r;
    rt_vi ow = lanes[0], step = lanes[1], vOW = lanes[2];
    rt_vf vfill = rt_vbcast(fill), prev[3], cur[3];
    const float *row[3];
    for (r = 0; r < 3; r++) {
        row[r] = stage + f.front + (r - pt) * OW;
        prev[r] = rt_vload(row[r] - RT_VL);
        cur[r] = rt_vload(row[r]);
    }
    for (q0 = 0; q0 < P; q0 += RT_VL) {
        rt_vf acc[3];
        rt_vi left = rt_vi_outside(ow, -1, vOW), right = rt_vi_outside(ow, 1, vOW);
        if (max) acc[0] = rt_vbcast(-INFINITY);
        else acc[0] = rt_vbcast(b), acc[1] = rt_vbcast(0.0f), acc[2] = rt_vbcast(0.0f);
        for (r = 0; r < 3; r++) {
            rt_vf next = rt_vload(row[r] + q0 + RT_VL);
            rt_vf vl = rt_vsel(left, rt_vprev1(prev[r], cur[r]), vfill);
            rt_vf vr = rt_vsel(right, rt_vnext1(cur[r], next), vfill);
            if (max) {
                acc[0] = rt_vmax(rt_vmax(rt_vmax(acc[0], vl), cur[r]), vr);
            } else {
                acc[0] = rt_vfma(acc[0], vl, wc[3 * r]);
                acc[1] = rt_vfma(acc[1], cur[r], wc[3 * r + 1]);
                acc[2] = rt_vfma(acc[2], vr, wc[3 * r + 2]);
            }
            prev[r] = cur[r];
            cur[r] = next;
        }
        if (!max) acc[0] = rt_vadd(rt_vadd(acc[0], acc[1]), acc[2]);
        ow = rt_vi_step(ow, step, vOW);
        rt_dw_flat_store(acc[0], res, y, q0, P, act, lo, hi, max);
    }
}

/* Across channels (a depthwise convolution or max pool of at least RT_VL channels; ResNet's
   3 x 3 stride-2 pool on 112 x 112 x 64: 0.294 -> 0.157 ms a call): RT_VL channels at
   a time, a vector's lanes being the group's channels at one position, as in a blocked
   NCHW[16c] layout. A small plane's own vectors are mostly row edges and lane masks (a
   7 x 7 plane is 4 vectors for 49 outputs); across channels every tap of every output is
   one whole, aligned vector. A band of the group's input rows is staged transposed,
   [rows][cols][RT_VL] with `fill` around the input, and RT_VL outputs at a time are
   transposed back into their channel planes for the epilogue. Every lane sums its taps in
   rt_dw_row's order, so the paths give the same bits. */
#ifndef RT_DW_LANES
#define RT_DW_LANES 1         /* 0: no layer across channels (the tests compare the paths) */
#endif
/* Layers of at most this many output positions a plane go across channels: measured in
   MobileNet v1 (docs/benchmarks.md, bench_aot_c, "Issue 30, fourth round"), its
   56 x 56 outputs gain (0.177 -> 0.150 ms at stride 1, 0.141 -> 0.126 at stride 2 from
   112 x 112) and its 112 x 112 ones lose (0.146 -> 0.161), where a plane's own vectors are
   mostly whole. */
#ifndef RT_DW_LANES_MAX
#define RT_DW_LANES_MAX 4096
#endif

typedef struct {
    int cols;          /* staged columns: pl + W or what the taps reach */
    int band;          /* output rows per staged band */
    int rows;          /* staged rows of a whole band */
} rt_dw_lanes_t;

/* The band: as many output rows as the stage holds, rounded down to make band * OW whole
   vectors where that leaves any (so that only a plane's last vector is partial); band 0:
   not even one output row fits. */
RT_INLINE rt_dw_lanes_t rt_dw_lanes(int W, int pl, int R, int S, int sh, int sw, int OH,
                                    int OW)
{
    rt_dw_lanes_t g;
    int cols = (OW - 1) * sw + S, whole = 1;
    g.cols = cols > pl + W ? cols : pl + W;
    g.band = ((RT_DW_STAGE / RT_VL / g.cols) - R) / sh + 1;
    if (g.band > OH) g.band = OH;
    while (whole * OW % RT_VL) whole++;
    if (g.band > whole && g.band < OH) g.band -= g.band % whole;
    if (g.band < 0) g.band = 0;
    g.rows = (g.band - 1) * sh + R;
    return g;
}

/* Staged rows 0 .. rows - 1 = input rows ih0 .. of the RT_VL planes from xg (`plane` floats
   apart), transposed: the rows inside the input RT_VL positions at a time (then the last
   ones float by float), `fill` across the others. The columns around the input hold
   `fill` from the start and are never written. */
RT_INLINE void rt_dw_lanes_stage(const float *restrict xg, ptrdiff_t plane,
                                 float *restrict stage, rt_dw_lanes_t g, int ih0, int rows,
                                 int H, int W, int pl, float fill)
{
    int a = ih0 < 0 ? (-ih0 < rows ? -ih0 : rows) : 0;       /* rows a .. b - 1 inside */
    int b = H - ih0 < rows ? H - ih0 : rows;
    int i, j, k, l, iw = 0;
    rt_vf m[RT_VL], vfill = rt_vbcast(fill);
    ptrdiff_t p0 = (ptrdiff_t)(ih0 + a) * W, end = (ptrdiff_t)(ih0 + b) * W;
    float *d = stage + ((ptrdiff_t)a * g.cols + pl) * RT_VL;
    for (i = 0; i < rows; i++)
        if (i < a || i >= b)
            for (j = 0; j < W; j++)
                rt_vstore(stage + ((ptrdiff_t)i * g.cols + pl + j) * RT_VL, vfill);
    for (; p0 + RT_VL <= end; p0 += RT_VL) {
        for (l = 0; l < RT_VL; l++) m[l] = rt_vload(xg + l * plane + p0);
        rt_vtranspose(m);
        for (k = 0; k < RT_VL; k++) {
            rt_vstore(d + iw * RT_VL, m[k]);
            if (++iw == W) iw = 0, d += (ptrdiff_t)g.cols * RT_VL;
        }
    }
    for (; p0 < end; p0++) {
        for (l = 0; l < RT_VL; l++) d[iw * RT_VL + l] = xg[l * plane + p0];
        if (++iw == W) iw = 0, d += (ptrdiff_t)g.cols * RT_VL;
    }
}

/* `n` outputs (n = 4 or 1: a constant once inlined) whose taps start at stage + at[j]:
   bias, then the taps in three partial sums as rt_dw_row adds them; or (`max`) the largest
   tap, taken in (r, s) order as rt_max_row takes it. */
RT_INLINE void rt_dw_lanes_out(const float *restrict stage, const int *restrict at,
                               const int *restrict toff, const rt_vf *restrict wv, rt_vf bv,
                               int RS, rt_vf *restrict out, int n, int max)
{
    rt_vf a0[4], a1[4], a2[4];
    int j, t;
    if (max) {
        for (j = 0; j < n; j++) {
            out[j] = rt_vbcast(-INFINITY);
            for (t = 0; t < RS; t++)
                out[j] = rt_vmax(out[j], rt_vload(stage + at[j] + toff[t]));
        }
        return;
    }
    for (j = 0; j < n; j++) a0[j] = bv, a1[j] = rt_vbcast(0.0f), a2[j] = rt_vbcast(0.0f);
    for (t = 0; t + 3 <= RS; t += 3)
        for (j = 0; j < n; j++) {
            const float *in = stage + at[j];
            a0[j] = rt_vfmav(a0[j], rt_vload(in + toff[t]), wv[t]);
            a1[j] = rt_vfmav(a1[j], rt_vload(in + toff[t + 1]), wv[t + 1]);
            a2[j] = rt_vfmav(a2[j], rt_vload(in + toff[t + 2]), wv[t + 2]);
        }
    for (; t < RS; t++)
        for (j = 0; j < n; j++) a0[j] = rt_vfmav(a0[j], rt_vload(stage + at[j] + toff[t]), wv[t]);
    for (j = 0; j < n; j++) out[j] = rt_vadd(rt_vadd(a0[j], a1[j]), a2[j]);
}

/* One group of RT_VL channels (planes c0 .. of image n, at x, res and y), band by band:
   each band staged, its outputs RT_VL positions at a time, transposed back, then + res and
   the activation per plane (a max pool's: stored as they are). */
RT_INLINE void rt_dw_lanes_group(const float *restrict x, float *restrict stage,
                                 rt_dw_lanes_t g, const int *restrict toff,
                                 const float *restrict w, const float *restrict bias,
                                 const float *restrict res, float *restrict y, int c0, int H,
                                 int W, int pt, int pl, int RS, int R, int sh, int sw, int OH,
                                 int OW, int act, float lo, float hi, float fill, int max)
{
    int P = OH * OW, oh0, q0, i, j, t, at[RT_VL];
    rt_vf wv[RT_DW_TAPS], out[RT_VL], bv = rt_vbcast(0.0f);
    RT_ALIGN64 float lanes[RT_VL];
    for (t = 0; t < (max ? 0 : RS); t++) {
        for (i = 0; i < RT_VL; i++) lanes[i] = w[(ptrdiff_t)(c0 + i) * RS + t];
        wv[t] = rt_vload(lanes);
    }
    if (bias && !max) bv = rt_vload(bias + c0);     /* a whole group: RT_VL channels */
    for (oh0 = 0; oh0 < OH; oh0 += g.band) {
        int oh1 = OH - oh0 < g.band ? OH : oh0 + g.band, oh = oh0, ow = 0;
        rt_dw_lanes_stage(x, (ptrdiff_t)H * W, stage, g, oh0 * sh - pt,
                          (oh1 - oh0 - 1) * sh + R, H, W, pl, fill);
        for (q0 = oh0 * OW; q0 < oh1 * OW; q0 += RT_VL) {
            int n = oh1 * OW - q0 < RT_VL ? oh1 * OW - q0 : RT_VL;
            for (j = 0; j < n; j++) {
                at[j] = ((oh - oh0) * sh * g.cols + ow * sw) * RT_VL;
                if (++ow == OW) ow = 0, oh++;
            }
            for (j = 0; j + 4 <= n; j += 4)
                if (RS == 9) rt_dw_lanes_out(stage, at + j, toff, wv, bv, 9, out + j, 4, max);
                else rt_dw_lanes_out(stage, at + j, toff, wv, bv, RS, out + j, 4, max);
            for (; j < n; j++)
                rt_dw_lanes_out(stage, at + j, toff, wv, bv, RS, out + j, 1, max);
            for (; j < RT_VL; j++) out[j] = rt_vbcast(0.0f);   /* past the band: not stored */
            rt_vtranspose(out);
            if (n == RT_VL) {
                /* whole vectors, unrolled so that out[] stays in registers: MobileNet v1's
                   shapes -11 % alone, -2 % in the network */
                RT_UNROLL
                for (i = 0; i < RT_VL; i++)
                    rt_dw_store(out[i], res ? res + (ptrdiff_t)i * P : 0, y + (ptrdiff_t)i * P,
                                q0, act, lo, hi, max);
            } else
                for (i = 0; i < RT_VL; i++) {
                    ptrdiff_t o = (ptrdiff_t)i * P;
                    rt_dw_flat_store(out[i], res ? res + o : 0, y + o, q0, oh1 * OW, act, lo,
                                     hi, max);
                }
        }
    }
}

/* The plane loop of rt_dwconv_f32 and rt_maxpool_f32 (`max`): each plane staged, then
   flat or by rows. */
RT_INLINE void rt_window_f32(const float *restrict x, const float *restrict w,
                             const float *restrict bias, const float *restrict res,
                             float *restrict y, int N, int C, int H, int W, int pt, int pl,
                             int R, int S, int sh, int sw, int OH, int OW, int act, float lo,
                             float hi, int max)
{
    int len = rt_dw_phase_len(OW, S, sw), row = sw * rt_dw_phase_len(OW, S, sw);
    int block = (RT_DW_STAGE / row - R) / sh + 1;   /* output rows per staged block */
    rt_dw_flat_t flat = rt_dw_flat(pt, pl, R, S, sh, sw, OH, OW);
    ptrdiff_t staged = (ptrdiff_t)flat.len * sh * sw;
    /* sw * OW >= W: a phase's OW columns hold all its input columns, so that a lane whose
       ow + ds leaves them reads padding (the lane mask's fill) */
    int use_flat = RT_DW_FLAT && sh <= 2 && sw <= 2 && S <= RT_DW_MAXS && sw * OW >= W &&
                   staged <= (sh * sw == 1 ? RT_DW_FLAT1 : RT_DW_STAGE);
    float fill = max ? -INFINITY : 0.0f;
    rt_dw_lanes_t across = rt_dw_lanes(W, pl, R, S, sh, sw, OH, OW);
    int groups = RT_DW_LANES && R * S <= RT_DW_TAPS && across.band > 0 &&
                 OH * OW <= RT_DW_LANES_MAX ? C / RT_VL : 0;
    int rest = C - groups * RT_VL;      /* the channels left to the plane paths */
#ifdef _OPENMP
#pragma omp parallel
#endif
    {
    RT_ALIGN64 float stage[RT_DW_STAGE];
    int taps[RT_DW_TAPS], ds[RT_DW_MAXS];
    RT_ALIGN64 int32_t lane[3][RT_VL];
    rt_vi lanes[3];
    int p, pr, r, s, k;
    if (groups) {
        for (r = 0; r < R; r++)
            for (s = 0; s < S; s++) taps[r * S + s] = (r * across.cols + s) * RT_VL;
        for (k = 0; k < across.rows * across.cols * RT_VL; k++) stage[k] = fill;
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
        for (p = 0; p < N * groups; p++) {
            ptrdiff_t c0 = (ptrdiff_t)(p / groups) * C + p % groups * RT_VL;
            rt_dw_lanes_group(x + c0 * H * W, stage, across, taps, w, bias,
                              res ? res + c0 * OH * OW : 0, y + c0 * OH * OW, (int)(c0 % C),
                              H, W, pt, pl, R * S, R, sh, sw, OH, OW, act, lo, hi, fill,
                              max);
        }
    }
    if (rest && use_flat) {
        for (k = 0; k < RT_VL; k++) {
            lane[0][k] = k % OW;
            lane[1][k] = RT_VL % OW;
            lane[2][k] = OW;
        }
        for (k = 0; k < 3; k++) lanes[k] = rt_viload(lane[k]);
        for (k = 0; k < staged; k++) stage[k] = fill;
        for (s = 0; s < S; s++) ds[s] = rt_dw_floordiv(s - pl, sw);
        for (r = 0; r < R; r++)
            for (s = 0; s < S; s++) {
                int dr = rt_dw_floordiv(r - pt, sh), a = r - pt - sh * dr;
                int phase = a * sw + (s - pl - sw * ds[s]);
                taps[r * S + s] = phase * flat.len + dr * OW + ds[s];
            }
    } else if (rest)
        for (r = 0; r < R; r++)
            for (s = 0; s < S; s++) taps[r * S + s] = r * row + (s % sw) * len + s / sw;
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
    for (pr = 0; pr < N * rest; pr++) {
        int c = groups * RT_VL + pr % rest, oh0, oh, i;
        p = pr / rest * C + c;      /* the plane */
        const float *xp = x + (ptrdiff_t)p * H * W;
        const float *wc = max ? 0 : w + (ptrdiff_t)c * R * S;
        float b = bias ? bias[c] : 0.0f;
        if (use_flat) {
            ptrdiff_t o = (ptrdiff_t)p * OH * OW;
            rt_dw_flat_stage(xp, stage, flat, H, W, sh, sw, OW);
            if (R == 3 && S == 3 && sh == 1 && sw == 1 && pl == 1)
                rt_dw_flat_plane3(stage, flat, wc, b, res ? res + o : 0, y + o, OH, OW, pt,
                                  lanes, act, lo, hi, fill, max);
            else if (!max && R == 3 && S == 3)
                rt_dw_flat_plane(stage, flat, taps, ds, wc, b, res ? res + o : 0, y + o, 3,
                                 3, OH, OW, lanes, act, lo, hi, fill, 0);
            else
                rt_dw_flat_plane(stage, flat, taps, ds, wc, b, res ? res + o : 0, y + o, R,
                                 S, OH, OW, lanes, act, lo, hi, fill, max);
            continue;
        }
        for (oh0 = 0; oh0 < OH; oh0 += block) {
            int rows = OH - oh0 < block ? OH - oh0 : block;
            for (i = 0; i < (rows - 1) * sh + R; i++)
                rt_dw_stage_row(xp, stage + i * row, oh0 * sh - pt + i, H, W, pl, sw, len,
                                fill);
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
