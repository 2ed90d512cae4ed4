#define _POSIX_C_SOURCE 200112L
/*
 * rt_deploy.c: see rt_deploy.h. Part of every project `retarget deploy` writes; nothing here
 * is specific to one network. Errors are one line on stderr and a non-zero return.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt_deploy.h"

void *rt_alloc(size_t n) {
  void *p = NULL;
  if (posix_memalign(&p, 64, n ? n : 1)) return NULL;
  memset(p, 0, n ? n : 1);
  return p;
}

void rt_gather(void *dst, const void *src, const int32_t *map, size_t n, size_t elem) {
  uint8_t *d = (uint8_t *)dst;
  const uint8_t *s = (const uint8_t *)src;
  if (elem == 1) {
    for (size_t i = 0; i < n; i++) d[i] = map[i] ? s[map[i] - 1] : 0;
    return;
  }
  for (size_t i = 0; i < n; i++) {
    if (map[i]) memcpy(d + i * elem, s + (size_t)(map[i] - 1) * elem, elem);
    else memset(d + i * elem, 0, elem);
  }
}

/* ---- VTA regions -------------------------------------------------------------------------- */
static int relocate(rt_vta_region *r, const uint8_t *blob, uint8_t *insns, uint64_t phys) {
  const uint32_t *rel = (const uint32_t *)(blob + r->reloc_offset);
  uint64_t mask = r->dram_base_bits >= 64 ? ~0ull : ((1ull << r->dram_base_bits) - 1);
  for (uint32_t k = 0; k < r->reloc_count; k++) {
    uint32_t index = rel[2 * k], elem = rel[2 * k + 1];
    if (index >= r->insn_count || elem == 0 || phys % elem) {
      fprintf(stderr, "model: %s: relocation %u (instruction %u, %u-byte elements) does not fit "
              "the image at physical address 0x%llx\n", r->name, k, index, elem,
              (unsigned long long)phys);
      return 1;
    }
    uint64_t lo;
    memcpy(&lo, insns + 16 * (size_t)index, 8);   /* little-endian words, as the ISA's */
    uint64_t base = ((lo >> r->dram_base_lo) & mask) + phys / elem;
    if (base > mask) {
      fprintf(stderr, "model: %s: instruction %u: DRAM address 0x%llx does not fit the %u-bit "
              "dram_base field\n", r->name, index, (unsigned long long)base * elem,
              r->dram_base_bits);
      return 1;
    }
    lo = (lo & ~(mask << r->dram_base_lo)) | (base << r->dram_base_lo);
    memcpy(insns + 16 * (size_t)index, &lo, 8);
  }
  return 0;
}

int rt_vta_load(rt_vta_region *r, const uint8_t *blob) {
  size_t insn_bytes = (size_t)r->insn_count * 16;
  r->image = (uint8_t *)VTAMemAlloc(r->image_bytes, VTA_CACHED);
  r->insns = VTAMemAlloc(insn_bytes, VTA_NOT_CACHED);
  if (!r->image || !r->insns) {
    fprintf(stderr, "model: %s: VTAMemAlloc of %zu + %zu bytes failed\n", r->name,
            r->image_bytes, insn_bytes);
    return 1;
  }
  uint64_t phys = VTAMemGetPhyAddr(r->image);
  if (phys % r->image_align) {
    fprintf(stderr, "model: %s: the driver placed the image at 0x%llx, not a multiple of %zu "
            "bytes (the program's element sizes)\n", r->name, (unsigned long long)phys,
            r->image_align);
    return 1;
  }
  VTAMemCopyFromHost(r->image, blob + r->image_offset, r->image_bytes);
  uint8_t *stream = (uint8_t *)malloc(insn_bytes);
  if (!stream) return 1;
  memcpy(stream, blob + r->insn_offset, insn_bytes);
  int rc = relocate(r, blob, stream, phys);
  if (!rc) VTAMemCopyFromHost(r->insns, stream, insn_bytes);
  free(stream);
  VTAFlushCache(r->insns, VTAMemGetPhyAddr(r->insns), (int)insn_bytes);
  return rc;
}

int rt_vta_run(VTADeviceHandle dev, rt_vta_region *r, const uint8_t *blob, uint8_t *arena) {
  for (int i = 0; i < r->n_inputs; i++) {
    const rt_binding *b = &r->inputs[i];
    rt_gather(r->image + b->buffer_offset, arena + b->arena_offset,
              (const int32_t *)(blob + b->map_offset), b->count, 1);
  }
  VTAFlushCache(r->image, VTAMemGetPhyAddr(r->image), (int)r->image_bytes);
  int rc = VTADeviceRun(dev, VTAMemGetPhyAddr(r->insns), r->insn_count, 100000000u);
  if (rc) {
    fprintf(stderr, "model: %s: VTADeviceRun returned %d (1: the stream did not finish)\n",
            r->name, rc);
    return rc;
  }
  VTAInvalidateCache(r->image, VTAMemGetPhyAddr(r->image), (int)r->image_bytes);
  for (int j = 0; j < r->n_outputs; j++) {
    const rt_binding *b = &r->outputs[j];
    rt_gather(arena + b->arena_offset, r->image + b->buffer_offset,
              (const int32_t *)(blob + b->map_offset), b->count, 1);
  }
  return 0;
}

