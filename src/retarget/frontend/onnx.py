"""ONNX frontend: ONNX file / ModelProto -> Graph, and Graph -> ModelProto for checking.

Import is opset-aware: nodes from older opsets are rewritten to the canonical (newest) form
by `onnx_upgrades.upgrade_node`, so no op definition needs to know about opsets.
Initializers (including the ones old exporters also list as graph inputs) and Constant nodes
become constant Values; attributes become plain Python values (ints, floats, strings, lists,
NumPy arrays for tensor attributes).

Every problem a user's file can have is reported at load time, with the node, op and value:
a file that is not ONNX or is truncated (ModelLoadError), ops we do not support (one
UnsupportedOpError listing all of them), cycles and undefined values (GraphError), and input
shapes that do not fit the model (InputError).
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Mapping

import numpy as np
import onnx
from onnx import numpy_helper

from ..errors import GraphError, InputError, ModelLoadError, UnsupportedOpError
from ..ir.graph import Graph, Node, Value, constant
from ..ir.types import DTYPES, TensorType
from .onnx_upgrades import upgrade_node

log = logging.getLogger(__name__)

# Opsets the importer is tested on. Older models load if every node they use is unchanged
# or upgraded by onnx_upgrades; newer ones are accepted with a warning.
TESTED_OPSETS = range(11, 22)
EXPORT_OPSET = 17
_ONNX_DOMAINS = ("", "ai.onnx")


# ---- reading ------------------------------------------------------------------------------------
def read_onnx(path) -> onnx.ModelProto:
    """Read and validate an ONNX file; ModelLoadError when it is not a usable ONNX model."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    if path.is_dir():
        raise ModelLoadError(f"{path}: is a directory, not an ONNX file")
    with open(path, "rb") as f:
        head = f.read(512)
    if not head:
        raise ModelLoadError(f"{path}: the file is empty, not an ONNX model")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as e:  # protobuf DecodeError, ...
        kind = "a text file" if _looks_like_text(head) else "truncated or corrupt"
        raise ModelLoadError(f"{path}: not a readable ONNX model ({kind}): "
                             f"{type(e).__name__}: {e}") from None
    _load_external_data(model, path)
    _validate(model, str(path), _looks_like_text(head), path=str(path))
    return model


def _load_external_data(model: onnx.ModelProto, path: Path) -> None:
    """Read the tensors a model keeps in files beside it (ONNX external data), after checking
    that each `location` is a regular file inside the model's directory: a location such as
    '../secret.bin', an absolute path or a symlink leading out is refused by name."""
    from onnx.external_data_helper import _get_all_tensors, uses_external_data
    base = path.parent.resolve()
    external = [t for t in _get_all_tensors(model) if uses_external_data(t)]
    for t in external:
        location = next((e.value for e in t.external_data if e.key == "location"), "")
        target = (base / location).resolve()
        if not location or Path(location).is_absolute() or not target.is_relative_to(base):
            raise ModelLoadError(f"{path}: tensor {t.name!r}: external data location "
                                 f"{location!r} escapes the model's directory {base} (only "
                                 f"files inside it are read)")
        if not target.is_file():
            raise ModelLoadError(f"{path}: tensor {t.name!r}: external data file {location!r} "
                                 f"is missing or not a regular file (in {base})")
    if external:
        try:
            onnx.load_external_data_for_model(model, str(base))
        except Exception as e:   # offsets or lengths beyond the file, unreadable file, ...
            raise ModelLoadError(f"{path}: the model's external data (files beside it) is "
                                 f"unreadable: {type(e).__name__}: {e}") from None


def _looks_like_text(head: bytes) -> bool:
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return all(c.isprintable() or c in "\r\n\t" for c in text)


