"""The generic schedule (graphselect.codegen.schedule) on dense layers: numerics against numpy
for widths that divide, do not divide, and fall back; the vector chunk it picks."""
import numpy as np
import pytest
import tvm
from tvm import te

from graphselect.codegen.schedule import chunk_width, schedule_func
from graphselect.target import parse_target


def _dense(M, K, N):
    x = te.placeholder((M, K), name="x")
    w = te.placeholder((K, N), name="w")
    b = te.placeholder((N,), name="b")
    k = te.reduce_axis((0, K), "k")
    mm = te.compute((M, N), lambda i, j: te.sum(x[i, k] * w[k, j], axis=k), name="matmul")
    out = te.compute((M, N), lambda i, j: mm[i, j] + b[j], name="add")
    return te.create_prim_func([x, w, b, out])


@pytest.mark.parametrize("M,K,N", [(1, 1280, 1000), (1, 64, 256), (4, 96, 1000), (1, 50, 36), (1, 33, 1009)])
def test_dense_scheduled_matches_numpy(M, K, N):
    f = schedule_func(_dense(M, K, N)).with_attr("global_symbol", "main")
    mod = tvm.compile(tvm.IRModule({"main": f}), target=parse_target("llvm", threads=2).tvm_target()).mod
    rng = np.random.default_rng(0)
    x, w, b = (rng.standard_normal(s).astype("float32") for s in ((M, K), (K, N), (N,)))
    dev = tvm.cpu()
    out = tvm.runtime.tensor(np.zeros((M, N), "float32"), dev)
    mod["main"](*(tvm.runtime.tensor(a, dev) for a in (x, w, b)), out)
    ref = x.astype(np.float64) @ w + b
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


def test_chunk_width_keeps_eight_chunks_and_whole_vectors():
    assert chunk_width(1000) == 40          # 8 and 40 divide 1000; 200 leaves 5 chunks
    assert chunk_width(4096) == 128
    assert chunk_width(256) == 32
    assert chunk_width(1009) is None        # prime: the plain schedule
    assert chunk_width(36) is None          # too small to split


@pytest.mark.parametrize("M,K,N", [(1, 1280, 1000), (3, 64, 256)])
def test_matmul_by_a_constant_runs_as_a_packed_gemv(M, K, N):
    from tvm import relax as rx

    from graphselect.codegen.emit import emit_dense
    from graphselect.codegen.lower import build
    rng = np.random.default_rng(1)
    w = rng.standard_normal((K, N)).astype("float32")
    x = rx.Var("x", rx.TensorType((M, K), "float32"))
    bb = rx.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            expr = rx.op.matmul(x, rx.const(w))
            y = emit_dense(bb, expr, {})
            assert y is not None
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    mod = bb.get()
    assert "dense_gemv" in [gv.name_hint for gv in mod.get_global_vars()]
    target = parse_target("llvm", threads=2).tvm_target()
    vm = rx.VirtualMachine(build(mod, target), tvm.cpu())
    xv = rng.standard_normal((M, K)).astype("float32")
    got = vm["main"](tvm.runtime.tensor(xv)).numpy()
    ref = xv.astype(np.float64) @ w
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


def test_other_matmuls_are_left_to_the_generic_path():
    from tvm import relax as rx

    from graphselect.codegen.emit import emit_dense
    x = rx.Var("x", rx.TensorType((1, 33), "float32"))
    y = rx.Var("y", rx.TensorType((33, 1009), "float32"))
    bb = rx.BlockBuilder()
    with bb.function("main", [x, y]):
        assert emit_dense(bb, rx.op.matmul(x, y), {}) is None                       # not a constant
        assert emit_dense(bb, rx.op.matmul(x, rx.const(np.ones((33, 1009), "float32"))), {}) is None  # prime N
        big = rx.Var("b", rx.TensorType((32, 33), "float32"))
        assert emit_dense(bb, rx.op.matmul(big, rx.const(np.ones((33, 64), "float32"))), {}) is None  # 32 rows
        bb.emit_func_output(x)


def _shuffle_func(C, H):
    from tvm import relax as rx
    a = rx.Var("a", rx.TensorType((1, C, H, H), "float32"))
    b = rx.Var("b", rx.TensorType((1, C, H, H), "float32"))
    bb = rx.BlockBuilder()
    with bb.function("main", [a, b]):
        with bb.dataflow():
            c = bb.emit(rx.op.concat([a, b], axis=1))
            t = bb.emit(rx.op.permute_dims(bb.emit(rx.op.reshape(c, (1, 2, C, H, H))), [0, 2, 1, 3, 4]))
            o = bb.emit_output(bb.emit(rx.op.split(bb.emit(rx.op.reshape(t, (1, 2 * C, H, H))), 2, axis=1)))
        bb.emit_func_output(o)
    seq = tvm.transform.Sequential([rx.transform.LegalizeOps(), rx.transform.AnnotateTIROpPattern(),
                                    rx.transform.FuseOps(), rx.transform.FuseTIR()])
    mod = seq(bb.get())
    return next(f for _, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc))


@pytest.mark.parametrize("C,H", [(116, 28), (58, 14), (24, 7)])
def test_channel_shuffle_runs_one_task_per_channel_with_vectors_along_the_image(C, H):
    f = schedule_func(_shuffle_func(C, H))
    text = f.script()
    # one parallel task per output channel (not per 4-lane piece of a row)
    assert f"T.parallel({C})" in text or f"T.parallel(T.int64({C}))" in text
    mod = tvm.compile(tvm.IRModule({"main": f.with_attr("global_symbol", "main")}),
                      target=parse_target("llvm", threads=2).tvm_target()).mod
    rng = np.random.default_rng(2)
    a, b = (rng.standard_normal((1, C, H, H)).astype("float32") for _ in range(2))
    dev = tvm.cpu()
    outs = [tvm.runtime.tensor(np.zeros((1, C, H, H), "float32"), dev) for _ in range(2)]
    mod["main"](tvm.runtime.tensor(a, dev), tvm.runtime.tensor(b, dev), *outs)
    shuffled = np.concatenate([a, b], 1).reshape(1, 2, C, H, H).transpose(0, 2, 1, 3, 4).reshape(1, 2 * C, H, H)
    np.testing.assert_array_equal(outs[0].numpy(), shuffled[:, :C])
    np.testing.assert_array_equal(outs[1].numpy(), shuffled[:, C:])
