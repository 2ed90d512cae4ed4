/* Vector types of the hand-written micro-kernels (targets/c/kernels): one float vector of
   RT_VL lanes and the few operations the kernels use. With GCC or Clang they are vector
   extensions (__attribute__((vector_size))): -march=native turns them into AVX-512, AVX2 or
   NEON code with no intrinsics. -DRT_PORTABLE (or another compiler) gives plain C99 arrays
   and loops with the same meaning: the portable build. */
/* No floating-point contraction here (GCC's -std=c99 default): a * b + c is two roundings,
   so the vector, native and portable builds give bit-identical results (every lane sums its
   terms in the same order whatever the vector width), and an artifact rebuilt with other
   flags on another machine computes exactly what it did. */

#if defined(__GNUC__) || defined(__clang__)
#define RT_INLINE static inline __attribute__((always_inline))
#else
#define RT_INLINE static inline
#endif

/* The routines' parallel loops (C99 _Pragma, so the same text builds without OpenMP). */
#ifdef _OPENMP
#define RT_PARALLEL_FOR _Pragma("omp parallel for schedule(static)")
#define RT_PARALLEL_FOR2 _Pragma("omp parallel for collapse(2) schedule(static)")
#else
#define RT_PARALLEL_FOR
#define RT_PARALLEL_FOR2
#endif

#ifndef RT_VL
#  if defined(__AVX512F__) && !defined(RT_PORTABLE)
#    define RT_VL 16
#  else
#    define RT_VL 8
#  endif
#endif

#if defined(RT_PORTABLE) || !(defined(__GNUC__) || defined(__clang__))
#define RT_VECTOR_EXTENSIONS 0
typedef struct { float v[RT_VL]; } rt_vf;
static inline rt_vf rt_vload(const float *p) { rt_vf r; memcpy(r.v, p, sizeof r.v); return r; }
static inline void rt_vstore(float *p, rt_vf a) { memcpy(p, a.v, sizeof a.v); }
static inline rt_vf rt_vbcast(float x) { rt_vf r; int l; for (l = 0; l < RT_VL; l++) r.v[l] = x; return r; }
static inline rt_vf rt_vfma(rt_vf acc, rt_vf a, float b)
{ int l; for (l = 0; l < RT_VL; l++) acc.v[l] += a.v[l] * b; return acc; }
typedef struct { int32_t v[RT_VL]; } rt_vi;
static inline rt_vi rt_viload(const int32_t *p) { rt_vi r; memcpy(r.v, p, sizeof r.v); return r; }
static inline void rt_vistore(int32_t *p, rt_vi a) { memcpy(p, a.v, sizeof a.v); }
static inline rt_vi rt_vizero(void) { rt_vi r; memset(r.v, 0, sizeof r.v); return r; }
static inline rt_vi rt_vimadd(rt_vi acc, rt_vi a, int32_t b)
{ int l; for (l = 0; l < RT_VL; l++) acc.v[l] += a.v[l] * b; return acc; }
#else
#define RT_VECTOR_EXTENSIONS 1
typedef float rt_vf __attribute__((vector_size(RT_VL * 4), aligned(4)));
static inline rt_vf rt_vload(const float *p) { rt_vf r; __builtin_memcpy(&r, p, sizeof r); return r; }
static inline void rt_vstore(float *p, rt_vf a) { __builtin_memcpy(p, &a, sizeof a); }
static inline rt_vf rt_vbcast(float x) { return (rt_vf){0} + x; }
static inline rt_vf rt_vfma(rt_vf acc, rt_vf a, float b) { return acc + a * b; }
typedef int32_t rt_vi __attribute__((vector_size(RT_VL * 4), aligned(4)));
static inline rt_vi rt_viload(const int32_t *p) { rt_vi r; __builtin_memcpy(&r, p, sizeof r); return r; }
static inline void rt_vistore(int32_t *p, rt_vi a) { __builtin_memcpy(p, &a, sizeof a); }
static inline rt_vi rt_vizero(void) { return (rt_vi){0}; }
static inline rt_vi rt_vimadd(rt_vi acc, rt_vi a, int32_t b) { return acc + a * b; }
#endif

/* The epilogue's activation, as the loop-nest IR defines max / min (b only where strictly
   larger / smaller): RT_ACT_NONE, RT_ACT_RELU (max(v, 0)), RT_ACT_CLIP (min(max(v, lo), hi)). */
#define RT_ACT_NONE 0
#define RT_ACT_RELU 1
#define RT_ACT_CLIP 2
static inline float rt_act(float v, int act, float lo, float hi)
{
    if (act == RT_ACT_RELU) return 0.0f > v ? 0.0f : v;
    if (act == RT_ACT_CLIP) { v = lo > v ? lo : v; return hi < v ? hi : v; }
    return v;
}
/* rt_act on every lane (the same comparisons, so the same bits, NaN and -0 included), and
   the loop-nest IR's max (b where strictly larger): with vector extensions a lane mask
   selects b where it is strictly larger / smaller. */
#if RT_VECTOR_EXTENSIONS
RT_INLINE rt_vf rt_vsel(rt_vi take_b, rt_vf a, rt_vf b)
{ return (rt_vf)(((rt_vi)a & ~take_b) | ((rt_vi)b & take_b)); }
RT_INLINE rt_vf rt_vmax(rt_vf a, rt_vf b) { return rt_vsel(b > a, a, b); }
RT_INLINE rt_vf rt_vact(rt_vf v, int act, float lo, float hi)
{
    rt_vf z = rt_vbcast(0.0f), l = rt_vbcast(lo), h = rt_vbcast(hi);
    if (act == RT_ACT_RELU) return rt_vsel(z > v, v, z);
    if (act == RT_ACT_CLIP) { v = rt_vsel(l > v, v, l); return rt_vsel(h < v, v, h); }
    return v;
}
#else
static inline rt_vf rt_vmax(rt_vf a, rt_vf b)
{ int l; for (l = 0; l < RT_VL; l++) a.v[l] = b.v[l] > a.v[l] ? b.v[l] : a.v[l]; return a; }
static inline rt_vf rt_vact(rt_vf v, int act, float lo, float hi)
{ int l; for (l = 0; l < RT_VL; l++) v.v[l] = rt_act(v.v[l], act, lo, hi); return v; }
#endif
static inline rt_vf rt_vadd(rt_vf a, rt_vf b)
#if RT_VECTOR_EXTENSIONS
{ return a + b; }
#else
{ int l; for (l = 0; l < RT_VL; l++) a.v[l] += b.v[l]; return a; }
#endif
