"""The Device API (base.py: Device, SimulatedDevice, Task), its best-fit allocator
(allocator.py) and BLAS thread control (threads.py): what every accelerator, real or simulated,
sits behind. It knows nothing of targets, graphs or the runtime above it."""
