"""A held-out style model calling eigh, svd and qr: a spectral head on a small MLP.

Eigenvectors, singular vectors and QR's factors are unique only up to a sign
(a phase when complex) per vector: a device returning the other correct answer
must not be called wrong (`check --run` judges them in canonical form).
"""
import torch
import torch.nn as nn


class SpectralHead(nn.Module):
    def __init__(self, features=16, classes=4):
        super().__init__()
        self.proj = nn.Linear(features, features)
        self.out = nn.Linear(3 * features, classes)

    def forward(self, x):                          # x: (batch, tokens, features)
        h = torch.tanh(self.proj(x))
        cov = h.mT @ h / h.shape[1] + 1e-3 * torch.eye(h.shape[-1], device=h.device)
        values, vectors = torch.linalg.eigh(cov)
        u, s, vh = torch.linalg.svd(h, full_matrices=False)
        q, r = torch.linalg.qr(h)
        summary = torch.cat([values, (vectors ** 2).sum(-2), s.new_zeros(values.shape).index_copy(
            -1, torch.arange(s.shape[-1], device=h.device), s)], dim=-1)
        return self.out(summary) + (q.abs().mean() + r.diagonal(dim1=-2, dim2=-1).abs().mean()
                                    + (u ** 2).sum() * 0 + vh.abs().mean())


def build():
    torch.manual_seed(0)
    return SpectralHead(), torch.randn(2, 24, 16)
