"""What every int8 instruction-stream accelerator target shares (vta, dnnvm, ...).

From the graph to the stream:
- `layers.py`:       layer descriptions (Conv2d, Dense, Pool2d, ResidualAdd, RequantizeLayer);
- `reference.py`:    their integer meaning, composed from the op table;
- `graph_layers.py`: quantised-graph nodes as layers, and the rule checks every integer
                     accelerator makes (operands, fused Requantize, dense, add, maps);
- `tile_search.py`:  rank tiling candidates cheaply, let the cycle model judge the best few;
- `program.py`:      named buffers in a DRAM image, the image, and their checked JSON form;
- `config.py`:       a config's dict / JSON form and how a preset or file names one.
Running and timing it:
- `kernel.py`:       a lowered region as a program + constants (upload / run / release /
                     save / load);
- `device.py`:       a SimulatedDevice that places programs in its memory and runs their
                     streams, each confined to its own DRAM image;
- `timing.py`:       the cycle model's result (per instruction, engine, buffer and layer) that
                     report/ and the Perfetto trace read;
- `sim_errors.py`:   malformed streams and deadlocks, as every simulator reports them.

A target's own directory keeps only what is that hardware's: its ISA, lowering, simulator and
cycle-model formulas.
"""
