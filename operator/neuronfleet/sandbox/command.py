"""``neuronfleet sandbox up``: run the sandbox cluster on 127.0.0.1 until interrupted.

Beside the API server it runs an S3 endpoint (moto) stocked with the examples' model sources,
creates the examples' namespaces, runs compile Jobs for real, runs serving pods as real
``neuronserve serve`` processes (the emulated NeuronCore device by default) with a router per
Service, starts Prometheus scraping them when its binary is installed, and writes
``sandbox.env`` next to the kubeconfig: the S3 endpoint, credentials, artifact store and
Prometheus URL the operator needs. ``neuronfleet run`` reads that file when its kubeconfig sits
beside it (or ``source`` it).
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path

from neuronfleet.api.crd import crd as inference_deployment_crd
from neuronfleet.sandbox.cluster import SandboxCluster
from neuronfleet.sandbox.dirlock import SandboxBusy
from neuronfleet.sandbox.kubelet import ColdStartProfile
from neuronfleet.sandbox.nodes import parse_node_groups
from neuronfleet.sandbox.prometheus import PrometheusUnavailable, find_binary
from neuronfleet.sandbox.s3 import DEFAULT_ARTIFACT_STORE
from neuronfleet.sandbox.serving import ServingOptions
from neuronfleet.sandbox.signals import StopOnSignals, say_quietly

#: ``inf2-serving`` is the Karpenter NodePool ``examples/bert-embeddings.yaml`` selects.
DEFAULT_NODE_GROUPS = "inf2-serving:inf2.xlarge:2:6@us-east-1a+us-east-1b,inf2-large:inf2.24xlarge:0:2@us-east-1a"
NEURON_SCHEDULER = "neuron-scheduler"
#: The file beside the kubeconfig that tells the operator where the sandbox's S3 is.
ENV_FILE_NAME = "sandbox.env"
#: Pod start-up in ``sandbox up``: seconds, not EKS's minutes, so an example is Ready soon after
#: its compile (the cold-start figures the simulator uses are in FACTS.md, not here).
UP_COLD_START = ColdStartProfile(image_pull_s=6.0, container_start_s=1.0, readiness_s=6.0, shutdown_s=2.0, jitter=0.2)
#: How serving pods run: ``--serving`` choices.
SERVING_MODES = {
    "emulated-device": ServingOptions(),
    "cpu": ServingOptions(device_args=(), extra_args=("--torch-threads", "1")),
}


def register(subparsers: argparse._SubParsersAction) -> argparse._SubParsersAction:  # type: ignore[type-arg]
    """Add ``sandbox up`` to the ``neuronfleet`` CLI; return the ``sandbox`` sub-commands (add ``demo`` there)."""
    sandbox = subparsers.add_parser("sandbox", help="a local Kubernetes API with simulated Inf2 node groups")
    actions: argparse._SubParsersAction = sandbox.add_subparsers(dest="sandbox_command", required=True)  # type: ignore[type-arg]
    up = actions.add_parser(
        "up",
        help="start the sandbox cluster (and its S3) and serve until interrupted",
        description="Start a local Kubernetes API with simulated Inf2 node groups, an S3 endpoint (moto) "
        "holding the examples' model sources, and real compile Jobs. Writes the kubeconfig and, beside it, "
        f"{ENV_FILE_NAME} (S3 endpoint, credentials, artifact store) which `neuronfleet run` reads.",
    )
    up.add_argument(
        "--node-groups",
        default=DEFAULT_NODE_GROUPS,
        help="NAME:TYPE[:COUNT[:MAX]][@ZONE+ZONE],...: COUNT nodes from the start, kept even when empty (a "
        "floor, as a managed node group's); the provisioner launches more up to MAX for pods that do not fit and "
        "removes those it launched once empty for 30 s (default: %(default)s)",
    )
    up.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: a free one)")
    up.add_argument(
        "--kubeconfig",
        type=Path,
        default=Path(".sandbox/kubeconfig"),
        help="where to write the kubeconfig (default: %(default)s)",
    )
    up.add_argument(
        "--crd-dir",
        type=Path,
        default=None,
        help="register every CRD in this directory instead of the InferenceDeployment CRD of the installed "
        "package (the default, wherever this runs)",
    )
    up.add_argument(
        "--examples-dir",
        type=Path,
        default=Path("examples"),
        help="create these manifests' namespaces and upload the model sources they name, when installed here "
        "(default: %(default)s; a directory that does not exist is skipped, and said so)",
    )
    up.add_argument("--no-s3", action="store_true", help="no S3 endpoint (s3:// sources and stores stay unreadable)")
    up.add_argument(
        "--compile-jobs",
        choices=["real", "simulated"],
        default="real",
        help="real (default): compile Jobs run `neuronserve compile` on this machine; simulated: after a minute "
        "they publish a stand-in artifact (its manifest says it is simulated; empty model files: served on the "
        "emulated device, not with --serving cpu) and its request record, and succeed",
    )
    up.add_argument(
        "--serving",
        choices=[*SERVING_MODES, "simulated"],
        default="emulated-device",
        help="serving pods run `neuronserve serve` on this machine, on the emulated NeuronCore device (Inf2 "
        "service times, no model compute: a fleet fits on a laptop) or the CPU (the compiled model, heavy); "
        "simulated: no process, simulated readiness (default: %(default)s)",
    )
    up.add_argument(
        "--prometheus",
        choices=["auto", "on", "off"],
        default="auto",
        help="a real Prometheus (Debian's binary) scraping the served pods; auto (default): when installed",
    )
    up.add_argument(
        "--provisioning-delay",
        type=float,
        default=60.0,
        help="seconds until a launched node registers (default: %(default)g)",
    )
    up.add_argument("--seed", type=int, default=0, help="seed of the sandbox's random draws (default: 0)")
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
    if args.compile_jobs == "simulated" and args.serving == "cpu":
        # A CPU server loads the model files, which a simulated compile writes empty.
        print(
            "neuronfleet sandbox up: --compile-jobs simulated writes no model files for --serving cpu to load: "
            "use --serving emulated-device or simulated, or --compile-jobs real",
            file=sys.stderr,
        )
        return 2
    crd_dir: Path | None = args.crd_dir
    if crd_dir is not None and not crd_dir.is_dir():
        print(f"neuronfleet sandbox up: --crd-dir {crd_dir} is not a directory", file=sys.stderr)
        return 2
    if args.prometheus == "on":
        # Said before anything starts, in one line (the cluster would raise it from deep inside).
        try:
            find_binary()
        except PrometheusUnavailable as exc:
            print(f"neuronfleet sandbox up: --prometheus on: {exc} (or pass --prometheus off)", file=sys.stderr)
            return 1
    try:
        asyncio.run(_serve(groups, args, crd_dir))
    except SandboxBusy as exc:
        print(f"neuronfleet sandbox up: {exc}: stop it, or pass --kubeconfig elsewhere", file=sys.stderr)
        return 1
    except PrometheusUnavailable as exc:
        # It exited at start-up (its log follows); what it had started is stopped already.
        print(f"neuronfleet sandbox up: Prometheus did not start: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        hint = ""
        if exc.errno == errno.EADDRINUSE and args.port:
            hint = f": port {args.port} is taken; omit --port for a free one"
        print(f"neuronfleet sandbox up: cannot serve: {exc}{hint}", file=sys.stderr)
        return 1
    return 0


def write_env_file(path: Path, env: Mapping[str, str]) -> Path:
    """``export NAME=value`` lines: ``source`` it in a shell, or let ``neuronfleet run`` read it."""
    lines = [
        "# Written by `neuronfleet sandbox up`; removed when it stops. `source` it, or let",
        "# `neuronfleet run` read it (it does when its kubeconfig is in this directory).",
    ]
    lines += [f"export {name}={shlex.quote(value)}" for name, value in env.items()]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


async def _serve(groups: list, args: argparse.Namespace, crd_dir: Path | None) -> None:  # type: ignore[type-arg]
    stop = asyncio.Event()
    # Ctrl-C, kill or a closed terminal: a clean stop; a second signal exits at once.
    StopOnSignals(lambda _signal: stop.set(), "the sandbox").install()
    kubeconfig = args.kubeconfig.resolve()
    serving = SERVING_MODES.get(args.serving)
    prometheus = serving is not None and args.prometheus != "off"
    if prometheus and args.prometheus == "auto":
        try:
            find_binary()
        except PrometheusUnavailable as exc:
            print(f"no Prometheus: {exc}", file=sys.stderr)
            prometheus = False
    cluster = SandboxCluster(
        node_groups=groups,
        crd_dir=crd_dir,
        # One source of truth: the CRD generated from the typed API this package carries.
        crds=[] if crd_dir is not None else [inference_deployment_crd()],
        priority_classes=True,
        port=args.port,
        kubeconfig_path=kubeconfig,
        seed=args.seed,
        provisioning_delay_s=args.provisioning_delay,
        kopf_peering=True,
        neuron_scheduler_name=NEURON_SCHEDULER,
        cold_start=UP_COLD_START,
        s3=not args.no_s3,
        compile_jobs=args.compile_jobs,
        serving=serving,
        prometheus=prometheus,
        workdir=kubeconfig.parent / "sandbox-work",
    )
    env_file = kubeconfig.parent / ENV_FILE_NAME
    # The stop's steps may be printed to a terminal already closed (EIO): they must not cut it short.
    cluster.announce_stop = lambda step: say_quietly(f"  {step}", sys.stderr)
    async with cluster:
        stocked = await cluster.host_examples(args.examples_dir)
        env = {"KUBECONFIG": str(cluster.kubeconfig_path), "NEURONFLEET_NEURON_SCHEDULER": NEURON_SCHEDULER}
        if cluster.s3 is not None:
            env.update(cluster.s3.env)
            env["NEURONFLEET_ARTIFACT_STORE"] = DEFAULT_ARTIFACT_STORE
        if cluster.prometheus is not None:
            env["NEURONFLEET_PROMETHEUS_URL"] = cluster.prometheus.url
        write_env_file(env_file, env)
        nodes = len(cluster.list("nodes"))
        print(f"sandbox API server: {cluster.url}  ({nodes} nodes, groups: {', '.join(g.name for g in groups)})")
        print(f"kubeconfig: {cluster.kubeconfig_path}")
        if cluster.s3 is not None:
            print(f"S3 (moto): {cluster.s3.endpoint_url}  artifact store: {DEFAULT_ARTIFACT_STORE}")
        if not args.examples_dir.is_dir():
            print(f"examples: {args.examples_dir} is not a directory here: no example namespaces or sources")
        for source in stocked:
            mark = "stocked" if source.stocked else "NOT servable here"
            print(f"  {source.example}: {source.source} {mark} ({source.note})")
        print(f"compile Jobs: {args.compile_jobs}; serving pods: {args.serving}")
        if cluster.prometheus is not None:
            print(
                f"Prometheus: {cluster.prometheus.url} (targets: the served pods, labelled as the chart's PodMonitor)"
            )
        if cluster.routers is not None:
            print("each Service gets a router on 127.0.0.1 to its ready endpoints (least outstanding requests)")
        print(f"operator settings: {env_file}  (`neuronfleet run` reads it when KUBECONFIG points here)")
        print(f"  export KUBECONFIG={cluster.kubeconfig_path}")
        print("  neuronfleet run")
        print("  kubectl apply -f examples/bert-embeddings.yaml && kubectl get infdep -A -w")
        if cluster.routers is not None:
            cluster.routers.announce = lambda ns, svc, url: print(f"service {ns}/{svc}: router {url}", flush=True)
        print("Ctrl-C to stop.", flush=True)
        try:
            await stop.wait()
        finally:
            env_file.unlink(missing_ok=True)
    say_quietly("sandbox stopped.", sys.stderr)