def _validate(model: onnx.ModelProto, where: str, text: bool = False, path=None) -> None:
    # Protobuf parses many byte strings "successfully" into a mostly empty message, and a cut
    # file often parses up to the cut; so check that what we got is a whole model.
    hint = "looks like a text file, not an ONNX model" if text else "truncated or corrupt"
    if not model.HasField("graph") or not model.ir_version or not model.opset_import:
        missing = [what for what, ok in (("graph", model.HasField("graph")),
                                         ("ir_version", model.ir_version),
                                         ("opset_import", len(model.opset_import))) if not ok]
        raise ModelLoadError(f"{where}: not a valid ONNX model ({hint}: no {', '.join(missing)})")
    if not model.graph.output:
        raise ModelLoadError(f"{where}: the ONNX graph has no outputs ({hint})")
    try:
        # Given the path, the checker reads the file itself, which is about 3x faster on
        # ResNet-50 than handing it the parsed model (that re-serialises all weights).
        onnx.checker.check_model(path if path is not None else model)
    except onnx.checker.ValidationError as e:
        msg = str(e).strip()
        if any(m in msg for m in _CHECKS_DONE_BETTER_BY_IMPORT):
            log.debug("%s: onnx.checker: %s (left to the importer)", where, msg)
            return
        first = msg.splitlines()[0] if msg else type(e).__name__
        # The file parsed as a whole model, so it is not truncated: say what the checker found.
        raise ModelLoadError(f"{where}: invalid ONNX model: onnx.checker found: {first}") from None
    except ValueError as e:  # the checker refuses > 2 GB protos
        log.warning("%s: skipped onnx.checker (%s)", where, e)


# onnx.checker findings the importer reports itself with node, op and value named (or, for
# shapes missing on graph outputs, does not need): unsorted nodes are fine (we toposort),
# cycles/undefined/doubly defined values raise GraphError, unknown ops one UnsupportedOpError.
_CHECKS_DONE_BETTER_BY_IMPORT = ("topologically sorted", "No Op registered", "No opset import",
                                 "single static assignment", "Field 'shape' of 'type'")


def opset_of(model: onnx.ModelProto) -> int:
    """The default-domain opset a model was written for."""
    for imp in model.opset_import:
        if imp.domain in _ONNX_DOMAINS:
            return imp.version
    return 1


# ---- conversion -----------------------------------------------------------------------------
def attr_value(a: onnx.AttributeProto):
    """An ONNX attribute as a plain Python value (tensors as NumPy arrays, bytes as str)."""
    v = onnx.helper.get_attribute_value(a)
    if isinstance(v, onnx.TensorProto):
        return numpy_helper.to_array(v)
    if isinstance(v, bytes):
        return v.decode("utf-8")
    if isinstance(v, list):
        return [x.decode("utf-8") if isinstance(x, bytes) else
                numpy_helper.to_array(x) if isinstance(x, onnx.TensorProto) else x for x in v]
    return v


def _np_dtype(elem_type: int, what: str) -> str:
    try:
        name = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)).name
    except (KeyError, ValueError, TypeError):
        name = None
    if name not in DTYPES:
        try:
            tname = onnx.TensorProto.DataType.Name(elem_type) if elem_type else "undefined"
        except ValueError:   # a number no ONNX version defines
            tname = f"#{elem_type} (not an ONNX type)"
        raise UnsupportedOpError(f"{what} has element type {tname}, which retarget does not "
                                 f"support; supported: {', '.join(DTYPES)}")
    return name


