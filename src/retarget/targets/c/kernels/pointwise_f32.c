/* rt_pointwise_f32: a 1x1, stride-1 convolution as the matrix product it is in NCHW,
   Y[K][P] = W[K][C] X[C][P] over the P = H*W positions, with the same fused epilogue as
   rt_conv_f32 (bias, residual add, activation):

     y[n, k, p] = act(bias[k] + sum_c x[n, c, p] * w[k, c] + res[n, k, p])

   Here the vectors run along the positions (contiguous in NCHW, in the input and the output)
   and the weights are broadcast: packed wp[ceil(K/RT_PB)][C][RT_PB], zero past K. A tile is
   RT_PB output channels by RT_PV vectors of positions; a last, partial group of positions goes
   through a zero-padded copy. Better than rt_conv_f32 where P is large (no transposed stores);
   the code generator picks it for 1x1 stride-1 layers with many positions. */
#define RT_PB 8
#if RT_VL >= 16
#define RT_PV 3
#else
#define RT_PV 1
#endif
#define RT_PW (RT_PV * RT_VL)

RT_INLINE void
rt_pointwise_f32_tile(const float *restrict x, const float *restrict wb,
                      const float *restrict bias, const float *restrict res,
                      float *restrict y, int C, int P, int k0, int K, int p0, int np,
                      int act, float lo, float hi)
{
    rt_vf acc[RT_PB][RT_PV];
    RT_ALIGN64 float buf[RT_PW];
    int c, i, v, j;
    for (i = 0; i < RT_PB; i++)
        for (v = 0; v < RT_PV; v++) acc[i][v] = rt_vbcast(0.0f);
    for (c = 0; c < C; c++) {
        const float *xc = x + (ptrdiff_t)c * P + p0;
        rt_vf xv[RT_PV];
        if (np == RT_PW) {
            for (v = 0; v < RT_PV; v++) xv[v] = rt_vload(xc + v * RT_VL);
        } else {
            memset(buf, 0, sizeof buf);
            memcpy(buf, xc, (size_t)np * sizeof(float));
            for (v = 0; v < RT_PV; v++) xv[v] = rt_vload(buf + v * RT_VL);
        }
        for (i = 0; i < RT_PB; i++)
            for (v = 0; v < RT_PV; v++) acc[i][v] = rt_vfma(acc[i][v], xv[v], wb[i]);
        wb += RT_PB;
    }
    for (i = 0; i < RT_PB && k0 + i < K; i++) {
        ptrdiff_t o = (ptrdiff_t)(k0 + i) * P + p0;
        float b = bias ? bias[k0 + i] : 0.0f;
        for (v = 0; v < RT_PV; v++) rt_vstore(buf + v * RT_VL, acc[i][v]);
        for (j = 0; j < np; j++) {
            float t = b + buf[j];
            if (res) t = t + res[o + j];
            y[o + j] = rt_act(t, act, lo, hi);
        }
    }
}

static void rt_pointwise_f32(const float *restrict x, const float *restrict wp,
                             const float *restrict bias, const float *restrict res,
                             float *restrict y, int N, int C, int P, int K, int act, float lo,
                             float hi)
{
    int blocks = (K + RT_PB - 1) / RT_PB, groups = (P + RT_PW - 1) / RT_PW;
    int n;
    for (n = 0; n < N; n++) {
        const float *xn = x + (ptrdiff_t)n * C * P;
        const float *rn = res ? res + (ptrdiff_t)n * K * P : 0;
        float *yn = y + (ptrdiff_t)n * K * P;
        int kb, g;
        RT_PARALLEL_FOR2
        for (kb = 0; kb < blocks; kb++)
            for (g = 0; g < groups; g++) {
                int np = P - g * RT_PW < RT_PW ? P - g * RT_PW : RT_PW;
                rt_pointwise_f32_tile(xn, wp + (ptrdiff_t)kb * C * RT_PB, bias, rn, yn, C, P,
                                      kb * RT_PB, K, g * RT_PW, np, act, lo, hi);
            }
    }
}
