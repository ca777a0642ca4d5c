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
    return _save(Tiny, path)


def _save(model: type[torch.nn.Module], path: Path) -> Path:
    torch.manual_seed(0)  # before the model is made: its weights are drawn then
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.save(torch.jit.script(model().eval()), str(path))
    return path


class _Spinning(Tiny):
    """The tiny model, but some inputs compute ``additions`` additions first (about a second per
    million on these hosts): a device busy for as long as a test needs."""

    def additions(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> int:
        return 0

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = (self.embed(input_ids) * attention_mask.unsqueeze(-1).float()).sum(1)
        acc = torch.zeros(1)
        for _ in range(self.additions(input_ids, attention_mask)):
            acc = acc + 1.0
        return out + acc * 0.0


class Slow(_Spinning):
    """A request whose first id is 99 computes for ``input_ids[0, 1]`` x 1,000,000 additions first:
    a batch hung on the device, on a real model runner."""

    def additions(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> int:
        return int(input_ids[0, 1]) * 1000000 if int(input_ids[0, 0]) == 99 else 0


def save_slow(path: Path) -> Path:
    """Write the slow model as TorchScript at ``path``."""
    return _save(Slow, path)


class SlowWarm(_Spinning):
    """The server's warm-up input (every id and mask 1) computes for minutes: a warm-up still
    running in the loader thread when the server is stopped, as on Neuron."""

    def additions(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> int:
        return 100_000_000 if bool((input_ids == 1).all()) and bool((attention_mask == 1).all()) else 0


def save_slow_warm(path: Path) -> Path:
    """Write the model slow to warm as TorchScript at ``path``."""
    return _save(SlowWarm, path)