void rt_vta_free(rt_vta_region *r) {
  if (r->image) VTAMemFree(r->image);
  if (r->insns) VTAMemFree(r->insns);
  r->image = NULL;
  r->insns = NULL;
}

/* ---- .npy --------------------------------------------------------------------------------- */
static void shape_text(const rt_tensor *t, char *buf, size_t cap) {
  size_t n = 0;
  n += (size_t)snprintf(buf + n, cap - n, "(");
  for (int i = 0; i < t->rank && n < cap; i++)
    n += (size_t)snprintf(buf + n, cap - n, "%lld%s", (long long)t->shape[i],
                          t->rank == 1 ? "," : (i + 1 < t->rank ? ", " : ""));
  if (n < cap) snprintf(buf + n, cap - n, ")");
}

/* The value of `key` in the header dict as text: a (tuple), a 'string' or a bare word. */
static int header_field(const char *h, const char *key, char *out, size_t cap) {
  const char *p = strstr(h, key);
  if (!p) return 1;
  p = strchr(p + strlen(key), ':');
  if (!p) return 1;
  p++;
  while (*p == ' ') p++;
  const char *end;
  if (*p == '(') end = strchr(p, ')');
  else if (*p == '\'') end = strchr(p + 1, '\'');
  else end = p + strcspn(p, ",}") - 1;
  if (!end || (size_t)(end - p + 1) >= cap) return 1;
  memcpy(out, p, (size_t)(end - p + 1));
  out[end - p + 1] = 0;
  return 0;
}

static int same_shape(const char *text, const rt_tensor *t) {
  /* text: "(1, 3, 32, 32)" with any spacing, "(5,)" for rank 1 */
  const char *p = text;
  if (*p++ != '(') return 0;
  for (int i = 0; i < t->rank; i++) {
    char *end;
    while (*p == ' ') p++;
    long long v = strtoll(p, &end, 10);
    if (end == p || v != t->shape[i]) return 0;
    p = end;
    while (*p == ' ') p++;
    if (*p == ',') p++;
  }
  while (*p == ' ') p++;
  return *p == ')';
}

int rt_read_npy(const char *path, const rt_tensor *t, uint8_t *dst) {
  FILE *f = fopen(path, "rb");
  if (!f) { fprintf(stderr, "model: cannot open input %s\n", path); return 1; }
  unsigned char pre[10];
  char header[4096], descr[64], order[16], shape[512], want[512];
  int rc = 1;
  if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6)) {
    fprintf(stderr, "model: %s is not a .npy file\n", path);
    goto done;
  }
  size_t hlen = pre[6] == 1 ? (size_t)(pre[8] | pre[9] << 8) : 0;
  if (pre[6] != 1) {   /* versions 2 and 3: a 4-byte header length */
    unsigned char more[2];
    if (fread(more, 1, 2, f) != 2) goto done;
    hlen = (size_t)pre[8] | (size_t)pre[9] << 8 | (size_t)more[0] << 16 | (size_t)more[1] << 24;
  }
  if (hlen >= sizeof header || fread(header, 1, hlen, f) != hlen) {
    fprintf(stderr, "model: %s: .npy header too long or truncated\n", path);
    goto done;
  }
  header[hlen] = 0;
  if (header_field(header, "'descr'", descr, sizeof descr) ||
      header_field(header, "'fortran_order'", order, sizeof order) ||
      header_field(header, "'shape'", shape, sizeof shape)) {
    fprintf(stderr, "model: %s: malformed .npy header\n", path);
    goto done;
  }
  char quoted[64];
  snprintf(quoted, sizeof quoted, "'%s'", t->descr);
  shape_text(t, want, sizeof want);
  if (strcmp(descr, quoted) || strcmp(order, "False") || !same_shape(shape, t)) {
    fprintf(stderr, "model: %s holds %s%s (fortran_order %s); input '%s' must be %s%s in C "
            "order\n", path, descr, shape, order, t->name, quoted, want);
    goto done;
  }
  if (fread(dst, 1, t->nbytes, f) != t->nbytes) {
    fprintf(stderr, "model: %s: fewer than the %zu data bytes of input '%s'\n", path,
            t->nbytes, t->name);
    goto done;
  }
  rc = 0;
done:
  fclose(f);
  return rc;
}

int rt_write_npy(const char *path, const rt_tensor *t, const uint8_t *src) {
  char shape[512], header[1024];
  shape_text(t, shape, sizeof shape);
  int n = snprintf(header, sizeof header, "{'descr': '%s', 'fortran_order': False, "
                   "'shape': %s, }", t->descr, shape);
  size_t total = 10 + (size_t)n + 1;
  size_t pad = (64 - total % 64) % 64;
  FILE *f = fopen(path, "wb");
  if (!f) { fprintf(stderr, "model: cannot write %s\n", path); return 1; }
  unsigned short hlen = (unsigned short)(n + pad + 1);
  unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0,
                           (unsigned char)(hlen & 0xff), (unsigned char)(hlen >> 8)};
  fwrite(pre, 1, 10, f);
  fwrite(header, 1, (size_t)n, f);
  for (size_t i = 0; i < pad; i++) fputc(' ', f);
  fputc('\n', f);
  size_t w = fwrite(src, 1, t->nbytes, f);
  if (fclose(f) || w != t->nbytes) { fprintf(stderr, "model: writing %s failed\n", path); return 1; }
  return 0;
}
