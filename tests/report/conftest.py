import pytest

from retarget.targets.vta.config import preset


@pytest.fixture(scope="session")
def program(blocked_gemm_stream):
    """The report tests' stream: blocked GEMM tiles of 4 input blocks, the GEMM repeated 8
    times (enough compute to show overlap), on pynq."""
    def build(tiles=6, vthreads=2):
        return blocked_gemm_stream(preset("pynq"), tiles=tiles, kb=4, vthreads=vthreads,
                                   gemm_loop=(8, 0, 0))
    return build
