"""A small ResNet-like network for `mpsprobe check`: only 2-D convolutions (a stem,
two basic blocks, one with a strided 1×1 shortcut), batch norm, ReLU, a residual
add, adaptive average pooling and a linear head."""
import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class ResNetLike(nn.Module):
    def __init__(self, classes=5):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, 1, 1)
        self.blocks = nn.Sequential(Block(8, 8), Block(8, 16, stride=2))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(16, classes)

    def forward(self, x):
        x = self.blocks(torch.relu(self.stem(x)))
        return self.head(torch.flatten(self.pool(x), 1))


def build():
    return ResNetLike(), torch.randn(2, 3, 8, 8)
