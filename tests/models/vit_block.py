"""One Vision Transformer block for `mpsprobe check`: a patch embedding (a 2-D
convolution with stride = kernel), a class token and position embedding, then
pre-norm multi-head self-attention and a GELU MLP, each with a residual."""
import torch
import torch.nn as nn


class ViTBlock(nn.Module):
    def __init__(self, dim=16, heads=2, patch=4, image=8):
        super().__init__()
        self.patches = nn.Conv2d(3, dim, patch, patch)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.position = nn.Parameter(torch.randn(1, (image // patch) ** 2 + 1, dim) * 0.02)
        self.norm1 = nn.LayerNorm(dim)
        self.attention = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, images):
        x = self.patches(images).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.position
        y = self.norm1(x)
        x = x + self.attention(y, y, y, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


def build():
    return ViTBlock(), torch.randn(2, 3, 8, 8)
