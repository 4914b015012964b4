"""Load an ONNX model and clean it up before it reaches the compiler.

Exporters (PyTorch's above all) leave behind things the optimizer should not see: weights listed as
graph inputs, ``Shape -> Gather -> Unsqueeze -> Concat -> Reshape`` chains that compute a constant,
``Constant`` nodes, ``Identity`` and ``Dropout``. :func:`prepare` fixes the input shape, folds those
away, folds BatchNormalization into the Conv before it, and refuses models graphselect cannot
optimize with a message that says why. Pure onnx/numpy: no TVM here.
"""
from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Union

import numpy as np
import onnx
from onnx import numpy_helper
from onnx.reference import ReferenceEvaluator

from graphselect.errors import GraphSelectError, UnsupportedModel

logger = logging.getLogger(__name__)

ModelSource = Union[onnx.ModelProto, str, Path, bytes, bytearray, memoryview]

# The ops graphselect's zoo and the exporters it was tried on emit (the tests check that preparing
# leaves nothing else behind). Which ops a model may contain is decided by the compiler's importer:
# ``prepare(..., ops=...)`` (the pipeline passes TVM's ONNX converter map).
CNN_OPS = frozenset({
    "Conv", "BatchNormalization", "Relu", "Clip", "LeakyRelu", "Sigmoid", "Tanh", "HardSigmoid",
    "HardSwish", "Mul", "Add", "Sub", "Div", "MaxPool", "AveragePool", "GlobalAveragePool",
    "GlobalMaxPool", "Concat", "Flatten", "Reshape", "Gemm", "MatMul", "Identity", "Dropout",
    "Softmax", "Transpose", "Squeeze", "Unsqueeze", "Pad", "ReduceMean", "Constant", "Split", "Slice",
})

# Ops evaluated ahead of time when every input is constant: shape arithmetic, never compute the
# compiler should schedule (a Conv on constant inputs stays a Conv).
_FOLDABLE_OPS = frozenset({
    "Shape", "Gather", "Unsqueeze", "Squeeze", "Concat", "Slice", "Cast", "Mul", "Add", "Sub",
    "Div", "Reshape", "ConstantOfShape", "Range", "Identity", "Constant", "Floor", "Ceil", "Sqrt",
    "Equal", "Where", "Expand", "Transpose", "Split",
})

_DEFAULT_DOMAINS = ("", "ai.onnx")


@dataclass(frozen=True)
class Prepared:
    """A cleaned model and what :func:`prepare` learned and changed."""

    model: onnx.ModelProto
    input_names: tuple[str, ...]
    input_shapes: tuple[tuple[int, ...], ...]
    output_names: tuple[str, ...]
    folded_bn: int
    notes: tuple[str, ...]

    @property
    def shapes(self) -> dict[str, tuple[int, ...]]:
        """Input name -> its fixed shape, in the model's input order."""
        return dict(zip(self.input_names, self.input_shapes))

    @property
    def input_name(self) -> str:
        """The first input's name (the only one of most CNNs)."""
        return self.input_names[0]

    @property
    def input_shape(self) -> tuple[int, ...]:
        """The first input's shape."""
        return self.input_shapes[0]


