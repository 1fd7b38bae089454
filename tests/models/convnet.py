"""A small ConvNet for `mpsprobe check`: conv2d, relu, max_pool2d, dropout, linear, cross-entropy."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class ConvNet(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, kernel_size=3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.dropout = nn.Dropout(0.25)
        self.fc = nn.Linear(8 * 4 * 4, classes)

    def forward(self, x):
        x = self.pool(F.relu(self.conv(x)))
        return self.fc(self.dropout(torch.flatten(x, 1)))


def build():
    targets = torch.tensor([1, 7])

    def loss(logits):
        return F.cross_entropy(logits, targets)
    return ConvNet(), torch.randn(2, 3, 8, 8), loss
