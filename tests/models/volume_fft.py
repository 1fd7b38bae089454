"""A volume model for `mpsprobe check`: a 3-D convolution, a 2-D FFT low-pass written
inline in forward(), a 3-D grid_sample warp, and a float64 buffer (a deliberate
double-precision normaliser, as scientific code keeps)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class VolumeFFT(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv3d(1, 2, 3, padding=1)
        self.register_buffer("scale", torch.linspace(0.5, 1.5, 4, dtype=torch.float64))

    def forward(self, volume, grid):
        x = self.conv(volume)                                   # (N, 2, 4, 4, 4)
        spectrum = torch.fft.rfft2(x)
        x = torch.fft.irfft2(spectrum * 0.5, s=x.shape[-2:])
        x = F.grid_sample(x, grid, align_corners=False)
        weights = x.double() * self.scale                       # float64 on purpose
        return weights.sum(dim=-1).float()


def build():
    generator = torch.Generator().manual_seed(0)
    volume = torch.randn(1, 1, 4, 4, 4, generator=generator)
    grid = torch.rand(1, 4, 4, 4, 3, generator=generator) * 2 - 1
    return VolumeFFT(), (volume, grid)
