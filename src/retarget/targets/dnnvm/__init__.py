"""The `dnnvm` target: a DNNVM-style instruction-driven FPGA CNN overlay (docs/dnnvm.md)."""
