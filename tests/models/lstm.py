"""A two-layer LSTM sequence classifier for `mpsprobe check`."""
import torch
import torch.nn as nn


class SequenceClassifier(nn.Module):
    def __init__(self, features=8, hidden=16, classes=4):
        super().__init__()
        self.lstm = nn.LSTM(features, hidden, num_layers=2, batch_first=True)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.head(out[:, -1])


def build():
    return SequenceClassifier(), torch.randn(3, 5, 8)
