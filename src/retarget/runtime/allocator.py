"""Best-fit allocator with coalescing for a device's memory pool.

The retargeting paper treats accelerator DDR as one pool managed C-style (malloc/free) and serves
tensors from it with a "best-fit with coalescing" allocator. This is that allocator, over an
abstract address range [0, capacity): it hands out byte addresses and never touches memory itself,
so the same object can manage a simulator's NumPy array or a real driver's buffer.

Behaviour:
- Every request is rounded up to a multiple of `alignment` (a power of two), and every returned
  address is a multiple of max(alignment, align). Rounding sizes keeps all block boundaries on the
  alignment grid, so small leftover slivers that no aligned request could use never appear.
- malloc picks the smallest free block that fits (ties: the lowest address), splits it, and returns
  the remainder (and any front padding needed for a larger per-call alignment) to the free list.
- free returns the block and merges it with both neighbours when they are free, so freeing
  everything always restores a single block of `capacity` bytes.
- Misuse (double free, a pointer that was never returned by malloc, non-positive sizes) and running
  out of memory raise DeviceError with the addresses and sizes involved.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass

from ..errors import DeviceError


@dataclass(frozen=True, slots=True)
class Allocation:
    """One live allocation: `size` bytes were requested at `start`; `reserved` bytes (size rounded
    up to the allocator's alignment) are actually held."""
    start: int
    size: int
    reserved: int
    # Which allocation this is: unique per allocator, never reused, so a handle that recorded
    # an allocation can tell it from a later one at the same address (a stale handle).
    serial: int = 0

    @property
    def end(self) -> int:
        """One past the last byte the caller may use."""
        return self.start + self.size

    def contains(self, address: int) -> bool:
        return self.start <= address < self.start + self.size


@dataclass(frozen=True, slots=True)
class AllocatorStats:
    """A snapshot of the pool. `used` counts reserved bytes (including alignment rounding);
    `requested` counts the bytes callers asked for."""
    capacity: int
    used: int
    free: int
    largest_free: int
    free_blocks: int
    peak_used: int
    live_allocations: int
    requested: int

    @property
    def external_fragmentation(self) -> float:
        """1 - largest_free/free: 0 when all free memory is one block, near 1 when it is in many
        small pieces. 0 when nothing is free (there is nothing to fragment)."""
        if self.free == 0:
            return 0.0
        return 1.0 - self.largest_free / self.free


def _is_power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


class BestFitAllocator:
    """Best-fit allocator over [0, capacity) with splitting and coalescing (see module docstring)."""

    def __init__(self, capacity: int, alignment: int = 64):
        if not isinstance(capacity, int) or capacity <= 0:
            raise DeviceError(f"allocator capacity must be a positive number of bytes, got {capacity!r}")
        if not isinstance(alignment, int) or not _is_power_of_two(alignment):
            raise DeviceError(f"allocator alignment must be a power of two, got {alignment!r}")
        self.capacity = capacity
        self.alignment = alignment
        # Free blocks as (start, size), sorted by start and never adjacent (adjacent ones are merged).
        self._free: list[tuple[int, int]] = [(0, capacity)]
        # Live allocations by start address, plus the sorted starts for "which allocation holds
        # this address" lookups.
        self._live: dict[int, Allocation] = {}
        self._live_starts: list[int] = []
        self._used = 0
        self._requested = 0
        self._peak_used = 0
        self._serial = 0

    # ---- allocation ----------------------------------------------------------------------------

    def malloc(self, nbytes: int, align: int | None = None) -> int:
        """Reserve `nbytes` bytes and return the start address (a multiple of max(alignment, align))."""
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes <= 0:
            raise DeviceError(f"malloc({nbytes!r}): size must be a positive number of bytes")
        if align is None:
            align = self.alignment
        if isinstance(align, bool) or not isinstance(align, int) or not _is_power_of_two(align):
            raise DeviceError(f"malloc({nbytes}, align={align!r}): alignment must be a power of two")
        align = max(align, self.alignment)
        reserved = round_up(nbytes, self.alignment)

        best_index = -1
        best_size = 0
        best_start = 0
        for i, (start, size) in enumerate(self._free):
            aligned = round_up(start, align)
            if aligned + reserved <= start + size and (best_index < 0 or size < best_size):
                best_index, best_size, best_start = i, size, aligned
        if best_index < 0:
            raise DeviceError(self._out_of_memory_message(nbytes, reserved, align))

        block_start, block_size = self._free[best_index]
        block_end = block_start + block_size
        # Replace the chosen block by what is left on either side of the allocation, in address
        # order (front padding exists only when align exceeds the base alignment).
        leftovers = []
        if best_start > block_start:
            leftovers.append((block_start, best_start - block_start))
        if best_start + reserved < block_end:
            leftovers.append((best_start + reserved, block_end - best_start - reserved))
        self._free[best_index:best_index + 1] = leftovers

        self._serial += 1
        self._live[best_start] = Allocation(best_start, nbytes, reserved, self._serial)
        bisect.insort(self._live_starts, best_start)
        self._used += reserved
        self._requested += nbytes
        self._peak_used = max(self._peak_used, self._used)
        return best_start

    def free(self, address: int) -> None:
        """Release the allocation that starts at `address`, merging it with free neighbours."""
        allocation = self._live.get(address)
        if allocation is None:
            raise DeviceError(self._bad_free_message(address))
        del self._live[address]
        self._live_starts.pop(bisect.bisect_left(self._live_starts, address))
        self._used -= allocation.reserved
        self._requested -= allocation.size

        start, size = allocation.start, allocation.reserved
        i = bisect.bisect_left(self._free, (start, 0))
        # Merge with the following free block if it begins exactly where this one ends.
        if i < len(self._free) and self._free[i][0] == start + size:
            size += self._free[i][1]
            del self._free[i]
        # Merge with the preceding free block if it ends exactly where this one begins.
        if i > 0 and sum(self._free[i - 1]) == start:
            prev_start, prev_size = self._free[i - 1]
            self._free[i - 1] = (prev_start, prev_size + size)
        else:
            self._free.insert(i, (start, size))

    # ---- queries -------------------------------------------------------------------------------

    def allocation_at(self, address: int) -> Allocation | None:
        """The live allocation whose usable bytes [start, start+size) contain `address`, or None."""
        i = bisect.bisect_right(self._live_starts, address) - 1
        if i < 0:
            return None
        allocation = self._live[self._live_starts[i]]
        return allocation if allocation.contains(address) else None

    def allocations(self) -> list[Allocation]:
        """Live allocations in address order."""
        return [self._live[s] for s in self._live_starts]

    def free_blocks(self) -> list[tuple[int, int]]:
        """Free blocks as (start, size) in address order."""
        return list(self._free)

    def stats(self) -> AllocatorStats:
        return AllocatorStats(
            capacity=self.capacity,
            used=self._used,
            free=self.capacity - self._used,
            largest_free=max((size for _, size in self._free), default=0),
            free_blocks=len(self._free),
            peak_used=self._peak_used,
            live_allocations=len(self._live),
            requested=self._requested,
        )

    # ---- messages ------------------------------------------------------------------------------

    def _out_of_memory_message(self, nbytes: int, reserved: int, align: int) -> str:
        st = self.stats()
        msg = (f"out of device memory: requested {nbytes} bytes ({reserved} after rounding to "
               f"{self.alignment}-byte granules, address aligned to {align}); {st.free} of "
               f"{st.capacity} bytes free, largest free block {st.largest_free} bytes")
        if st.free >= reserved:
            msg += (f"; enough memory is free in total but it is fragmented into "
                    f"{st.free_blocks} blocks (external fragmentation {st.external_fragmentation:.2f}),"
                    f" none of which fits the request")
        return msg

    def describe(self, address: int) -> str:
        """Where `address` falls, in words, for error messages ("in free memory", ...)."""
        if not 0 <= address < self.capacity:
            return f"outside device memory [0x0, 0x{self.capacity:x})"
        i = bisect.bisect_right(self._live_starts, address) - 1
        if i >= 0:
            a = self._live[self._live_starts[i]]
            if address < a.end:
                return f"inside the allocation at 0x{a.start:x} ({a.size} bytes)"
            if address < a.start + a.reserved:
                return (f"in the rounding padding after the allocation at 0x{a.start:x} "
                        f"({a.size} bytes)")
        return "in free memory"

    def _bad_free_message(self, address) -> str:
        if not isinstance(address, int) or isinstance(address, bool):
            return f"free({address!r}): not a device address"
        where = self.describe(address)
        msg = f"free(0x{address:x}): address is {where}"
        if where == "in free memory":
            msg += " (double free, or never returned by malloc)"
        elif where.startswith("inside"):
            msg += " but is not its start"
        return msg


__all__ = ["Allocation", "AllocatorStats", "BestFitAllocator"]