def _input_type(vi: onnx.ValueInfoProto, given: tuple[int, ...] | None) -> TensorType:
    """The type of a graph input, binding dynamic dims from `given` (see module docstring)."""
    if not vi.type.HasField("tensor_type"):
        raise UnsupportedOpError(f"graph input {vi.name!r} is not a tensor "
                                 f"({vi.type.WhichOneof('value')}); only tensor inputs are supported")
    tt = vi.type.tensor_type
    dtype = _np_dtype(tt.elem_type, f"graph input {vi.name!r}")
    if not tt.HasField("shape"):
        if given is None:
            raise InputError(f"graph input {vi.name!r} has no shape in the model; pass one, e.g. "
                             f"input_shapes={{{vi.name!r}: (1, 3, 224, 224)}}")
        return TensorType(given, dtype)
    dims = list(tt.shape.dim)
    if given is not None:
        given = tuple(int(d) for d in given)
        if len(given) != len(dims):
            raise InputError(f"input {vi.name!r}: given shape {given} has rank {len(given)}, "
                             f"the model's input has rank {len(dims)} ({_dims_text(dims)})")
        for i, (d, g) in enumerate(zip(dims, given)):
            if d.HasField("dim_value") and d.dim_value != g:
                raise InputError(f"input {vi.name!r}: given shape {given} differs from the model's "
                                 f"static dim {i} = {d.dim_value} (model shape {_dims_text(dims)})")
            if g < 0:
                raise InputError(f"input {vi.name!r}: given shape {given} has a negative dim")
        return TensorType(given, dtype)
    shape = []
    for i, d in enumerate(dims):
        if d.HasField("dim_value"):
            shape.append(d.dim_value)
        elif i == 0:
            # Exporters mark the batch dim dynamic; inference of one sample is the usual intent.
            log.warning("input %r: dynamic batch dim %r bound to 1; pass input_shapes={%r: (...)} "
                        "to choose another size", vi.name, d.dim_param or "?", vi.name)
            shape.append(1)
        else:
            example = tuple(x.dim_value if x.HasField("dim_value") else "N" for x in dims)
            raise InputError(f"input {vi.name!r}: dim {i} ({d.dim_param or 'unknown'!r}) is dynamic "
                             f"(model shape {_dims_text(dims)}); give a static shape with "
                             f"input_shapes={{{vi.name!r}: {example}}} (replace each N by a size)")
    return TensorType(tuple(shape), dtype)


def _dims_text(dims) -> str:
    return "[" + ",".join(str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?")
                          for d in dims) + "]"


def _constant_node_value(n: onnx.NodeProto, name: str) -> np.ndarray:
    """The tensor a Constant node produces, from whichever value_* attribute it uses."""
    if len(n.attribute) != 1:
        raise GraphError(f"Constant '{name}': needs exactly one value attribute, has "
                         f"{[a.name for a in n.attribute]}")
    a = n.attribute[0]
    v = attr_value(a)
    if a.name == "value":
        return v
    if a.name in ("value_float", "value_floats"):
        return np.asarray(v, dtype=np.float32)
    if a.name in ("value_int", "value_ints"):
        return np.asarray(v, dtype=np.int64)
    raise UnsupportedOpError(f"Constant '{name}': attribute {a.name!r} (string or sparse "
                             f"constants) is not supported")


def _unique_node_names(g: onnx.GraphProto) -> list[str]:
    # ONNX does not require node names, or unique ones; the IR does.
    names, taken = [], set()
    for i, n in enumerate(g.node):
        base = n.name or f"{n.op_type}_{i}"
        name, k = base, 1
        while name in taken:
            name, k = f"{base}_{k}", k + 1
        taken.add(name)
        names.append(name)
    return names


