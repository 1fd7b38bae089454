"""transformers' BertModel at bert-base sizes, built from a config (no download).

    mpsprobe check benchmarks/models/hf_bert.py --run --device cuda [--train]

Needs the transformers package; random weights (only support, numerics and
speed are measured). Eval mode: dropout off, so forward replays compare values.
"""
import torch


def build():
    from transformers import BertConfig, BertModel

    config = BertConfig()  # bert-base-uncased's sizes: 12 layers, 768 hidden, 12 heads
    model = BertModel(config).eval()
    tokens = torch.randint(0, config.vocab_size, (2, 128), generator=torch.Generator().manual_seed(0))
    return model, (tokens,)
