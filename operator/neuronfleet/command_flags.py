"""Command-line flags that several commands share (``plan``, ``validate``, ``simulate``).

The pure planning layer takes the values (a :class:`~neuronfleet.planning.placement.Headroom`);
how a command spells them on its command line lives here, so that ``planning`` stays free of
argparse and every command that judges a fit asks for the allowance in the same words.
"""

from __future__ import annotations

import argparse

from neuronfleet.planning.placement import DAEMONSET_HEADROOM_CPU, DAEMONSET_HEADROOM_MEMORY


def add_headroom_flags(parser: argparse.ArgumentParser) -> None:
    """The operator's DaemonSet allowance (its flags of the same names), which the replicas' shares
    of a node and the fit of explicit requests depend on: every command that judges a fit or a
    placement (``plan``, ``validate``, ``simulate --policy``) takes them, in these words, so that it
    judges at the allowance the operator runs with (the chart's is configurable). Only adds the
    flags; :func:`headroom_from_quantities` reads them."""
    parser.add_argument(
        "--daemonset-headroom-cpu",
        default=DAEMONSET_HEADROOM_CPU,
        metavar="QUANTITY",
        help="the operator's --daemonset-headroom-cpu (chart: operator.daemonSetHeadroom.cpu): CPU left on "
        "every node for its DaemonSets, beside the replicas' shares and spec.runtime.cpu (default %(default)s)",
    )
    parser.add_argument(
        "--daemonset-headroom-memory",
        default=DAEMONSET_HEADROOM_MEMORY,
        metavar="QUANTITY",
        help="the operator's --daemonset-headroom-memory (chart: operator.daemonSetHeadroom.memory) "
        "(default %(default)s)",
    )