def from_onnx_model(model: onnx.ModelProto,
                    input_shapes: Mapping[str, tuple[int, ...]] | None = None) -> Graph:
    """Convert a ModelProto to a Graph in the file's node order (untyped except graph inputs).

    Raises UnsupportedOpError listing every unsupported op, GraphError for undefined or doubly
    defined values, InputError for input shapes that do not fit the model."""
    from ..ops.registry import OPS
    input_shapes = dict(input_shapes or {})
    opset = opset_of(model)
    if opset not in TESTED_OPSETS:
        log.warning("model uses ONNX opset %d; retarget is tested on opsets %d..%d",
                    opset, TESTED_OPSETS.start, TESTED_OPSETS.stop - 1)
    g = model.graph
    values: dict[str, Value] = {}
    for init in g.initializer:
        try:
            array = numpy_helper.to_array(init)
        except (ValueError, TypeError) as e:  # raw_data shorter than the shape says
            raise ModelLoadError(f"initializer {init.name!r} is unreadable (truncated or "
                                 f"corrupt): {e}") from None
        try:
            values[init.name] = constant(init.name, array)
        except TypeError as e:
            raise UnsupportedOpError(f"initializer {init.name!r}: {e}") from None

    inputs = []
    real_inputs = [vi for vi in g.input if vi.name not in values]  # old exporters list weights too
    unknown = set(input_shapes) - {vi.name for vi in real_inputs}
    if unknown:
        raise InputError(f"input_shapes names unknown input(s) {sorted(unknown)}; the model's "
                         f"inputs are {[vi.name for vi in real_inputs]}")
    for vi in real_inputs:
        if vi.name in values:
            raise GraphError(f"graph input {vi.name!r} is listed twice")
        v = Value(vi.name, _input_type(vi, input_shapes.get(vi.name)))
        values[vi.name] = v
        inputs.append(v)

    names = _unique_node_names(g)
    # Define every node output first: files are meant to be topologically sorted, but are not
    # always, and toposort() puts them in order afterwards.
    producer: dict[str, str] = {}
    for n, name in zip(g.node, names):
        for y in n.output:
            if not y:
                continue
            if y in values or y in producer:
                first = producer.get(y, "a graph input or initializer")
                raise GraphError(f"{n.op_type} '{name}': output {y!r} is already defined by {first}")
            producer[y] = f"{n.op_type} '{name}'"
            if n.op_type == "Constant" and n.domain in _ONNX_DOMAINS:
                values[y] = constant(y, _constant_node_value(n, name))
            else:
                values[y] = Value(y)

    counter = [0]

    def new_const(hint: str, array) -> Value:
        counter[0] += 1
        return constant(f"{hint}__c{counter[0]}", np.asarray(array))

    nodes: list[Node] = []
    unsupported: list[str] = []
    bad_attrs: list[str] = []
    for n, name in zip(g.node, names):
        if n.op_type == "Constant" and n.domain in _ONNX_DOMAINS:
            continue
        ins = []
        for x in n.input:
            if x == "":
                ins.append(None)
            elif x in values:
                ins.append(values[x])
            else:
                raise GraphError(f"{n.op_type} '{name}': input {x!r} is not defined by any node, "
                                 f"graph input or initializer")
        outs = [values[y] if y else Value(f"{name}__unused{k}") for k, y in enumerate(n.output)]
        if n.domain not in _ONNX_DOMAINS:
            unsupported.append(f"{n.domain}.{n.op_type} '{name}'")
            continue
        node = upgrade_node(Node(n.op_type, name, ins, outs,
                                 {a.name: attr_value(a) for a in n.attribute}), opset, new_const)
        if node.op not in OPS:
            unsupported.append(f"{node.op} '{name}'")
            continue
        unknown_attrs = sorted(set(node.attrs) - set(OPS[node.op].attrs))
        if unknown_attrs:
            bad_attrs.append(f"{node.op} '{name}' ({', '.join(unknown_attrs)})")
        nodes.append(node)
    if unsupported or bad_attrs:
        ops = sorted({u.split(" '")[0] for u in unsupported})
        parts = []
        if unsupported:
            parts.append(f"{len(unsupported)} node(s) with op(s) retarget does not support "
                         f"({', '.join(ops)}): {', '.join(unsupported)}")
        if bad_attrs:
            parts.append(f"{len(bad_attrs)} node(s) with attributes retarget does not support: "
                         f"{', '.join(bad_attrs)}")
        raise UnsupportedOpError(f"the model uses {'; and '.join(parts)}")

    outputs = []
    for o in g.output:
        if o.name not in values:
            raise GraphError(f"graph output {o.name!r} is not defined by any node, graph input "
                             f"or initializer")
        outputs.append(values[o.name])
    return Graph(nodes, inputs, outputs, name=g.name or "graph")


