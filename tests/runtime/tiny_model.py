"""A tiny TorchScript model with the serving signature (input_ids, attention_mask): compiles in
well under a second, for tests of the compile command and the store rather than of a real model."""

from __future__ import annotations

import warnings
from pathlib import Path

import torch


class Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(100, 4)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        pooled: torch.Tensor = (self.embed(input_ids) * attention_mask.unsqueeze(-1).float()).sum(1)
        return pooled


def save_tiny(path: Path) -> Path:
    """Write the tiny model (seeded: the same bytes every time) as TorchScript at ``path``."""
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.save(torch.jit.script(Tiny().eval()), str(path))
    return path
