"""ResNet-50 built from torch alone (torchvision's layout), for `mpsprobe check --batch`
where torchvision is not installed; `torchvision:resnet50 --input 1,3,224,224` is the same network.

Bottleneck blocks [3, 4, 6, 3], widths 64-128-256-512 (x4), BatchNorm, ReLU,
1000 classes; one 3x224x224 image per sample. Random weights: only the speed
is measured.

    mpsprobe check benchmarks/models/resnet50.py --run --batch 1,2,4,8,16,32,64
"""
import torch
import torch.nn as nn


class Bottleneck(nn.Module):
    def __init__(self, c_in, width, stride):
        super().__init__()
        c_out = width * 4
        self.body = nn.Sequential(
            nn.Conv2d(c_in, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
            nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
            nn.Conv2d(width, c_out, 1, bias=False), nn.BatchNorm2d(c_out))
        self.down = None
        if stride != 1 or c_in != c_out:
            self.down = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        return self.relu(self.body(x) + (x if self.down is None else self.down(x)))


def resnet50(classes=1000):
    layers, c_in = [], 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for i in range(blocks):
            layers.append(Bottleneck(c_in, width, stride if i == 0 else 1))
            c_in = width * 4
    return nn.Sequential(
        nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
        nn.MaxPool2d(3, 2, 1), *layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c_in, classes))


def build():
    return resnet50(), torch.randn(1, 3, 224, 224)
