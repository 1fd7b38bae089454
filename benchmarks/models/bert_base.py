"""A BERT-base-shaped encoder built from torch alone, for `mpsprobe check --batch`.

bert-base-uncased's sizes: vocabulary 30522, 512 positions, hidden 768, 12
layers of 12 heads, feed-forward 3072, GELU, post-norm; one sequence of 128
tokens per sample. Random weights: only the speed is measured.

    mpsprobe check benchmarks/models/bert_base.py --run --batch 1,2,4,8,16,32,64

BERT_LAYERS=2 in the environment builds a shallower one (the same layers, fewer).
"""
import os

import torch
import torch.nn as nn

VOCAB, POSITIONS, HIDDEN, HEADS, FFN, SEQ = 30522, 512, 768, 12, 3072, 128


class Bert(nn.Module):
    def __init__(self, layers=12):
        super().__init__()
        self.words = nn.Embedding(VOCAB, HIDDEN)
        self.positions = nn.Embedding(POSITIONS, HIDDEN)
        self.norm = nn.LayerNorm(HIDDEN, eps=1e-12)
        layer = nn.TransformerEncoderLayer(HIDDEN, HEADS, FFN, dropout=0.1, activation="gelu",
                                           batch_first=True, layer_norm_eps=1e-12)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)

    def forward(self, tokens):
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        return self.encoder(self.norm(self.words(tokens) + self.positions(positions)))


def build():
    tokens = torch.randint(0, VOCAB, (1, SEQ), generator=torch.Generator().manual_seed(0))
    return Bert(int(os.environ.get("BERT_LAYERS", "12"))), tokens