def import_model(model: onnx.ModelProto, input_shapes=None, simplify: bool = True) -> Graph:
    """ModelProto -> verified, typed (and by default simplified) Graph."""
    from ..ir.verify import verify
    try:
        graph = from_onnx_model(model, input_shapes)
    except (TypeError, KeyError, AttributeError, IndexError, UnicodeDecodeError) as e:
        # A model is input: a field of an unexpected kind (e.g. a name that is not UTF-8)
        # ends in one error, not a traceback from inside the converter.
        raise ModelLoadError(f"malformed ONNX model ({type(e).__name__}: {e})") from None
    graph.toposort()
    verify(graph, context="after ONNX import")
    if simplify:
        from ..passes.simplify import simplify as _simplify
        graph = _simplify(graph)
    else:
        from ..passes.infer_shapes import infer_shapes
        graph = infer_shapes(graph)
    verify(graph, context="after shape inference" + (" and simplify" if simplify else ""))
    return graph


def load_onnx(path, input_shapes=None, simplify: bool = True) -> Graph:
    """Read an ONNX file -> Graph: read, convert, toposort, verify, infer shapes, simplify.

    `input_shapes` ({"x": (1, 3, 224, 224)}) binds dynamic input dims; a dynamic batch dim
    without one is bound to 1 (with a logged warning). With simplify=False the graph keeps
    every node, so a Reshape whose shape is computed at run time makes shape inference fail."""
    return import_model(read_onnx(path), input_shapes, simplify)


# ---- export -----------------------------------------------------------------------------------
def _onnx_attr(value):
    """Plain attribute value -> something onnx.helper.make_attribute accepts."""
    if isinstance(value, np.ndarray):
        return numpy_helper.from_array(value)
    if isinstance(value, (np.integer, np.floating)):
        return value.item()
    if isinstance(value, tuple):
        return list(value)
    return value


def _value_info(v: Value) -> onnx.ValueInfoProto:
    if v.type is None:
        return onnx.helper.make_empty_tensor_value_info(v.name)
    elem = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(v.type.dtype))
    return onnx.helper.make_tensor_value_info(v.name, elem, list(v.type.shape))


def to_onnx(graph: Graph, opset: int = EXPORT_OPSET) -> onnx.ModelProto:
    """Export `graph` as a ModelProto (constants as initializers), e.g. to run it on onnxruntime.

    Nodes are written in the IR's canonical form, which follows the newest ONNX signatures;
    choose `opset` accordingly when the graph uses ops whose signature changed after 17."""
    # ONNX runtimes want graph outputs written by a node: a graph output that was folded to a
    # constant keeps its name by having its initializer renamed and copied out by an Identity.
    const_outs = {v.name for v in graph.outputs if v.is_const}
    rename = {name: f"{name}__const" for name in const_outs}
    inits = [numpy_helper.from_array(np.asarray(v.const), rename.get(v.name, v.name))
             for v in graph.constants()]
    nodes = [onnx.helper.make_node("Identity", [rename[name]], [name], name=rename[name])
             for name in sorted(const_outs)]
    for n in graph.nodes:
        attrs = {}
        for k, a in n.attrs.items():
            if a is None:
                continue
            if isinstance(a, (list, tuple)) and not a:
                attrs[k] = onnx.helper.make_attribute(k, [], attr_type=onnx.AttributeProto.INTS)
                continue
            attrs[k] = _onnx_attr(a)
        ins = ["" if v is None else rename.get(v.name, v.name) for v in n.inputs]
        proto = onnx.helper.make_node(n.op, ins, [v.name for v in n.outputs], name=n.name,
                                      **{k: a for k, a in attrs.items()
                                         if not isinstance(a, onnx.AttributeProto)})
        proto.attribute.extend(a for a in attrs.values() if isinstance(a, onnx.AttributeProto))
        nodes.append(proto)
    outputs = [_value_info(v) for v in graph.outputs]
    gp = onnx.helper.make_graph(nodes, graph.name, [_value_info(v) for v in graph.inputs],
                                outputs, initializer=inits)
    opsets = [onnx.helper.make_opsetid("", opset)]
    model = onnx.helper.make_model(gp, opset_imports=opsets, producer_name="retarget")
    # The lowest IR version that can carry the opset, so older runtimes can read the model too.
    model.ir_version = onnx.helper.find_min_ir_version_for(opsets)
    return model
