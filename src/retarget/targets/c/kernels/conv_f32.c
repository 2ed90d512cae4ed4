/* rt_conv_f32: a direct convolution (group 1, no dilation) of an already padded NCHW input,
   with bias, residual add and activation fused into the epilogue:

     y[n, k, oh, ow] = act(bias[k] + sum_{c,r,s} x[n, c, oh*sh + r, ow*sw + s] * w[k, c, r, s]
                           + res[n, k, oh, ow])

   The weights are packed once at build time into blocks of RT_KB output channels, the block
   innermost: wp[ceil(K/RT_KB)][C][R][S][RT_KB], zero past K. A register tile is RT_KT output
   channels (RT_NV vectors) of a block by T <= RT_TMAX output positions: each step loads the
   tile's next RT_KT weights (contiguous) and broadcasts one input value per position, so the
   T x RT_NV accumulators stay in registers for the whole reduction. A tile's positions run
   along the flattened OH x OW map (each position's input window at its own offset `off`), so
   that on narrow maps (7 or 14 columns) tiles do not stop at the end of a row with a few
   columns left: 49 positions are 4 tiles of 12 and one of 1, not 7 tiles of 7. Tiles are
   spread over threads by (channel block, tile). A dense layer is the case H = W = R = S = 1. */
#define RT_KB 32
/* A tile is RT_NV vectors of channels by up to RT_TMAX positions: 2 x 12 = 24 accumulators
   of AVX-512's 32 registers; with 8-lane vectors (AVX2's 16 registers) 2 x 6 = 12, a block
   of 32 channels being two tiles side by side. (The 4 x 3 tile used there before, 12
   accumulators and 4 weight vectors, left no register for the broadcast: ResNet-18 built
   with -march=haswell spent 59.8 ms in rt_conv_f32 with it, 31.5 ms with 2 x 6, one thread
   on the AVX-512 machine of docs/benchmarks.md.) */
#define RT_NV 2
#if RT_VL >= 16
#define RT_TMAX 12
#else
#define RT_TMAX 6
#endif
#define RT_KT (RT_NV * RT_VL)         /* channels of a tile */
typedef char rt_conv_tiles_fill_a_block[RT_KB % RT_KT == 0 ? 1 : -1];

RT_INLINE void
rt_conv_f32_tile(const float *restrict x, const ptrdiff_t *restrict off,
                 const float *restrict wb, float *restrict tile, int C, ptrdiff_t HpWp, int Wp,
                 int R, int S, int T)
{
    rt_vf acc[RT_TMAX][RT_NV];
    ptrdiff_t o[RT_TMAX];
    int c, r, s, j, v;
    for (j = 0; j < T; j++) {
        o[j] = off[j];
        for (v = 0; v < RT_NV; v++) acc[j][v] = rt_vbcast(0.0f);
    }
    for (c = 0; c < C; c++) {
        const float *xc = x + c * HpWp;
        for (r = 0; r < R; r++) {
            const float *xr = xc + r * Wp;
            for (s = 0; s < S; s++) {
                rt_vf w[RT_NV];
                for (v = 0; v < RT_NV; v++) w[v] = rt_vload(wb + v * RT_VL);
                wb += RT_KB;
                for (j = 0; j < T; j++) {
                    float xv = xr[s + o[j]];
                    for (v = 0; v < RT_NV; v++) acc[j][v] = rt_vfma(acc[j][v], w[v], xv);
                }
            }
        }
    }
    for (j = 0; j < T; j++)
        for (v = 0; v < RT_NV; v++) rt_vstore(tile + j * RT_KB + v * RT_VL, acc[j][v]);
}

static void rt_conv_f32(const float *restrict x, const float *restrict wp,
                        const float *restrict bias, const float *restrict res,
                        float *restrict y, int N, int C, int Hp, int Wp, int K, int R, int S,
                        int sh, int sw, int OH, int OW, int act, float lo, float hi)
{
    int blocks = (K + RT_KB - 1) / RT_KB, P = OH * OW, tiles = (P + RT_TMAX - 1) / RT_TMAX;
    int n;
    for (n = 0; n < N; n++) {
        const float *xn = x + (ptrdiff_t)n * C * Hp * Wp;
        const float *rn = res ? res + (ptrdiff_t)n * K * P : 0;
        float *yn = y + (ptrdiff_t)n * K * P;
        int kb, t;
        RT_PARALLEL_FOR2
        for (kb = 0; kb < blocks; kb++)
            for (t = 0; t < tiles; t++) {
                RT_ALIGN64 float tile[RT_TMAX * RT_KB];
                ptrdiff_t off[RT_TMAX];
                const float *wb = wp + (ptrdiff_t)kb * C * R * S * RT_KB;
                int p0 = t * RT_TMAX, T = P - p0 < RT_TMAX ? P - p0 : RT_TMAX;
                int oh = p0 / OW, ow = p0 % OW, l, j, k0;
                for (j = 0; j < T; j++) {     /* where each position's window starts */
                    off[j] = (ptrdiff_t)oh * sh * Wp + (ptrdiff_t)ow * sw;
                    if (++ow == OW) { ow = 0; oh++; }
                }
                for (k0 = 0; k0 < RT_KB && kb * RT_KB + k0 < K; k0 += RT_KT)
                    switch (T) {   /* a constant T per case: the tile's loops unroll */
#define RT_CONV_CASE(t) case t: rt_conv_f32_tile(xn, off, wb + k0, tile + k0, C, \
                                                 (ptrdiff_t)Hp * Wp, Wp, R, S, t); break;
                    RT_CONV_CASE(1) RT_CONV_CASE(2) RT_CONV_CASE(3) RT_CONV_CASE(4)
                    RT_CONV_CASE(5) RT_CONV_CASE(6)
#if RT_TMAX > 6
                    RT_CONV_CASE(7) RT_CONV_CASE(8) RT_CONV_CASE(9) RT_CONV_CASE(10)
                    RT_CONV_CASE(11) RT_CONV_CASE(12)
#endif
#undef RT_CONV_CASE
                    }
                for (l = 0; l < RT_KB && kb * RT_KB + l < K; l++) {
                    int k = kb * RT_KB + l;
                    ptrdiff_t o = (ptrdiff_t)k * P + p0;
                    float b = bias ? bias[k] : 0.0f;
                    for (j = 0; j < T; j++) {
                        float v = b + tile[j * RT_KB + l];
                        if (rn) v = v + rn[o + j];
                        yn[o + j] = rt_act(v, act, lo, hi);
                    }
                }
            }
    }
}
