"""The VTA-style tensor accelerator: config, ISA, instruction-stream runtime, simulator."""