def load_model(model_or_path: ModelSource) -> onnx.ModelProto:
    """Load an ONNX model and check that it is well formed.

    Parameters
    ----------
    model_or_path : onnx.ModelProto, str, pathlib.Path or bytes
        A model (checked and returned as is), a path to a ``.onnx`` file (external data next to
        it is loaded too), or the serialized model.

    Returns
    -------
    onnx.ModelProto

    Raises
    ------
    GraphSelectError
        The file does not exist.
    UnsupportedModel
        The bytes are not an ONNX model, or the model fails ``onnx.checker.check_model``.

    Examples
    --------
    >>> from onnx import helper, TensorProto
    >>> x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])
    >>> y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])
    >>> g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    >>> m = load_model(helper.make_model(g).SerializeToString())
    >>> m.graph.node[0].op_type
    'Relu'
    """
    path = None
    if isinstance(model_or_path, onnx.ModelProto):
        model, source = model_or_path, "the model"
    elif isinstance(model_or_path, (bytes, bytearray, memoryview)):
        source = "the model bytes"
        try:
            model = onnx.load_model_from_string(bytes(model_or_path))
        except Exception as e:  # protobuf raises DecodeError, but not only that
            raise UnsupportedModel(f"cannot parse {source} as an ONNX model: {e}") from e
    elif isinstance(model_or_path, (str, Path)):
        path = Path(model_or_path)
        source = str(path)
        if path.is_dir():
            raise GraphSelectError(f"{path} is a folder, not an .onnx file; pass the model file inside it")
        if not path.is_file():
            raise GraphSelectError(f"model file not found: {path}")
        try:
            model = onnx.load(str(path))  # also reads external data, relative to the file
        except Exception as e:
            raise UnsupportedModel(f"cannot load {source} as an ONNX model: {e}") from e
    else:
        raise TypeError(f"expected an onnx.ModelProto, a path or bytes, got {type(model_or_path).__name__}")
    try:
        # A path lets the checker handle models over protobuf's 2 GB limit.
        onnx.checker.check_model(str(path) if path is not None else model)
    except (onnx.checker.ValidationError, ValueError) as e:
        raise UnsupportedModel(f"{source} fails the ONNX checker: {e}") from e
    return model


