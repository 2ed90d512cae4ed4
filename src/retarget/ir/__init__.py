"""Graph IR: Graph, Node, Value, TensorType."""
from .types import DTYPES, TensorType, dtype_name
from .graph import Graph, Node, Value, constant

__all__ = ["DTYPES", "TensorType", "dtype_name", "Graph", "Node", "Value", "constant"]
