"""BestFitAllocator: best fit, splitting, coalescing, fragmentation figures, errors, invariants."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from retarget.errors import DeviceError
from retarget.device.allocator import BestFitAllocator


def make_holes(alloc: BestFitAllocator, sizes: list[int]) -> list[int]:
    """Allocate blocks of `sizes` separated by 64-byte guards, then free the sized blocks so the
    free list holds holes of exactly those sizes (guards stop them from coalescing)."""
    holes = []
    for size in sizes:
        holes.append(alloc.malloc(size))
        alloc.malloc(64)  # guard
    for p in holes:
        alloc.free(p)
    return holes


def test_best_fit_picks_smallest_fitting_hole():
    alloc = BestFitAllocator(4096, alignment=64)
    holes = make_holes(alloc, [512, 128, 256, 192])
    # 150 rounds to 192: the 192 hole fits exactly; 256 and 512 also fit but are larger.
    assert alloc.malloc(150) == holes[3]
    # 100 rounds to 128: the 128 hole is the smallest fitting one (not the lower-address 512).
    assert alloc.malloc(100) == holes[1]
    # 200 -> 256: only 256 and 512 remain among holes; 256 is chosen.
    assert alloc.malloc(200) == holes[2]


def test_best_fit_splits_and_keeps_remainder_free():
    alloc = BestFitAllocator(4096, alignment=64)
    holes = make_holes(alloc, [512])
    p = alloc.malloc(128)
    assert p == holes[0]
    # The rest of the 512 hole stays free right after the allocation.
    assert (p + 128, 384) in alloc.free_blocks()


def test_coalescing_with_both_neighbours_restores_one_block():
    alloc = BestFitAllocator(1024, alignment=64)
    a, b, c = alloc.malloc(64), alloc.malloc(64), alloc.malloc(64)
    alloc.free(a)
    alloc.free(c)  # merges with the free tail
    assert alloc.free_blocks() == [(0, 64), (128, 1024 - 128)]
    alloc.free(b)  # merges with both neighbours at once
    assert alloc.free_blocks() == [(0, 1024)]
    st_ = alloc.stats()
    assert (st_.used, st_.free, st_.free_blocks, st_.largest_free) == (0, 1024, 1, 1024)
    assert st_.peak_used == 192


def test_fragmentation_figures_on_checkerboard():
    # 16 blocks of 64 bytes filling 1 KiB; free every other one -> 8 holes of 64 bytes.
    alloc = BestFitAllocator(1024, alignment=64)
    ptrs = [alloc.malloc(64) for _ in range(16)]
    for p in ptrs[::2]:
        alloc.free(p)
    s = alloc.stats()
    assert (s.used, s.free, s.largest_free, s.free_blocks) == (512, 512, 64, 8)
    assert s.external_fragmentation == pytest.approx(1 - 64 / 512)
    assert s.peak_used == 1024
    # 128 bytes are free many times over but no hole holds them: the error says fragmentation.
    with pytest.raises(DeviceError) as e:
        alloc.malloc(128)
    msg = str(e.value)
    assert "requested 128 bytes" in msg and "512 of 1024 bytes free" in msg
    assert "largest free block 64" in msg and "fragmented into 8 blocks" in msg


def test_out_of_memory_when_not_enough_free():
    alloc = BestFitAllocator(256, alignment=64)
    alloc.malloc(200)
    with pytest.raises(DeviceError) as e:
        alloc.malloc(100)
    msg = str(e.value)
    assert "requested 100 bytes" in msg and "0 of 256 bytes free" in msg
    assert "fragmented" not in msg  # the pool is simply full


def test_alignment_of_sizes_and_addresses():
    alloc = BestFitAllocator(4096, alignment=32)
    a = alloc.malloc(1)
    b = alloc.malloc(33)
    assert (a, b) == (0, 32)  # 1 byte reserves one 32-byte granule
    assert alloc.stats().used == 32 + 64
    assert alloc.stats().requested == 34
    c = alloc.malloc(10, align=256)
    assert c % 256 == 0 and c == 256
    # The front padding [96, 256) went back to the free list and serves a later request.
    assert (96, 160) in alloc.free_blocks()
    d = alloc.malloc(100)
    assert d == 96
    with pytest.raises(DeviceError):
        alloc.malloc(10, align=48)


@pytest.mark.parametrize("size", [0, -8, 2.5, True])
def test_bad_sizes_rejected(size):
    alloc = BestFitAllocator(1024)
    with pytest.raises(DeviceError, match="size must be a positive"):
        alloc.malloc(size)


def test_bad_construction():
    with pytest.raises(DeviceError):
        BestFitAllocator(0)
    with pytest.raises(DeviceError):
        BestFitAllocator(1024, alignment=24)


def test_double_free_and_unknown_pointers_name_the_address():
    alloc = BestFitAllocator(1024, alignment=64)
    p = alloc.malloc(100)
    q = alloc.malloc(64)
    alloc.free(p)
    with pytest.raises(DeviceError, match=r"free\(0x0\).*double free"):
        alloc.free(p)
    with pytest.raises(DeviceError, match=r"free\(0x90\).*inside the allocation at 0x80"):
        alloc.free(q + 16)
    with pytest.raises(DeviceError, match=r"free\(0x1000\).*outside device memory"):
        alloc.free(4096)
    with pytest.raises(DeviceError, match="not a device address"):
        alloc.free("0x40")


def test_allocation_at_finds_containing_allocation_only_within_requested_bytes():
    alloc = BestFitAllocator(1024, alignment=64)
    p = alloc.malloc(40)
    assert alloc.allocation_at(p).start == p
    assert alloc.allocation_at(p + 39).start == p
    assert alloc.allocation_at(p + 40) is None  # rounding padding is not usable memory
    assert alloc.allocation_at(-1) is None


# ---- property test ---------------------------------------------------------------------------

ops = st.lists(
    st.one_of(
        st.tuples(st.just("malloc"), st.integers(1, 600), st.sampled_from([None, 16, 128, 512])),
        st.tuples(st.just("free"), st.integers(0, 10_000), st.none()),
    ),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(sequence=ops, alignment=st.sampled_from([8, 16, 64]))
def test_random_sequences_keep_invariants(sequence, alignment):
    capacity = 4096
    alloc = BestFitAllocator(capacity, alignment=alignment)
    live: dict[int, int] = {}  # start -> requested size, as this test saw it
    for op, n, align in sequence:
        if op == "malloc":
            try:
                p = alloc.malloc(n, align)
            except DeviceError:
                # OOM must be real: no free block can hold the rounded, aligned request.
                rounded = -(-n // alignment) * alignment
                a = max(align or alignment, alignment)
                for start, size in alloc.free_blocks():
                    assert -(-start // a) * a + rounded > start + size
                continue
            assert p % max(align or alignment, alignment) == 0
            assert p not in live
            live[p] = n
        elif live:
            p = sorted(live)[n % len(live)]
            alloc.free(p)
            del live[p]

        # Live allocations (reserved extents) never overlap and stay inside the pool.
        reserved = sorted((a.start, a.reserved) for a in alloc.allocations())
        assert {a.start: a.size for a in alloc.allocations()} == live
        for start, size in reserved:
            assert 0 <= start and start + size <= capacity
        # Free blocks and reserved blocks tile [0, capacity) exactly, and no two free blocks touch.
        free = alloc.free_blocks()
        pieces = sorted(free + reserved)
        cursor = 0
        for start, size in pieces:
            assert start == cursor and size > 0
            cursor += size
        assert cursor == capacity
        for (s1, z1), (s2, _) in zip(free, free[1:]):
            assert s1 + z1 < s2
        s = alloc.stats()
        assert s.used + s.free == capacity
        assert s.free == sum(size for _, size in free)
        assert s.peak_used >= s.used

    for p in list(live):
        alloc.free(p)
    assert alloc.free_blocks() == [(0, capacity)]
    assert alloc.stats().external_fragmentation == 0.0


def test_free_of_rounding_padding_is_explained():
    alloc = BestFitAllocator(1024, alignment=64)
    p = alloc.malloc(40)
    with pytest.raises(DeviceError, match=r"free\(0x28\).*rounding padding after the allocation at 0x0"):
        alloc.free(p + 40)