def prepare(model: ModelSource, *, input_shapes: Mapping[str, tuple[int, ...]] | None = None,
            ops: frozenset[str] | None = None) -> Prepared:
    """Clean an ONNX CNN for the compiler: fix the input shape, fold constants and BatchNorm.

    The caller's model is not modified. Steps: drop weights listed as graph inputs; require float32
    inputs with static shapes (or ones given in ``input_shapes``); fold shape-only computations and
    ``Constant`` nodes into initializers; remove ``Identity`` and ``Dropout``; refuse ops outside
    ``ops`` (the compiler's importer) and ops of other domains; fold BatchNormalization into the
    preceding Conv (:func:`fold_batchnorm`); check the result and infer every tensor's shape.

    Parameters
    ----------
    model : onnx.ModelProto, str, pathlib.Path or bytes
        Anything :func:`load_model` accepts.
    input_shapes : dict of str to tuple of int, optional
        Fixed shapes for inputs, by name; needed where an input's shape is dynamic.
    ops : frozenset of str, optional
        The ONNX ops (default domain) the compiler can import; None: any op of the default domain.

    Returns
    -------
    Prepared
        The cleaned model (with inferred ``value_info``), its input names and shapes, output names,
        the number of BatchNormalization folded and notes on what was changed.

    Raises
    ------
    UnsupportedModel
        A non-float32 input, a dynamic input shape without ``input_shapes``, a bad
        ``input_shapes``, an op outside ``ops`` or the default domain, or shapes that do not fit together.
    GraphSelectError
        A path that does not exist.

    Examples
    --------
    >>> from onnx import helper, TensorProto
    >>> x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])
    >>> y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3, 8, 8])
    >>> g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    >>> p = prepare(helper.make_model(g), input_shapes={"x": (1, 3, 8, 8)})
    >>> p.input_name, p.input_shape, p.output_names
    ('x', (1, 3, 8, 8), ('y',))
    """
    source = load_model(model)
    m = onnx.ModelProto()
    m.CopyFrom(source)
    notes: list[str] = []

    # 1. Weights listed as inputs (old PyTorch exporters) are constants, not inputs.
    init_names = {t.name for t in m.graph.initializer}
    weight_inputs = [i for i in m.graph.input if i.name in init_names]
    if weight_inputs:
        _keep(m.graph.input, [i.name not in init_names for i in m.graph.input])
        notes.append(f"removed {len(weight_inputs)} graph input(s) that are initializers")
        if m.ir_version < 4:  # IR 3 requires every initializer to be a graph input
            m.ir_version = 4
            notes.append("raised IR version to 4 so initializers need not be graph inputs")

    # 2. float32 inputs.
    inps = _float_inputs(m)

    # 3. Fixed input shapes.
    if input_shapes:
        unknown = sorted(set(input_shapes) - {i.name for i in inps})
        if unknown:
            names = ", ".join(f"'{i.name}'" for i in inps)
            raise UnsupportedModel(f"an input shape names {', '.join(repr(n) for n in unknown)}, but the model's "
                                   f"input{'s are' if len(inps) > 1 else ' is'} {names}")
    in_shapes = []
    for inp in inps:
        in_shapes.append(_fix_input_shape(inp, (input_shapes or {}).get(inp.name)))
        if input_shapes and inp.name in input_shapes:
            notes.append(f"input '{inp.name}' shape set to {list(in_shapes[-1])}")
    shape_text = ", ".join(f"'{i.name}' of shape {list(s)}" for i, s in zip(inps, in_shapes))
    del m.graph.value_info[:]
    for out in m.graph.output:
        if out.type.HasField("tensor_type") and out.type.tensor_type.HasField("shape"):
            # Keep the rank (the checker wants a shape on outputs), forget the dims.
            for d in out.type.tensor_type.shape.dim:
                d.Clear()
    m = _infer(m, notes)

    # 4. Constants, Identity, Dropout.
    m = _fold_constants(m, notes)
    _drop_identities(m, notes)
    _remove_dead(m)

    # 5. Only ops we optimize.
    _check_supported(m, ops)

    # 6. BatchNorm into Conv.
    m, folded = fold_batchnorm(m)
    if folded:
        notes.append(f"folded {folded} BatchNormalization into the Conv before it")

    # 7. Final check; shapes for everything.
    del m.graph.value_info[:]
    try:
        onnx.checker.check_model(m)
        m = onnx.shape_inference.infer_shapes(m, check_type=True, strict_mode=True, data_prop=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as e:
        raise UnsupportedModel(f"the model is inconsistent with input {shape_text}: "
                               f"{' '.join(str(e).split())}; "
                               f"check --input-shape") from e
    shapes = _static_shapes(m)
    for node in m.graph.node:
        # ONNX shape inference takes a constant Reshape target as given, without counting elements.
        if node.op_type == "Reshape" and node.input[0] in shapes and node.output[0] in shapes:
            src, dst = shapes[node.input[0]], shapes[node.output[0]]
            if np.prod(src, dtype=np.int64) != np.prod(dst, dtype=np.int64):
                raise UnsupportedModel(
                    f"the model is inconsistent with input {shape_text}: Reshape "
                    f"'{node.name or node.output[0]}' turns {list(src)} into {list(dst)}; check --input-shape")
    unknown = [v.name for v in list(m.graph.value_info) + list(m.graph.output) if v.name not in shapes]
    if unknown:
        notes.append(f"{len(unknown)} tensor(s) without a static shape after inference: "
                     + ", ".join(f"'{n}'" for n in unknown[:5]) + (", ..." if len(unknown) > 5 else ""))
    for n in notes:
        logger.info("%s", n)
    return Prepared(model=m, input_names=tuple(i.name for i in inps), input_shapes=tuple(in_shapes),
                    output_names=tuple(o.name for o in m.graph.output), folded_bn=folded, notes=tuple(notes))


def fold_batchnorm(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    """Fold each BatchNormalization that directly follows a Conv into that Conv's weight and bias.

    A BN is folded when its input is a Conv output used by nothing else (and not a graph output),
    the Conv weight, Conv bias and BN parameters are initializers (not also graph inputs), the BN
    is in inference form (only its first output used) and its parameters have one value per
    output channel. Then ``W' = W * s``, ``b' = (b - mean) * s + beta`` with
    ``s = gamma / sqrt(var + eps)``, computed in float64 and stored as float32; the Conv takes the
    BN's output name so graph outputs keep their names. Other BNs are left alone.

    Parameters
    ----------
    model : onnx.ModelProto
        Not modified.

    Returns
    -------
    model : onnx.ModelProto
        A copy with the BNs folded and weights no longer used removed.
    folded : int
        How many BNs were folded.

    Examples
    --------
    >>> import numpy as np
    >>> from onnx import helper, numpy_helper, TensorProto
    >>> inits = [numpy_helper.from_array(np.ones((2, 1, 1, 1), np.float32), "w")] + [
    ...     numpy_helper.from_array(np.full(2, v, np.float32), n)
    ...     for n, v in [("g", 2.0), ("b", 0.5), ("m", 0.0), ("v", 1.0)]]
    >>> nodes = [helper.make_node("Conv", ["x", "w"], ["c"]),
    ...          helper.make_node("BatchNormalization", ["c", "g", "b", "m", "v"], ["y"], epsilon=0.0)]
    >>> g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4, 4])],
    ...                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 4, 4])], inits)
    >>> m, n = fold_batchnorm(helper.make_model(g))
    >>> n, [node.op_type for node in m.graph.node], list(m.graph.node[0].output)
    (1, ['Conv'], ['y'])
    """
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    graph_inputs = {i.name for i in g.input}
    inits = {t.name: t for t in g.initializer if t.name not in graph_inputs}
    uses = _use_counts(g)
    producer = {o: n for n in g.node for o in n.output if o}
    taken = _all_names(g)
    folded = 0
    drop: set[int] = set()
    for k, bn in enumerate(g.node):
        if bn.op_type != "BatchNormalization" or bn.domain not in _DEFAULT_DOMAINS:
            continue
        if _attr(bn, "training_mode", 0) or not _attr(bn, "spatial", 1):
            continue
        if any(o and uses[o] for o in bn.output[1:]):  # training statistics are wanted
            continue
        conv = producer.get(bn.input[0])
        if conv is None or conv.op_type != "Conv" or conv.domain not in _DEFAULT_DOMAINS:
            continue
        if uses[conv.output[0]] != 1:
            continue
        names = [conv.input[1], *(conv.input[2:3] if len(conv.input) > 2 and conv.input[2] else []),
                 *bn.input[1:5]]
        if len(bn.input) < 5 or not all(n in inits for n in names):
            continue
        w = numpy_helper.to_array(inits[conv.input[1]])
        if w.dtype != np.float32 or w.ndim < 3:
            continue
        gamma, beta, mean, var = (numpy_helper.to_array(inits[n]).astype(np.float64) for n in bn.input[1:5])
        channels = w.shape[0]
        if any(p.shape != (channels,) for p in (gamma, beta, mean, var)):
            continue
        has_bias = len(conv.input) > 2 and bool(conv.input[2])
        b = numpy_helper.to_array(inits[conv.input[2]]).astype(np.float64) if has_bias else np.zeros(channels)
        s = gamma / np.sqrt(var + _attr(bn, "epsilon", 1e-5))
        w2 = (w.astype(np.float64) * s.reshape(-1, *([1] * (w.ndim - 1)))).astype(np.float32)
        b2 = ((b - mean) * s + beta).astype(np.float32)
        # New names: the original weight may be shared with another Conv.
        wname, bname = _fresh(f"{conv.input[1]}_bnfolded", taken), _fresh(f"{bn.output[0]}_bias_bnfolded", taken)
        g.initializer.extend([numpy_helper.from_array(w2, wname), numpy_helper.from_array(b2, bname)])
        inputs = [conv.input[0], wname, bname]
        del conv.input[:]
        conv.input.extend(inputs)
        conv.output[0] = bn.output[0]
        drop.add(k)
        folded += 1
    if folded:
        _keep(g.node, [k not in drop for k in range(len(g.node))])
        _remove_dead(m)
    return m, folded


def _float_inputs(m: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    inputs = list(m.graph.input)
    if not inputs:
        raise UnsupportedModel("the model has no inputs; graphselect optimizes CNNs with float32 inputs")
    for inp in inputs:
        if not inp.type.HasField("tensor_type") or inp.type.tensor_type.elem_type != onnx.TensorProto.FLOAT:
            raise UnsupportedModel(
                f"input '{inp.name}' is {_type_str(inp)}; graphselect supports float32 inputs (an integer input "
                f"such as a shape or an index makes the graph's shapes data-dependent: fold it into the model "
                f"as a constant)")
    return inputs


def _type_str(v: onnx.ValueInfoProto) -> str:
    if not v.type.HasField("tensor_type"):
        return v.type.WhichOneof("value") or "untyped"
    return onnx.helper.tensor_dtype_to_np_dtype(v.type.tensor_type.elem_type).name


def _fix_input_shape(inp: onnx.ValueInfoProto, given: tuple[int, ...] | None) -> tuple[int, ...]:
    tt = inp.type.tensor_type
    has_rank = tt.HasField("shape")
    dims = list(tt.shape.dim)
    if given is not None:
        shape = tuple(given)
        if not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d > 0 for d in shape):
            raise UnsupportedModel(f"input shape {list(shape)} for '{inp.name}' must be positive integers")
        if has_rank and len(shape) != len(dims):
            raise UnsupportedModel(f"input '{inp.name}' has rank {len(dims)} ({_dims_str(dims)}), "
                                   f"but the given shape {list(shape)} has rank {len(shape)}")
        shape = tuple(int(d) for d in shape)
    else:
        if not has_rank:
            raise UnsupportedModel(f"input '{inp.name}' has no shape; pass --input-shape {inp.name}:1,3,224,224 "
                                   f"(with your model's dims)")
        if not all(d.HasField("dim_value") and d.dim_value > 0 for d in dims):
            dynamic = [d.dim_param or f"dim {i}" for i, d in enumerate(dims)
                       if not (d.HasField("dim_value") and d.dim_value > 0)]
            raise UnsupportedModel(
                f"input '{inp.name}' has a dynamic shape [{_dims_str(dims)}] ({', '.join(dynamic)} not fixed); "
                f"pass --input-shape {inp.name}:{','.join(str(s) for s in _suggest(dims))}")
        shape = tuple(d.dim_value for d in dims)
    tt.shape.Clear()
    for d in shape:
        tt.shape.dim.add().dim_value = d
    return shape


def _dims_str(dims) -> str:
    return ",".join(str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?") for d in dims)


def _suggest(dims) -> list[int]:
    # Batch 1; an unknown spatial dim of an NCHW image gets the usual 224.
    out = []
    for i, d in enumerate(dims):
        if d.HasField("dim_value") and d.dim_value > 0:
            out.append(d.dim_value)
        else:
            out.append(224 if len(dims) == 4 and i >= 2 else 1)
    return out


def _infer(m: onnx.ModelProto, notes: list[str]) -> onnx.ModelProto:
    try:
        return onnx.shape_inference.infer_shapes(m, check_type=True, strict_mode=True, data_prop=True)
    except onnx.shape_inference.InferenceError as e:
        # Unsupported ops are reported later with a better message; keep going with what infers.
        logger.debug("strict shape inference failed: %s", e)
        msg = f"strict shape inference failed, used lenient: {str(e).splitlines()[0]}"
        if msg not in notes:
            notes.append(msg)
        return onnx.shape_inference.infer_shapes(m, data_prop=True)


def _static_shapes(m: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    shapes = {}
    g = m.graph
    for v in list(g.input) + list(g.output) + list(g.value_info):
        tt = v.type.tensor_type if v.type.HasField("tensor_type") else None
        if tt is not None and tt.HasField("shape") and all(d.HasField("dim_value") for d in tt.shape.dim):
            shapes[v.name] = tuple(d.dim_value for d in tt.shape.dim)
    for t in g.initializer:
        shapes[t.name] = tuple(t.dims)
    return shapes


def _fold_constants(m: onnx.ModelProto, notes: list[str]) -> onnx.ModelProto:
    counts: Counter[str] = Counter()
    while True:
        g = m.graph
        consts = {t.name: t for t in g.initializer}
        shapes = _static_shapes(m)
        graph_outputs = {o.name for o in g.output}
        keep, changed = [], False
        for node in g.node:
            values = _evaluate(node, consts, shapes, graph_outputs, m)
            keep.append(values is None)
            if values is None:
                continue
            for name, v in zip(node.output, values):
                if name:
                    consts[name] = numpy_helper.from_array(np.asarray(v), name)
                    g.initializer.append(consts[name])
            counts[node.op_type] += 1
            changed = True
        if not changed:
            break
        _keep(g.node, keep)
        _remove_dead(m)
        # Folding can make more shapes static (a Reshape with a constant shape), so infer again.
        del m.graph.value_info[:]
        m = _infer(m, notes)
    if counts:
        constants = counts.pop("Constant", 0)
        if constants:
            notes.append(f"converted {constants} Constant node(s) to initializers")
        if counts:
            notes.append(f"folded {sum(counts.values())} shape-only node(s) into constants ("
                         + ", ".join(f"{n} {op}" for op, n in sorted(counts.items())) + ")")
    return m


def _evaluate(node, consts, shapes, graph_outputs, model):
    if node.domain not in _DEFAULT_DOMAINS or node.op_type not in _FOLDABLE_OPS:
        return None
    if any(o in graph_outputs for o in node.output):  # keep a node to produce each graph output
        return None
    if node.op_type == "Shape":
        # Only the shape is needed, not the value: known after shape inference.
        if node.input[0] not in shapes:
            return None
        shape = np.array(shapes[node.input[0]], dtype=np.int64)
        start, end = _attr(node, "start", 0), _attr(node, "end", None)
        return [shape[start:end]]
    inputs = [i for i in node.input if i]
    if not all(i in consts for i in inputs):
        return None
    feeds = {i: numpy_helper.to_array(consts[i]) for i in inputs}
    # A one-node model, not the bare node: ReferenceEvaluator ignores `opsets` for a NodeProto and
    # runs the newest version of the op (Unsqueeze-13 rejects opset-11's `axes` attribute).
    try:
        g = onnx.helper.make_graph(
            [node], "fold",
            [onnx.helper.make_tensor_value_info(i, onnx.helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
             for i, v in feeds.items()],
            [onnx.helper.make_empty_tensor_value_info(o) for o in node.output if o])
        one = onnx.helper.make_model(g, opset_imports=model.opset_import, ir_version=model.ir_version)
        return ReferenceEvaluator(one).run(None, feeds)
    except Exception as e:  # an op the reference cannot run is left for the later stages
        logger.debug("cannot fold %s node '%s': %s", node.op_type, node.name, e)
        return None


def _drop_identities(m: onnx.ModelProto, notes: list[str]) -> None:
    g = m.graph
    graph_outputs = {o.name for o in g.output}
    uses = _use_counts(g)
    inits = {t.name: t for t in g.initializer}
    produced = {o for n in g.node for o in n.output if o}
    alias: dict[str, str] = {}

    def resolve(name):
        while name in alias:
            name = alias[name]
        return name

    dropped: Counter[str] = Counter()
    keep = []
    for node in g.node:
        keep.append(True)
        if not _is_passthrough(node, uses, inits):
            continue
        src, dst = resolve(node.input[0]), node.output[0]
        if dst not in graph_outputs:
            alias[dst] = src
        elif src in produced and src not in graph_outputs:
            # The graph output keeps its name: the producer writes it directly.
            alias[src] = dst
        else:  # output is a graph input, a weight, or another output: keep the copy
            continue
        keep[-1] = False
        dropped[node.op_type] += 1
    if not dropped:
        return
    _keep(g.node, keep)
    for node in g.node:
        for seq in (node.input, node.output):
            for i, name in enumerate(seq):
                if name:
                    seq[i] = resolve(name)
    del g.value_info[:]
    notes.append("removed " + ", ".join(f"{n} {op}" for op, n in sorted(dropped.items())) + " node(s)")


def _is_passthrough(node, uses, inits) -> bool:
    if node.domain not in _DEFAULT_DOMAINS or not node.input or not node.input[0]:
        return False
    if node.op_type == "Identity":
        return True
    if node.op_type != "Dropout":
        return False
    if len(node.output) > 1 and node.output[1] and uses[node.output[1]]:
        return False  # the mask is used
    if len(node.input) > 2 and node.input[2]:
        mode = inits.get(node.input[2])
        return mode is not None and not numpy_helper.to_array(mode).any()  # training unless known off
    return True


def _check_supported(m: onnx.ModelProto, ops: frozenset[str] | None) -> None:
    first: dict[str, str] = {}
    for i, node in enumerate(m.graph.node):
        default = node.domain in _DEFAULT_DOMAINS
        if default and node.op_type == "BatchNormalization" and _attr(node, "training_mode", 0):
            # TVM imports it as the inference form (running statistics): silently different numbers
            raise UnsupportedModel(f"BatchNormalization node '{node.name or node.output[0]}' has training_mode=1 "
                                   f"(batch statistics, updated running means): export the model for inference "
                                   f"(model.eval() in PyTorch)")
        if default and (ops is None or node.op_type in ops):
            continue
        op = node.op_type if default else f"{node.domain}.{node.op_type}"
        where = f"node '{node.name}'" if node.name else f"unnamed node #{i}"
        if not node.name and node.output:
            where += f" with output '{node.output[0]}'"
        first.setdefault(op, where)
    if first:
        listed = ", ".join(f"{op} ({where})" for op, where in first.items())
        raise UnsupportedModel(f"TVM's ONNX importer cannot take: {listed}; replace these ops before exporting "
                               f"(every op of the default ONNX domain that TVM imports is accepted)")


def _subgraph_inputs(node) -> set[str]:
    # Names a control-flow subgraph reads from the outer scope (over-approximated: every input).
    names = set()
    for a in node.attribute:
        for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
            for n in sub.node:
                names.update(n.input)
                names |= _subgraph_inputs(n)
    return names


def _use_counts(g: onnx.GraphProto) -> Counter:
    uses: Counter[str] = Counter()
    for n in g.node:
        uses.update(i for i in n.input if i)
        uses.update(_subgraph_inputs(n))
    uses.update(o.name for o in g.output)
    return uses


def _remove_dead(m: onnx.ModelProto) -> None:
    g = m.graph
    needed = {o.name for o in g.output}
    keep = []
    for node in reversed(g.node):
        keep.append(any(o in needed for o in node.output if o))
        if keep[-1]:
            needed.update(node.input)
            needed |= _subgraph_inputs(node)
    _keep(g.node, keep[::-1])
    _keep(g.initializer, [t.name in needed for t in g.initializer])


def _keep(repeated, mask) -> None:
    # Delete by index, back to front: holding on to elements across a clear is not portable
    # between protobuf implementations.
    for i in reversed(range(len(mask))):
        if not mask[i]:
            del repeated[i]


def _all_names(g: onnx.GraphProto) -> set[str]:
    names = {v.name for v in list(g.input) + list(g.output) + list(g.value_info)}
    names |= {t.name for t in g.initializer}
    for n in g.node:
        names.update(n.input)
        names.update(n.output)
    return names


def _fresh(base: str, taken: set[str]) -> str:
    name, k = base, 1
    while name in taken:
        name, k = f"{base}_{k}", k + 1
    taken.add(name)
    return name


def _attr(node, name, default):
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default
