"""The MNIST network of pytorch/examples (mnist/main.py), for `mpsprobe check --batch`.

Two 3x3 convolutions (1->32->64), max-pooling, dropout, 9216->128->10; one
28x28 grey image per sample. The "6x faster training on MPS" claim is about
this scale of model.

    mpsprobe check benchmarks/models/mnist_cnn.py --run --train --batch 1,8,32,64,128,256
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(self.dropout1(x), 1)
        x = self.dropout2(F.relu(self.fc1(x)))
        return F.log_softmax(self.fc2(x), dim=1)


def build():
    return Net(), torch.randn(1, 1, 28, 28)
