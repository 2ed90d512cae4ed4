/*
 * rt_deploy.h: the hand-written part of a program `retarget deploy` writes (rt_deploy.c):
 * .npy input and output, table-driven copies, and running one VTA region through the VTA
 * driver API (vta_driver.h). main.c (generated) holds the tables these functions read.
 */
#ifndef RT_DEPLOY_H_
#define RT_DEPLOY_H_

#include <stddef.h>
#include <stdint.h>

#include "vta_driver.h"

#define RT_MAX_RANK 8

/* A graph input or output: where it lives in the arena and what its .npy file must say. */
typedef struct {
  const char *name;
  const char *descr;            /* numpy dtype string, e.g. "<f4", "|i1" */
  int rank;
  int64_t shape[RT_MAX_RANK];
  size_t offset;                /* in the arena */
  size_t nbytes;
} rt_tensor;

/* dst[i] = map[i] ? src[map[i] - 1] : 0 for n elements of elem bytes: every packing,
 * unpacking and data-movement step is one such table, computed by retarget from the
 * operation's own definition. */
void rt_gather(void *dst, const void *src, const int32_t *map, size_t n, size_t elem);

/* One region bound into a VTA program's DRAM image: the logical tensor (arena offset) and the
 * program buffer (image offset) it is packed into or unpacked from, with the table. */
typedef struct {
  size_t arena_offset;
  size_t buffer_offset;
  size_t count;                 /* elements the map has (packed buffer or logical tensor) */
  size_t map_offset;            /* in the blob: int32 map */
} rt_binding;

typedef struct {
  const char *name;
  size_t image_offset, image_bytes;     /* in the blob: the DRAM image (uops, weights) */
  size_t insn_offset;                   /* in the blob: the stream, addresses from 0 */
  uint32_t insn_count;
  size_t reloc_offset;                  /* in the blob: uint32 pairs (insn index, elem bytes) */
  uint32_t reloc_count;
  unsigned dram_base_lo, dram_base_bits;   /* the dram_base field in an insn's low word */
  size_t image_align;                   /* every element size divides it */
  int n_inputs, n_outputs;
  const rt_binding *inputs, *outputs;
  /* set by rt_vta_load */
  uint8_t *image;
  void *insns;
} rt_vta_region;

/* Allocate the region's image and stream in accelerator memory, copy them, relocate the
 * stream's DRAM addresses to the image's physical address. 0 on success. */
int rt_vta_load(rt_vta_region *r, const uint8_t *blob);
/* Pack the inputs from the arena, run the stream, unpack the outputs into the arena. */
int rt_vta_run(VTADeviceHandle dev, rt_vta_region *r, const uint8_t *blob, uint8_t *arena);
void rt_vta_free(rt_vta_region *r);

/* Read a .npy file into dst after checking its dtype, shape and order against t. 0: ok. */
int rt_read_npy(const char *path, const rt_tensor *t, uint8_t *dst);
int rt_write_npy(const char *path, const rt_tensor *t, const uint8_t *src);

/* n bytes at a 64-byte boundary (never freed: the program's lifetime). */
void *rt_alloc(size_t n);

#endif /* RT_DEPLOY_H_ */
