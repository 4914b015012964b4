"""Regenerate torch_mobile.onnx: a small CNN with the mobile-network constructs (ReLU6, SiLU,
Hardswish, Hardsigmoid, squeeze-and-excitation, depthwise and grouped convs, torchvision's
channel shuffle with ``x.size()``/``view``/``transpose``, ``chunk``, ``cat``, a channel slice,
residual add), written by PyTorch's TorchScript ONNX exporter so the tests see exactly what that
exporter emits for them. Run by hand: `python tests/data/make_torch_mobile_fixture.py`."""

import torch
from torch import nn
from torch.nn import functional as F


def cbn(cin, cout, k, stride=1, groups=1, act=None):
    layers = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    return nn.Sequential(*layers, *([act] if act is not None else []))


def channel_shuffle(x, groups: int):
    # torchvision.models.shufflenetv2.channel_shuffle, verbatim
    batchsize, num_channels, height, width = x.size()
    channels_per_group = num_channels // groups
    x = x.view(batchsize, groups, channels_per_group, height, width)
    x = torch.transpose(x, 1, 2).contiguous()
    x = x.view(batchsize, -1, height, width)
    return x


class SqueezeExcitation(nn.Module):
    # torchvision.ops.SqueezeExcitation with EfficientNet's SiLU
    def __init__(self, c, squeeze):
        super().__init__()
        self.fc1 = nn.Conv2d(c, squeeze, 1)
        self.activation = nn.SiLU()
        self.fc2 = nn.Conv2d(squeeze, c, 1)
        self.scale_activation = nn.Sigmoid()

    def forward(self, x):
        s = F.adaptive_avg_pool2d(x, 1)
        s = self.scale_activation(self.fc2(self.activation(self.fc1(s))))
        return s * x


class InvertedResidual(nn.Module):
    def __init__(self, c, expand):
        super().__init__()
        h = c * expand
        self.expand = cbn(c, h, 1, act=nn.ReLU6())
        self.dw = cbn(h, h, 3, groups=h, act=nn.SiLU())
        self.se = SqueezeExcitation(h, c // 4)
        self.project = cbn(h, c, 1)

    def forward(self, x):
        return x + self.project(self.se(self.dw(self.expand(x))))


class ShuffleUnit(nn.Module):
    # torchvision's ShuffleNetV2 stride-1 InvertedResidual
    def __init__(self, c):
        super().__init__()
        b = c // 2
        self.branch2 = nn.Sequential(cbn(b, b, 1, act=nn.ReLU()), cbn(b, b, 3, groups=b), cbn(b, b, 1, act=nn.ReLU()))

    def forward(self, x):
        x1, x2 = x.chunk(2, dim=1)
        return channel_shuffle(torch.cat((x1, self.branch2(x2)), dim=1), 2)


class MobileNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = cbn(3, 16, 3, stride=2, act=nn.Hardswish())
        self.dw = cbn(16, 16, 3, groups=16, act=nn.ReLU6())
        self.block = InvertedResidual(16, 3)
        self.grouped = cbn(16, 32, 3, stride=2, groups=4, act=nn.ReLU())
        self.shuffle = ShuffleUnit(32)
        self.gate = nn.Hardsigmoid()
        self.last = cbn(24, 48, 1, act=nn.Hardswish())
        self.fc = nn.Linear(48, 10)

    def forward(self, x):
        x = self.shuffle(self.grouped(self.block(self.dw(self.stem(x)))))
        x = x * self.gate(x.mean((2, 3), keepdim=True))  # MobileNetV3-style gate on a ReduceMean
        x = self.last(x[:, :24])
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


if __name__ == "__main__":
    from make_torch_fixture import export      # same folder: BN statistics and exporter settings
    torch.manual_seed(0)
    out = export(MobileNet(), "torch_mobile.onnx", "logits", 17)
    print(out, out.stat().st_size, "bytes")
