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
from collections.abc import Callable
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
        """One duration drawn from ``rng``."""
        return self.sampler(rng)()

    def sampler(self, rng: np.random.Generator) -> Callable[[], float]:
        """A function that draws one duration from ``rng`` at each call: what :meth:`sample` draws,
        in the same order from the same stream. A simulated fleet draws a pod's phases at every
        bind (a Knative run of the 14-day trace binds ~945,000 pods): this one decides the kind once,
        and draws a uniform as ``Generator.uniform`` computes it (low + (high - low) x a standard
        uniform, the same draw to the last bit) without its argument checks, a third of the cost."""
        low, high = self.a, self.b
        if self.kind == "fixed":
            return lambda: low
        if self.kind == "uniform":
            uniform, span = rng.random, high - low
            return lambda: low + span * uniform()
        if self.kind == "lognormal":
            standard_normal = rng.standard_normal
            return lambda: float(low * math.exp(high * standard_normal()))
        return lambda: max(0.0, float(rng.normal(low, high)))

    def median(self) -> float:
        if self.kind == "uniform":
            return (self.a + self.b) / 2
        return self.a

    def mean(self) -> float:
        """The mean of what :meth:`sample` draws (a normal's cut at zero included)."""
        if self.kind == "uniform":
            return (self.a + self.b) / 2
        if self.kind == "lognormal":
            return self.a * math.exp(self.b**2 / 2)
        if self.kind == "normal" and self.b > 0:
            # E[max(0, X)] for X ~ N(a, b): the cut moves the mean up by up to 0.4 sd.
            z = self.a / self.b
            return self.a * 0.5 * (1 + math.erf(z / math.sqrt(2))) + self.b * math.exp(-(z**2) / 2) / math.sqrt(
                2 * math.pi
            )
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


#: The widest log-normal accepted. At sigma 3 the 99th percentile is already ~1,100x the median
#: (e^(3 x 2.33)) and the mean 90x it; measured cold-start phases are far narrower (the built-in
#: profiles use 0.3). Past it nothing is modelled better, and from sigma ~38 the mean overflows.
MAX_LOGNORMAL_SIGMA = 3.0
#: The longest a phase may be (one day): no parameter (a fixed value, a uniform bound, a log-normal
#: median, a normal mean or sd) and no mean may exceed it. A cold-start phase longer than a day is a
#: typo; larger parameters drove cold-start arithmetic to overflow, and a larger mean (median one day,
#: sigma 3: 90 days) made the profile's cold start longer than any trace, so every run was refused.
MAX_PHASE_SECONDS = 86_400.0


def _checked(dist: Distribution, where: str) -> Distribution:
    if dist.a < 0 or dist.b < 0 or not math.isfinite(dist.a) or not math.isfinite(dist.b):
        raise DistributionError(f"{where}: durations and spreads must be finite and >= 0")
    if dist.kind == "lognormal" and dist.b > MAX_LOGNORMAL_SIGMA:
        raise DistributionError(
            f"{where}: lognormal sigma {dist.b:g} is above {MAX_LOGNORMAL_SIGMA:g} (at sigma 3 the 99th "
            "percentile is ~1,100x the median already; measured cold-start phases are near 0.3)"
        )
    if max(dist.a, dist.b) > MAX_PHASE_SECONDS:
        raise DistributionError(
            f"{where}: {dist.describe()} is longer than a cold-start phase can be "
            f"(at most {MAX_PHASE_SECONDS:,.0f} s, one day)"
        )
    try:
        mean = dist.mean()
    except OverflowError:
        mean = math.inf
    if not math.isfinite(mean):
        raise DistributionError(f"{where}: {dist.describe()} has no finite mean")
    if mean > MAX_PHASE_SECONDS:
        raise DistributionError(
            f"{where}: {dist.describe()} has a mean of {mean:,.0f} s ({mean / 86_400:,.1f} days), longer than a "
            f"cold-start phase can be (at most {MAX_PHASE_SECONDS:,.0f} s, one day)"
        )
    return dist
