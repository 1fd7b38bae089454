"""Do a device's dropout masks repeat across calls? (the module probe's repetition failure)

Draws two dropout masks in a row (p = 0.5, 4,096 values, as the probe's sample) per dtype and
prints, for each lane of 8 values, how often the second call's first 4 decisions equal the first
call's last 4. Independent masks agree half the time (0.5 +- 0.03 here); a generator whose
offset advances by 4 values per thread while a vectorised kernel draws 8 (two curand_uniform4
per thread for 16-bit dtypes) agrees every time (1.0).

    python benchmarks/dropout_repeats.py --device cuda
"""
import argparse

import torch


def overlap(device, dtype, n=4096, p=0.5):
    x = torch.ones(n, device=device, dtype=dtype)
    first = torch.nn.functional.dropout(x, p, training=True) != 0
    second = torch.nn.functional.dropout(x, p, training=True) != 0
    lanes_a, lanes_b = first.view(-1, 8).cpu(), second.view(-1, 8).cpu()
    return (lanes_b[:, :4] == lanes_a[:, 4:]).float().mean().item()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    device = parser.parse_args().device
    print(f"torch {torch.__version__}, {device}")
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        print(f"{str(dtype).replace('torch.', ''):9} agreement {overlap(device, dtype):.3f}")


if __name__ == "__main__":
    main()
