"""graphselect model zoo: ONNX CNNs (opset 17) with deterministic random weights.

>>> from models import build, list_models
>>> m = build("resnet18", image_size=64, seed=0)   # onnx.ModelProto

Public API: ``ZOO`` (name -> builder), ``build``, ``list_models``, ``save``; ``dynamo_pooling`` (a model as the dynamo exporter writes its pooling).
"""

from .exports import dynamo_pooling
from .prune import prune
from .quantize import quantize_qdq
from .zoo import ZOO, build, list_models, save

__all__ = ["ZOO", "build", "list_models", "save", "prune", "quantize_qdq", "dynamo_pooling"]
