"""VGG-11 with torchvision's own classifier, for the dense-layer benchmark:

    python bench/vgg_classifier.py OUT.onnx

The zoo's ``vgg11`` ends in GlobalAveragePool -> Gemm(512 -> 1000); torchvision's (and a
PyTorch export's) ends in Flatten -> Gemm(25088 -> 4096) -> ReLU -> Gemm(4096 -> 4096) -> ReLU ->
Gemm(4096 -> 1000) (dropout is gone in eval mode): 0.5 GB of float32 weights that are not convs,
which the zoo leaves out so its tests stay small. 224x224 input only (at 224 torchvision's
AdaptiveAvgPool2d(7) is the identity, so it is left out here too).
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def build():
    import onnx
    from models.builder import GraphBuilder
    from models.zoo import vgg11_features
    b = GraphBuilder("vgg11_fc", batch=1, image_size=224, seed=0, in_channels=3)
    x = vgg11_features(b)
    x = b.flatten(x, "flatten")
    b.channels[x] = 512 * 7 * 7
    x = b.relu(b.gemm(x, "classifier.0", 4096), "classifier.1")
    x = b.relu(b.gemm(x, "classifier.3", 4096), "classifier.4")
    x = b.gemm(x, "classifier.6", 1000)
    m = b.finish(x, doc="VGG-11 (BN) with torchvision's classifier")
    onnx.checker.check_model(m, full_check=False)
    return m


if __name__ == "__main__":
    import onnx
    out = sys.argv[1] if len(sys.argv) > 1 else "vgg11_fc.onnx"
    onnx.save(build(), out)
    print(out)
