/* athread_emu.h: the subset of Sunway's athread interface that retarget's generated code uses,
 * emulated on a host (RT_EMULATE, the default here) or mapped onto the real library.
 *
 * The generated code never names athread directly: it uses the RT_* layer below, so the same
 * MPE and CPE sources build for the host emulation and (untested: there is no Sunway machine
 * here) for sw5cc -host / -slave.
 *
 * What the emulation enforces, per CPE (a host thread):
 * - LDM: a 64 KB arena (RT_LDM_BYTES); RT_LDM buffers are carved out of it at the start of
 *   each spawn; over-use stops the run with an error (the generator already refuses it).
 * - Main memory only through DMA: a slave sees a tensor as an rt_gmem handle, a struct with
 *   no pointer in it, so a dereference does not compile. rt_dma_get / rt_dma_put check the
 *   byte range against the tensor's registered size and the LDM range against the arena.
 * - Global loads / stores (rt_gld / rt_gst, the OpenACC-style baseline's) are bounds-checked
 *   too, and unavailable when RT_NO_GLOBAL_ACCESS is defined (retarget's own schedule).
 * - Counters per CPE: DMA bytes in and out, DMA calls and contiguous transfers, global loads
 *   and stores, LDM bytes used; the MPE reads them after each layer.
 * Errors stop every CPE (a failed CPE wakes the others at RT_SYNC instead of deadlocking) and
 * make rt_spawn return nonzero; rt_error() says what happened.
 */
#ifndef ATHREAD_EMU_H
#define ATHREAD_EMU_H

#include <stddef.h>
#include <stdint.h>

#define RT_MAX_CPES 256
#define RT_MAX_TENSORS 64

typedef struct { int id; } rt_gmem;   /* a main-memory tensor, as a CPE sees it */

typedef struct {
    long long get_bytes, put_bytes;   /* DMA bytes main memory -> LDM and back */
    long long dma_calls;              /* rt_dma_get / rt_dma_put calls */
    long long gld, gst;               /* global loads and stores (elements) */
    long long ldm_bytes;              /* LDM in use at the end of the layer */
} rt_counters;

/* ---- MPE side -------------------------------------------------------------------------- */
int rt_init(int cpes, size_t ldm_bytes);          /* athread_init; 0 on success */
void rt_forget_tensors(void);                     /* before each layer's registrations */
rt_gmem rt_register(void *base, size_t bytes);    /* a tensor the next spawn may touch */
int rt_spawn(void (*slave)(void *), void *para);  /* athread_spawn + athread_join */
const char *rt_error(void);
const rt_counters *rt_cpe_counters(int cpe);      /* after rt_spawn */

/* ---- CPE side -------------------------------------------------------------------------- */
int rt_myid(void);                                 /* _MYID */
int rt_cpes(void);
void *rt_ldm_alloc(size_t bytes, const char *what);
void rt_dma_get(void *ldm, rt_gmem src, size_t offset, size_t bytes);
void rt_dma_put(rt_gmem dst, size_t offset, const void *ldm, size_t bytes);
void rt_dma_wait(void);                            /* every DMA of this CPE has replied */
void rt_sync(void);                                /* athread_syn over all CPEs */
#ifndef RT_NO_GLOBAL_ACCESS
float rt_gld_f(rt_gmem src, size_t index);
/* a padded read: counted as one global load; reads element `index` only when `in_range` */
float rt_gld_or_f(rt_gmem src, int in_range, size_t index, float fill);
double rt_gld_or_d(rt_gmem src, int in_range, size_t index, double fill);
void rt_gst_f(rt_gmem dst, size_t index, float value);
double rt_gld_d(rt_gmem src, size_t index);
void rt_gst_d(rt_gmem dst, size_t index, double value);
#endif

/* The share of a loop of `n` iterations that CPE `id` of `p` runs: [RT_LO, RT_HI). */
#define RT_LO(n, id, p) ((int)(((long long)(n) * (id)) / (p)))
#define RT_HI(n, id, p) ((int)(((long long)(n) * ((id) + 1)) / (p)))
/* An LDM buffer of `count` elements of `type`, 64-byte aligned. */
#define RT_LDM(type, name, count) \
    type *const name = (type *)rt_ldm_alloc(sizeof(type) * (size_t)(count), #name)

#endif /* ATHREAD_EMU_H */
