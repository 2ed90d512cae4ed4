"""What the ahead-of-time C targets (`c`, `sunway`) share: a region lowered to a Program
(lower.py, program.py, ir_json.py), the entry point every project exposes (entry.py: model.h,
main.c), building it (build.py), the kernel that owns the library and its artifact
(kernel.py), the device that runs it through ctypes (device.py) and the Target base
(target.py)."""
