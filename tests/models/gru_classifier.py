"""An embedding + GRU text classifier for `mpsprobe check --train`: token ids,
an embedding (padding index 0), a two-layer bidirectional GRU, dropout, a linear
head on the last step of both directions, cross-entropy."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class GRUClassifier(nn.Module):
    def __init__(self, vocab=100, dim=16, hidden=24, classes=3):
        super().__init__()
        self.embedding = nn.Embedding(vocab, dim, padding_idx=0)
        self.gru = nn.GRU(dim, hidden, num_layers=2, batch_first=True, bidirectional=True)
        self.dropout = nn.Dropout(0.1)
        self.head = nn.Linear(2 * hidden, classes)

    def forward(self, tokens):
        out, _ = self.gru(self.embedding(tokens))
        return self.head(self.dropout(out[:, -1]))


def build():
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(1, 100, (4, 7), generator=generator)
    targets = torch.tensor([0, 2, 1, 2])

    def loss(logits):
        return F.cross_entropy(logits, targets)
    return GRUClassifier(), tokens, loss
