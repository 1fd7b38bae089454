"""One nn.TransformerEncoderLayer for `mpsprobe check`."""
import torch
import torch.nn as nn


def build():
    layer = nn.TransformerEncoderLayer(d_model=16, nhead=4, dim_feedforward=32, batch_first=True)
    return layer, torch.randn(2, 6, 16)
