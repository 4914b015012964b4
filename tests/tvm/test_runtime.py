"""runtime.Caller, what OptimizeResult.run calls: the same outputs as a fresh call, inputs staged
in tensors reused across calls without one call's outputs seeing the next call's inputs."""
import numpy as np
import tvm
from tvm import relax
from tvm.script import relax as R

from graphselect.runtime import Caller, call


@tvm.script.ir_module
class TwoInputs:
    @R.function
    def main(x: R.Tensor((2, 3), "float32"), y: R.Tensor((2, 3), "float32")):
        with R.dataflow():
            s = R.add(x, y)
            r = R.reshape(x, (3, 2))          # may be a view of the input's storage
            out = (s, r, x)
            R.output(out)
        return out


def _vm():
    ex = tvm.compile(TwoInputs, target="llvm")
    return relax.VirtualMachine(ex, tvm.cpu())


def test_caller_matches_call_and_outputs_survive_the_next_call():
    vm = _vm()
    caller = Caller(vm)
    rng = np.random.default_rng(0)
    x1, y1 = rng.standard_normal((2, 3)).astype("float32"), rng.standard_normal((2, 3)).astype("float32")
    first = caller([x1, y1])
    for got, want in zip(first, call(vm, [x1, y1])):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(first[0], x1 + y1)       # two inputs of one shape: both staged apart
    kept = [a.copy() for a in first]
    x2, y2 = x1 + 10, y1 - 10
    second = caller([x2, y2])
    for a, b in zip(first, kept):                            # the first call's outputs are copies
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(second[0], x2 + y2)
    np.testing.assert_array_equal(second[1], x2.reshape(3, 2))
    np.testing.assert_array_equal(second[2], x2)
    # the caller's input is not touched
    np.testing.assert_array_equal(x1, kept[2])
