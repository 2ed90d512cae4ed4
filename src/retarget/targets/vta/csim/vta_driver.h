/*
 * The VTA driver interface, as the published VTA runtime calls it (tvm-vta include/vta/driver.h):
 * a device handle that runs an instruction stream, and physically contiguous memory that both
 * the host and the accelerator address. Written from that interface's description; any
 * implementation of these functions (a board's driver, retarget's simulator in
 * vta_driver_sim.c) can be linked under a program that uses only this header.
 *
 * Address model: VTAMemAlloc returns a host pointer; VTAMemGetPhyAddr gives the physical
 * (byte) address the accelerator sees. Instructions name DRAM in elements of the memory type
 * they move (dram_base = physical byte address / element bytes), and the uop and instruction
 * buffers are addressed the same way, so every buffer must be aligned to its element size.
 */
#ifndef VTA_DRIVER_H_
#define VTA_DRIVER_H_

#ifdef __cplusplus
extern "C" {
#endif

#include <stddef.h>
#include <stdint.h>

/* cached argument of VTAMemAlloc */
#define VTA_CACHED 1
#define VTA_NOT_CACHED 0

/* largest physically contiguous buffer */
#ifndef VTA_MAX_XFER
#define VTA_MAX_XFER (1 << 25)
#endif

#define VTA_PAGE_BITS 12
#define VTA_PAGE_BYTES (1 << VTA_PAGE_BITS)

typedef void *VTADeviceHandle;

#ifdef USE_VTA64
typedef uint64_t vta_phy_addr_t;
#else
typedef uint32_t vta_phy_addr_t;
#endif

/* A device handle (NULL when none can be created). */
VTADeviceHandle VTADeviceAlloc(void);
void VTADeviceFree(VTADeviceHandle handle);

/* Run insn_count instructions (16 bytes each) starting at physical address insn_phy_addr and
 * block until the FINISH instruction. Returns 0 on success, 1 on a timeout (the stream did not
 * finish; wait_cycles bounds the wait on hardware). Other non-zero values are implementation
 * specific errors. */
int VTADeviceRun(VTADeviceHandle device, vta_phy_addr_t insn_phy_addr, uint32_t insn_count,
                 uint32_t wait_cycles);

/* Physically contiguous memory the accelerator can read and write. */
void *VTAMemAlloc(size_t size, int cached);
void VTAMemFree(void *buf);
vta_phy_addr_t VTAMemGetPhyAddr(void *buf);
void VTAMemCopyFromHost(void *dst, const void *src, size_t size);
void VTAMemCopyToHost(void *dst, const void *src, size_t size);
/* Make the CPU's writes visible to the accelerator / the accelerator's writes visible to the
 * CPU, for cached buffers. */
void VTAFlushCache(void *vir_addr, vta_phy_addr_t phy_addr, int size);
void VTAInvalidateCache(void *vir_addr, vta_phy_addr_t phy_addr, int size);

#ifdef __cplusplus
}
#endif
#endif /* VTA_DRIVER_H_ */
