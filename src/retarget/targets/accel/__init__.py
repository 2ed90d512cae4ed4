"""What every instruction-stream accelerator target shares (vta, dnnvm, ...).

- `program.py`: named buffers in a DRAM image, the image itself, and the JSON form of both;
- `kernel.py`:  a lowered region as a program + its constants, run on a device
                (upload / run / release / save / load);
- `device.py`:  a SimulatedDevice that places programs in its memory and runs their streams;
- `timing.py`:  the cycle model's result (per instruction, per engine, per layer) that
                report/ and the Perfetto trace read;
- `tile_search.py`: the loop that ranks tiling candidates cheaply and lets the cycle model
                judge the best few;
- `sim_errors.py`: malformed streams and deadlocks, as every simulator reports them.

A target's own directory keeps only what is that hardware's: its ISA, lowering, simulator and
cycle-model formulas.
"""
