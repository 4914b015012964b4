"""Regenerate torch_tiny.onnx: a small CNN written by PyTorch's own ONNX exporter (TorchScript
path), so the tests see exactly what that exporter emits (BN unfolded, Flatten or Shape chains,
weights named onnx::Conv_NNN). Run by hand: `python tests/data/make_torch_fixture.py`."""
from pathlib import Path

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + x)


class TinyNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.ReLU6())
        self.pool = nn.MaxPool2d(3, stride=2, padding=1)
        self.block = Block(16)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.2), nn.Linear(16, 10))

    def forward(self, x):
        x = self.block(self.pool(self.stem(x)))
        return torch.softmax(self.head(x), dim=1)


def export(net: nn.Module, name: str, output: str, opset: int) -> Path:
    """Give the BN layers non-trivial statistics (as after training) and export ``net`` in eval
    mode with the TorchScript exporter, dynamic batch, BN unfolded; returns the path written."""
    for m in net.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.2, 0.2)
            m.running_var.uniform_(0.5, 1.5)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.2, 0.2)
    net.eval()
    out = Path(__file__).with_name(name)
    torch.onnx.export(net, torch.randn(1, 3, 32, 32), str(out), input_names=["images"], output_names=[output],
                      dynamic_axes={"images": {0: "batch"}, output: {0: "batch"}}, opset_version=opset,
                      do_constant_folding=False, dynamo=False)
    return out


if __name__ == "__main__":
    torch.manual_seed(0)
    print(export(TinyNet(), "torch_tiny.onnx", "probs", 13))
