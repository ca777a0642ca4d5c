"""Seeded duration distributions for cold-start phases, written in profile files as one-key maps.

- ``{fixed: 5}``: always 5 s;
- ``{uniform: [240, 360]}``: uniform between the bounds;
- ``{lognormal: {median: 120, sigma: 0.3}}``: log-normal with that median and log-space sigma;
- ``{normal: {mean: 10, sd: 2}}``: normal, cut at zero.

A bare number is ``fixed``. Hand-written (a few lines) rather than scipy.stats, so the profile
format stays a plain YAML/JSON mapping and sampling stays on one seeded numpy Generator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np


class DistributionError(ValueError):
    """A distribution spec that cannot be read."""


@dataclass(frozen=True)
class Distribution:
    """One duration distribution in seconds."""

    kind: str
    a: float
    b: float = 0.0

    def sample(self, rng: np.random.Generator) -> float:
        if self.kind == "fixed":
            return self.a
        if self.kind == "uniform":
            return float(rng.uniform(self.a, self.b))
        if self.kind == "lognormal":
            return float(self.a * math.exp(self.b * rng.standard_normal()))
        return max(0.0, float(rng.normal(self.a, self.b)))

    def median(self) -> float:
        if self.kind == "uniform":
            return (self.a + self.b) / 2
        return self.a

    def mean(self) -> float:
        if self.kind == "uniform":
            return (self.a + self.b) / 2
        if self.kind == "lognormal":
            return self.a * math.exp(self.b**2 / 2)
        return self.a

    def describe(self) -> str:
        if self.kind == "fixed":
            return f"{self.a:g}s"
        if self.kind == "uniform":
            return f"U({self.a:g}-{self.b:g}s)"
        if self.kind == "lognormal":
            return f"logN(median {self.a:g}s, sigma {self.b:g})"
        return f"N({self.a:g}s, sd {self.b:g})"


def parse(spec: Any, where: str) -> Distribution:
    """A :class:`Distribution` from its profile-file form; ``where`` names it in errors."""
    if isinstance(spec, int | float) and not isinstance(spec, bool):
        return _checked(Distribution("fixed", float(spec)), where)
    if not isinstance(spec, dict) or len(spec) != 1:
        raise DistributionError(f"{where}: expected a number or one of {{fixed|uniform|lognormal|normal: ...}}")
    kind, value = next(iter(spec.items()))
    try:
        if kind == "fixed":
            return _checked(Distribution("fixed", float(value)), where)
        if kind == "uniform":
            low, high = (float(v) for v in value)
            if high < low:
                raise DistributionError(f"{where}: uniform bounds must be [low, high], got {value}")
            return _checked(Distribution("uniform", low, high), where)
        if kind == "lognormal":
            return _checked(Distribution("lognormal", float(value["median"]), float(value["sigma"])), where)
        if kind == "normal":
            return _checked(Distribution("normal", float(value["mean"]), float(value["sd"])), where)
    except (TypeError, ValueError, KeyError) as error:
        if isinstance(error, DistributionError):
            raise
        raise DistributionError(f"{where}: malformed {kind} distribution {value!r}") from None
    raise DistributionError(f"{where}: unknown distribution {kind!r}; use fixed, uniform, lognormal or normal")


def _checked(dist: Distribution, where: str) -> Distribution:
    if dist.a < 0 or dist.b < 0 or not math.isfinite(dist.a) or not math.isfinite(dist.b):
        raise DistributionError(f"{where}: durations and spreads must be finite and >= 0")
    return dist
