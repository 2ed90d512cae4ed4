"""The errors retarget raises. Every one carries enough context (node, op, shapes)
for a user to see what went wrong without a traceback; the CLI prints only the message."""
from __future__ import annotations


class RetargetError(Exception):
    """Base class: anything a user can cause with bad input."""


class ModelLoadError(RetargetError):
    """The file is not a readable model (not ONNX, truncated, unreadable)."""


class UnsupportedOpError(RetargetError, NotImplementedError):
    """An op (or an op/attribute combination) that retarget does not implement."""


class GraphError(RetargetError):
    """A malformed graph: cycle, undefined value, value defined twice, type mismatch."""


class ShapeError(RetargetError):
    """Shapes or dtypes that an op cannot accept."""


class InputError(RetargetError):
    """Inputs given at run time that do not match the graph's inputs."""


class TargetError(RetargetError):
    """A target could not be found, configured, or could not compile/run a region."""


class PlacementError(TargetError):
    """A placement the user asked for that cannot be honoured: a node pinned to a device that
    cannot run it, or pins that contradict each other."""


class DeviceError(RetargetError):
    """A device was asked to do something invalid (bad address, bad task, out of memory)."""


def node_context(node) -> str:
    """'Conv 'stem/conv1'' — the prefix every node-related message starts with."""
    return f"{node.op} '{node.name}'"


class ResourceLimitError(RetargetError):
    """Work or memory beyond a configured limit (a tensor too large to allocate, a file larger
    than its manifest allows, a program that would run for hours). The message names the
    tensor, file or program, what it would need, the limit, and how to raise it."""
