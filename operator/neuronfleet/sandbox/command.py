"""``neuronfleet sandbox up``: run the sandbox cluster on 127.0.0.1 until interrupted."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from pathlib import Path

from neuronfleet.sandbox.cluster import SandboxCluster
from neuronfleet.sandbox.nodes import parse_node_groups

DEFAULT_NODE_GROUPS = "inf2-small:inf2.xlarge:2:6@us-east-1a+us-east-1b,inf2-large:inf2.24xlarge:0:2@us-east-1a"


def register(subparsers: argparse._SubParsersAction) -> argparse._SubParsersAction:  # type: ignore[type-arg]
    """Add ``sandbox up`` to the ``neuronfleet`` CLI; return the ``sandbox`` sub-commands (add ``demo`` there)."""
    sandbox = subparsers.add_parser("sandbox", help="a local Kubernetes API with simulated Inf2 node groups")
    actions: argparse._SubParsersAction = sandbox.add_subparsers(dest="sandbox_command", required=True)  # type: ignore[type-arg]
    up = actions.add_parser("up", help="start the sandbox cluster and serve until interrupted")
    up.add_argument(
        "--node-groups",
        default=DEFAULT_NODE_GROUPS,
        help="NAME:TYPE[:COUNT[:MAX]][@ZONE+ZONE],... (default: %(default)s)",
    )
    up.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: a free one)")
    up.add_argument(
        "--kubeconfig", type=Path, default=Path(".sandbox/kubeconfig"), help="where to write the kubeconfig"
    )
    up.add_argument("--crd-dir", type=Path, default=Path("crds"), help="register every CRD in this directory")
    up.add_argument("--provisioning-delay", type=float, default=60.0, help="seconds until a launched node registers")
    up.add_argument("--seed", type=int, default=0)
    up.set_defaults(func=run_up)
    return actions


def run_up(args: argparse.Namespace) -> int:
    try:
        groups = parse_node_groups(args.node_groups)
    except ValueError as exc:
        print(f"neuronfleet sandbox up: {exc}", file=sys.stderr)
        return 2
    if not 0 <= args.port <= 65535:
        print(f"neuronfleet sandbox up: bad port {args.port}", file=sys.stderr)
        return 2
    crd_dir = args.crd_dir if args.crd_dir.is_dir() else None
    try:
        asyncio.run(_serve(groups, args, crd_dir))
    except OSError as exc:
        print(f"neuronfleet sandbox up: cannot serve: {exc}", file=sys.stderr)
        return 1
    return 0


async def _serve(groups: list, args: argparse.Namespace, crd_dir: Path | None) -> None:  # type: ignore[type-arg]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    cluster = SandboxCluster(
        node_groups=groups,
        crd_dir=crd_dir,
        port=args.port,
        kubeconfig_path=args.kubeconfig.resolve(),
        seed=args.seed,
        provisioning_delay_s=args.provisioning_delay,
        kopf_peering=True,
    )
    async with cluster:
        nodes = len(cluster.list("nodes"))
        print(f"sandbox API server: {cluster.url}  ({nodes} nodes, groups: {', '.join(g.name for g in groups)})")
        print(f"kubeconfig: {cluster.kubeconfig_path}")
        print(f"  export KUBECONFIG={cluster.kubeconfig_path}")
        print("  kubectl get nodes -L node.kubernetes.io/instance-type,topology.kubernetes.io/zone")
        print("Ctrl-C to stop.", flush=True)
        await stop.wait()
