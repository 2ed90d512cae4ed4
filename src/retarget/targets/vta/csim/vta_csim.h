/*
 * retarget's functional simulator of VTA, in C: the same machine as the Python behavioural
 * simulator (targets/vta/sim), bit for bit — DRAM, the four SRAMs and the counters — with the
 * same checks. No dependence on Python; vta_driver_sim.c puts the driver API (vta_driver.h) on
 * top of it.
 *
 *   vta_config cfg;
 *   vta_config_derive(&cfg, 0, 4, 4, 15, 15, 18, 17, 0, err, sizeof err);  // the pynq core
 *   vta_sim *sim = vta_sim_create(&cfg, dram, dram_bytes);                // dram is borrowed
 *   vta_result r;
 *   if (vta_sim_run(sim, insns, count, NULL, 0, 0, &r) != VTA_OK) puts(r.message);
 */
#ifndef VTA_CSIM_H_
#define VTA_CSIM_H_

#ifdef __cplusplus
extern "C" {
#endif

#include <stddef.h>
#include <stdint.h>

#define VTA_CSIM_ABI 2        /* bumped whenever a struct below changes */

/* Instruction and micro-op fields, in the order of the published instruction table. */
enum vta_field_id {
  VTA_F_OPCODE, VTA_F_POP_PREV, VTA_F_POP_NEXT, VTA_F_PUSH_PREV, VTA_F_PUSH_NEXT,
  /* LOAD / STORE */
  VTA_F_MEM_TYPE, VTA_F_SRAM_BASE, VTA_F_DRAM_BASE, VTA_F_Y_SIZE, VTA_F_X_SIZE, VTA_F_X_STRIDE,
  VTA_F_Y_PAD_0, VTA_F_Y_PAD_1, VTA_F_X_PAD_0, VTA_F_X_PAD_1,
  /* GEMM / ALU */
  VTA_F_RESET, VTA_F_UOP_BGN, VTA_F_UOP_END, VTA_F_ITER_OUT, VTA_F_ITER_IN,
  VTA_F_DST_FACTOR_OUT, VTA_F_DST_FACTOR_IN, VTA_F_SRC_FACTOR_OUT, VTA_F_SRC_FACTOR_IN,
  VTA_F_WGT_FACTOR_OUT, VTA_F_WGT_FACTOR_IN, VTA_F_ALU_OP, VTA_F_USE_IMM, VTA_F_IMM,
  /* micro-op word */
  VTA_F_UOP_DST, VTA_F_UOP_SRC, VTA_F_UOP_WGT,
  VTA_F_COUNT
};

/* Bits [lo + width - 1 : lo] of the 128-bit instruction (or 32-bit micro-op). */
typedef struct vta_field { uint32_t lo, width; } vta_field;

typedef struct vta_config {
  uint32_t batch, block_in, block_out;
  uint32_t uop_depth, inp_depth, wgt_depth, acc_depth;   /* SRAM entries */
  uint32_t alu_stage;      /* 1: ALU instructions run on a fourth module (retarget's variant) */
  vta_field field[VTA_F_COUNT];
} vta_config;

/* Fill `cfg` from the published LOG_* parameters (int8 inputs and weights, int32 accumulators)
 * with the field layout the buffer depths imply. Returns 0, or -1 with a reason in `err`. */
int vta_config_derive(vta_config *cfg, int log_batch, int log_block_in, int log_block_out,
                      int log_uop_buff, int log_inp_buff, int log_wgt_buff, int log_acc_buff,
                      int alu_stage, char *err, size_t err_size);

enum vta_status {
  VTA_OK = 0,
  VTA_ERR_DEADLOCK = 1,   /* no module can run and instructions remain (a timeout on a board) */
  VTA_ERR_FAULT = 2,      /* a malformed instruction or stream; `message`, `error_index` */
  VTA_ERR_WORK = 3,       /* the stream asks for more work than the caller allows */
  VTA_ERR_ARG = 4         /* bad arguments (NULL pointers, an unaligned or misplaced stream) */
};

enum vta_fault_kind {
  VTA_FAULT_NONE = 0,
  VTA_FAULT_DECODE = 1,   /* an unknown opcode, memory type or ALU opcode */
  VTA_FAULT_INSN = 2,     /* an instruction that cannot run as written */
  VTA_FAULT_NO_FINISH = 3,/* the stream ended without a FINISH */
  VTA_FAULT_EARLY_FINISH = 4, /* FINISH ran while other modules had instructions left */
  VTA_FAULT_DEADLOCK = 5
};

#define VTA_MODULES 4      /* load, compute, store (, alu) */
#define VTA_QUEUES 6       /* l2g, g2l, g2s, s2g (, g2a, a2s) */

/* The published simulator's profiler counters, plus instructions run per module. */
typedef struct vta_counters {
  int64_t inp_load_nbytes, wgt_load_nbytes, acc_load_nbytes, uop_load_nbytes, out_store_nbytes;
  int64_t gemm_counter, alu_counter;
  int64_t load_insns, compute_insns, store_insns;
} vta_counters;

typedef struct vta_result {
  vta_counters counters;
  int64_t instructions;          /* executed, FINISH included */
  int64_t finish_index;          /* stream position of the FINISH; -1 if none ran */
  int64_t tokens[VTA_QUEUES];    /* tokens left in each queue */
  double work;                   /* GEMM MACs + ALU lane operations the stream asks for */
  int32_t fault;                 /* enum vta_fault_kind */
  int64_t error_index;           /* the instruction at fault; -1 when none */
  int64_t blocked[VTA_MODULES];  /* EARLY_FINISH / DEADLOCK: each module's next instruction */
  uint32_t waits[VTA_MODULES];   /* DEADLOCK: bit q set when that module waits on queue q */
  uint64_t outside[2];           /* a confinement fault: the byte range [start, end) refused */
  uint32_t outside_prefix;       /* ... and the length of "memory confinement: <access>" */
  char message[1024];            /* the fault, without the instruction's name */
} vta_result;

/* A DRAM byte range [start, end) a stream may touch. */
typedef struct vta_range { uint64_t start, end; } vta_range;

typedef struct vta_sim vta_sim;

/* A simulator over `dram` (borrowed, not freed; the SRAMs are zeroed). NULL when out of host
 * memory. */
vta_sim *vta_sim_create(const vta_config *cfg, uint8_t *dram, uint64_t dram_bytes);
void vta_sim_free(vta_sim *sim);
/* Point the simulator at another DRAM (the SRAMs keep their contents). */
void vta_sim_set_dram(vta_sim *sim, uint8_t *dram, uint64_t dram_bytes);

/* Run `count` 16-byte instructions until FINISH. With `allowed` non-NULL every DRAM access must
 * lie inside one of its `n_allowed` ranges. `max_work` > 0 refuses a stream that asks for more
 * operations before anything runs. Returns an enum vta_status; `out` is filled either way. */
int vta_sim_run(vta_sim *sim, const uint8_t *insns, uint64_t count, const vta_range *allowed,
                size_t n_allowed, double max_work, vta_result *out);

/* The SRAMs, for inspection: uop as uint32 (dst, src, wgt) triples, inp and wgt int8, acc
 * int32 ([depth][BATCH][BLOCK_OUT]). Returns the buffer and stores its size in bytes. */
enum vta_sram { VTA_SRAM_UOP = 0, VTA_SRAM_INP = 1, VTA_SRAM_WGT = 2, VTA_SRAM_ACC = 3 };
void *vta_sim_sram(vta_sim *sim, int which, uint64_t *nbytes);

/* "instruction #i: message" (or the message alone) into buf. */
void vta_format_error(const vta_result *r, char *buf, size_t size);

/* vta_driver_sim.c (the driver API on this simulator): what the last driver call went wrong
 * on ("" after a successful run), and the last VTADeviceRun's result (counters, fault). */
const char *VTACsimLastError(void);
const vta_result *VTACsimLastResult(void);

int vta_csim_abi(void);
size_t vta_sizeof_result(void);
size_t vta_sizeof_config(void);

#ifdef __cplusplus
}
#endif
#endif /* VTA_CSIM_H_ */
