"""The ``neuronserve`` command line: ``compile`` (trace and store a model) and ``serve`` (run it).

Heavy imports (torch, transformers, boto3, aiohttp) happen inside the subcommands so that
``neuronserve --help`` and argument errors are instant.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from neuronserve import __version__
from neuronserve.manifest import MANIFEST_PIN_ENV, REQUEST_KEY_PATTERN, SHA256_PATTERN

DEFAULT_PORT = 8080
# Kept here, not imported from neuronserve.emulated, so that --help stays instant (no numpy).
EMULATED_DEVICE = "emulated-neuroncore"
EMULATED_PROFILES = ["bert-base"]

T = TypeVar("T")

#: ``neuronserve --help``'s description: plain text (the module docstring's first line is reST).
DESCRIPTION = (
    "The model server of neuronfleet: compile traces a model per (batch, sequence) bucket and stores "
    "the artifact; serve serves an artifact over the KServe v2 REST protocol."
)

SERVE_DESCRIPTION = f"""\
Serve a compiled artifact over the KServe v2 REST protocol (/v2/...), with Prometheus metrics at
/metrics. Live at /v2/health/live as soon as it listens (until its device has failed for
--device-failure-restart-seconds); ready (200 on /v2/health/ready) once the model is loaded and
warmed, and while the device has not failed. SIGTERM: not ready at once, new requests still served for
--drain-delay-seconds (while the endpoints that route here are updated), then new ones refused
(503), what was accepted finished, exit 0: all within --grace-seconds.

Emulated device (--device {EMULATED_DEVICE}): no model runs and torch is not imported. The real
HTTP server, dynamic batching, bounded queue (429), metrics and drain run in front of emulated
NeuronCores: each batch takes the profile's measured Inf2 time for its batch bucket (bert-base:
bert-base-uncased seq 128 on inf2.xlarge, 2 NeuronCores, 1.00 / 2.95 / 5.97 / 10.9 ms at batch
1 / 4 / 8 / 16, about 2,940 inferences/s at saturation). Outputs are deterministic placeholder
rows of the right shape, NOT model outputs; /v2/health/ready, the model metadata, the responses,
neuronserve_device_info and the log all say "emulated". With --artifact, only the artifact's
manifest (and tokenizer.json) is read: the model name, buckets, signatures and real tokenizer
apply, and no weights are downloaded; an artifact without a tokenizer (a TorchScript source's)
takes no text input, as when its model is served. Without --artifact, the contract is built in: model
--model-name (default: the profile name), inputs input_ids / attention_mask INT64 [batch, seq],
output embedding FP32 [batch, 768], buckets 1/4/8/16 x 128, text input tokenized by length
(whitespace words + 2, truncated to 128).

Example: neuronserve serve --device {EMULATED_DEVICE} --profile bert-base --port 8081
"""


def _int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def _inputs(text: str) -> list[tuple[str, str]]:
    pairs = []
    for item in text.split(","):
        name, _, dtype = item.strip().partition(":")
        dtype = dtype or "int64"
        if not name or dtype not in ("int64", "int32"):
            raise argparse.ArgumentTypeError(f"expected name[:int64|int32],..., got {text!r}")
        pairs.append((name, dtype))
    return pairs


def _request_key(text: str) -> str:
    if not re.match(REQUEST_KEY_PATTERN, text):
        raise argparse.ArgumentTypeError(f"a request key is 1-128 of [A-Za-z0-9._-], got {text!r}")
    return text


def _sha256(text: str) -> str:
    """An argparse type: a sha256 as 64 hex digits (either case; kept lower-case)."""
    digest = text.strip().lower()
    if not re.match(SHA256_PATTERN, digest):
        raise argparse.ArgumentTypeError(f"expected a sha256 (64 hex digits), got {text!r}")
    return digest


def _non_negative_float(text: str) -> float:
    """An argparse type: a finite number of at least 0 (nan or inf would hang every request)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative number, got {text!r}")
    return value


def _positive_float(text: str) -> float:
    """An argparse type: a finite number above 0 (a time scale of 0 would make every batch free)."""
    value = _non_negative_float(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def _whole(low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse type: a whole number of at least ``low`` (and at most ``high``)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < low or (high is not None and value > high):
            bounds = f"{low}-{high}" if high is not None else f"at least {low}"
            raise argparse.ArgumentTypeError(f"expected {bounds}, got {value}")
        return value

    return parse


class _EnvText(str):
    """An option's default taken from an environment variable: its errors name the variable."""

    variable: str

    def __new__(cls, value: str, variable: str) -> _EnvText:
        text = super().__new__(cls, value)
        text.variable = variable
        return text


def _env_default(variable: str, fallback: str | None) -> str | None:
    """The default of an option backed by ``variable`` (unset or empty: ``fallback``).

    A string default goes through the option's ``type`` when the command line is parsed, and only
    if the option is not given there; so ``--help`` never reads it and the flag wins over the variable.
    """
    raw = os.environ.get(variable, "")
    return _EnvText(raw, variable) if raw else fallback


def _checked(parse: Callable[[str], T], choices: Sequence[T] | None = None) -> Callable[[str], T]:
    """An argparse type that also checks a value from the environment (argparse checks ``choices``
    only on the command line) and names the variable when that value is bad."""

    def check(text: str) -> T:
        if not isinstance(text, _EnvText):
            return parse(text)
        where = f"${text.variable}={str(text)!r}"
        try:
            value = parse(str(text))
        except (argparse.ArgumentTypeError, ValueError) as exc:
            raise argparse.ArgumentTypeError(f"{where}: {exc}") from None
        if choices is not None and value not in choices:
            raise argparse.ArgumentTypeError(f"{where}: expected one of {', '.join(map(str, choices))}")
        return value

    check.__name__ = getattr(parse, "__name__", "value")  # argparse's "invalid <name> value" names it
    return check


def _text(text: str) -> str:
    return text


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="neuronserve", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"neuronserve {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    c = sub.add_parser("compile", help="trace a model per (batch, sequence) bucket and store the artifact")
    c.add_argument(
        "--source", required=True, help="TorchScript file or Hugging Face directory (path, file:// or s3://)"
    )
    c.add_argument(
        "--format",
        dest="source_format",
        choices=["auto", "huggingface", "torchscript"],
        default="auto",
        help="source format (default: %(default)s, told from the files)",
    )
    c.add_argument("--store", required=True, help="artifact store root: s3://bucket/prefix or a directory")
    c.add_argument("--name", default="model", help="model name served under /v2/models/{name} (default: %(default)s)")
    # String defaults go through the type too: the help shows them as they are written.
    c.add_argument("--batch-buckets", type=_int_list, default="1,4,8,16", help="batch sizes (default: %(default)s)")
    c.add_argument("--sequence-buckets", type=_int_list, default="128", help="sequence lengths (default: %(default)s)")
    c.add_argument(
        "--inputs",
        type=_inputs,
        default="input_ids,attention_mask",
        help="TorchScript sources: forward() inputs as name[:int64|int32],... (default: %(default)s, int64; "
        "HF sources are fixed)",
    )
    c.add_argument(
        "--backend",
        choices=["auto", "neuron", "cpu"],
        default="auto",
        help="auto: Neuron when torch_neuronx is importable, else CPU TorchScript",
    )
    c.add_argument("--target", default="inf2", choices=["inf2"], help="neuronx-cc --target")
    c.add_argument(
        "--auto-cast",
        default="matmult",
        choices=["none", "matmult", "all"],
        help="neuronx-cc --auto-cast (default: %(default)s)",
    )
    c.add_argument(
        "--auto-cast-type",
        default="bf16",
        choices=["bf16", "fp16", "tf32", "fp8_e4m3"],
        help="neuronx-cc --auto-cast-type (default: %(default)s)",
    )
    c.add_argument(
        "--opt-level", "-O", type=int, default=2, choices=[1, 2, 3], help="neuronx-cc -O level (default: %(default)s)"
    )
    c.add_argument("--extra-arg", action="append", default=[], help="further neuronx-cc flag (repeatable)")
    c.add_argument(
        "--result-file",
        help="also write the result as JSON here (e.g. /dev/termination-log); if it cannot be written, "
        "exit 1 although the artifact is stored (the result is on stdout too)",
    )
    c.add_argument(
        "--request-key",
        type=_request_key,
        help="also record the result at <store>/requests/<key>.json (the operator's lookup)",
    )
    c.set_defaults(func=run_compile)

    s = sub.add_parser(
        "serve",
        help="serve a compiled artifact over the KServe v2 REST protocol",
        description=SERVE_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    # Defaults from NEURONSERVE_* variables are read and checked (type and choices, like the flag's
    # value) only when the command line is parsed: a bad one is a parser error naming the variable.
    s.add_argument(
        "--artifact",
        type=_checked(_text),
        default=_env_default("NEURONSERVE_ARTIFACT", None),
        help="artifact URI: s3://bucket/prefix/<key> or a directory (default $NEURONSERVE_ARTIFACT); "
        "required unless --device emulated-neuroncore",
    )
    s.add_argument(
        "--manifest-sha256",
        type=_checked(_sha256),
        default=_env_default(MANIFEST_PIN_ENV, None),
        help="serve the artifact only if its manifest.json has this sha256 (checked before anything "
        "else is read); another manifest at the URI (the artifact was replaced) exits 4 with both "
        f"digests, serving nothing. Default ${MANIFEST_PIN_ENV}; unset: whatever manifest is there. "
        f"The operator sets ${MANIFEST_PIN_ENV} to the one its status records (status.artifact.sha256)",
    )
    devices = ["artifact", EMULATED_DEVICE]
    s.add_argument(
        "--device",
        type=_checked(_text, devices),
        choices=devices,
        default=_env_default("NEURONSERVE_DEVICE", "artifact"),
        help="artifact (default): run the model on what it was compiled for (Neuron with torch-neuronx, "
        f"else CPU TorchScript); {EMULATED_DEVICE}: no model runs, every batch takes the Inf2 profile's "
        "measured time (see below). Default from $NEURONSERVE_DEVICE",
    )
    s.add_argument(
        "--profile",
        type=_checked(_text, EMULATED_PROFILES),
        choices=EMULATED_PROFILES,
        default=_env_default("NEURONSERVE_EMULATED_PROFILE", "bert-base"),
        help=f"with --device {EMULATED_DEVICE}: the Inf2 profile (default bert-base; $NEURONSERVE_EMULATED_PROFILE)",
    )
    s.add_argument(
        "--emulated-time-scale",
        type=_checked(_positive_float),
        default=_env_default("NEURONSERVE_EMULATED_TIME_SCALE", "1"),
        help="multiply every emulated service time (2 = half the profile's capacity; default 1, "
        "$NEURONSERVE_EMULATED_TIME_SCALE)",
    )
    s.add_argument(
        "--model-name",
        default=None,
        help="the name served under /v2/models/{name} (default: the artifact's; with --device "
        f"{EMULATED_DEVICE} and no artifact, the profile's). One artifact serves deployments of any name",
    )
    s.add_argument(
        "--host",
        default=None,
        help="listen on this address only (default: every interface, IPv4 and IPv6, so that the "
        "kubelet and Service reach it on the pod IP of any cluster family; IPv4 only where the kernel "
        "has no IPv6). 0.0.0.0: every IPv4 interface only; '::': every IPv6 interface only",
    )
    s.add_argument(
        "--port", type=_whole(0, 65535), default=DEFAULT_PORT, help="0 picks a free port, logged (default: %(default)s)"
    )
    s.add_argument(
        "--max-batch-delay-ms",
        type=_non_negative_float,
        default=5.0,
        help="longest wait for a batch to fill, in ms, counted from its first request's arrival (as "
        "Triton's max_queue_delay): a request that already waited this long behind busy cores runs with "
        "the next free core, with whatever is queued (default: %(default)s)",
    )
    s.add_argument(
        "--max-queue",
        type=_whole(1),
        default=256,
        help="queued requests beyond this get 429 (default: %(default)s)",
    )
    s.add_argument("--no-batching", action="store_true", help="run every request alone (baseline)")
    s.add_argument(
        "--grace-seconds",
        type=_non_negative_float,
        default=30.0,
        help="on SIGTERM, the time to shut down in all: the drain delay, then finishing queued and "
        "in-flight work (default: %(default)s)",
    )
    s.add_argument(
        "--drain-delay-seconds",
        type=_non_negative_float,
        default=5.0,
        help="on SIGTERM, report not ready at once but keep serving new requests this long, while the "
        "replica's endpoint removal reaches kube-proxy and load balancers; then refuse new ones (503). "
        "Taken out of --grace-seconds, at most a third of it; 0: refuse at once; a second signal ends "
        "it (default: %(default)s)",
    )
    s.add_argument(
        "--max-body-bytes",
        type=_whole(1),
        default=None,
        help="largest infer request body accepted, in bytes, as sent and once its Content-Encoding is "
        "decoded; a larger one gets 413 (default: the largest valid request of the largest bucket as JSON, "
        "at least 1 MiB)",
    )
    s.add_argument(
        "--max-uploads",
        type=_whole(1),
        default=64,
        help="infer requests received at once (from their headers until they are queued: body read, "
        "decoded, parsed, tokenized); more get 503 with Retry-After before their body is read. Bounds "
        "the memory uploads hold: each up to --max-body-bytes, twice that while a compressed body is "
        "decoded (default: %(default)s)",
    )
    s.add_argument(
        "--body-timeout-seconds",
        type=_positive_float,
        default=30.0,
        help="a request body not whole this long after its headers gets 408 and its connection is "
        "closed (a stalled or trickling upload; default: %(default)s)",
    )
    s.add_argument(
        "--device-failure-requests",
        type=_whole(1),
        default=5,
        help="after this many requests in a row failed alone (the model raised on each, no success "
        "between), run the warm-up input at the last failing request's shape (its bucket) to tell a failed "
        "device from bad inputs; if it fails too, the "
        "device has failed: not ready, failures count as outcome=error, the check repeats every 5 s, and "
        "this many successes in a row (requests or checks; an isolated success does not) make it ready "
        "again and stop the --device-failure-restart-seconds clock (default: %(default)s)",
    )
    s.add_argument(
        "--device-failure-restart-seconds",
        type=_positive_float,
        default=60.0,
        help="report not live (/v2/health/live 503, so the kubelet restarts the process) once the device "
        "has been failed this long, isolated successes included (default: %(default)s)",
    )
    s.add_argument(
        "--retry-after-seconds",
        type=_whole(0),
        default=1,
        help="the Retry-After of a 429 (queue full) or 503 (loading, draining, --max-uploads) answer, in seconds "
        "(default: %(default)s)",
    )
    s.add_argument(
        "--torch-threads",
        type=_checked(_whole(1)),
        default=_env_default("NEURONSERVE_TORCH_THREADS", None),
        help="intra-op threads (default: $NEURONSERVE_TORCH_THREADS or all CPUs)",
    )
    s.add_argument("--cache-dir", default=None, help="where S3 artifacts are downloaded (default: temp dir)")
    s.set_defaults(func=run_serve)
    return parser


def run_compile(args: argparse.Namespace) -> int:
    """Compile (or find cached) and store; print the result as JSON on stdout.

    Exit 0 on success, 1 when the compile or the store fails. A ``--result-file`` that cannot be
    written is also exit 1, with one line saying that the artifact is stored (its URI) and the
    result is on stdout: the caller asked for that file and would otherwise read a missing one.
    """
    from rich.console import Console
    from rich.markup import escape

    from neuronserve.compile import CompileError, CompileOptions, compile_model, configure_quiet_logging
    from neuronserve.manifest import CompilerFlags, RequestRecord, request_record_path, revision
    from neuronserve.store import Store, StoreError

    console = Console(stderr=True, soft_wrap=True)
    configure_quiet_logging()
    try:
        flags = CompilerFlags.from_command_line(args)
        result = compile_model(
            CompileOptions(
                source=args.source,
                store=args.store,
                name=args.name,
                batch_buckets=args.batch_buckets,
                sequence_buckets=args.sequence_buckets,
                flags=flags,
                source_format=args.source_format,
                backend=args.backend,
                inputs=args.inputs,
            ),
            console,
        )
        if args.request_key:
            record = RequestRecord(
                cache_key=result.cache_key,
                artifact_uri=result.uri,
                manifest_sha256=result.manifest_sha256,
                backend=result.backend,
                revision=revision(result.cache_key),
            )
            Store(args.store).put_bytes(request_record_path(args.request_key), record.to_json_bytes())
    except (CompileError, StoreError) as exc:
        console.print(f"[red]compile failed[/]: {escape(str(exc))}")
        return 1
    doc = result.to_json()
    print(json.dumps(doc), flush=True)
    if args.result_file:
        try:
            Path(args.result_file).write_text(json.dumps(doc) + "\n")
        except OSError as exc:
            console.print(
                f"[red]cannot write the result file[/] {escape(args.result_file)}: {escape(exc.strerror or str(exc))}"
                f" (the compile succeeded: the artifact is stored at {escape(result.uri)}; the result is on stdout)"
            )
            return 1
    return 0


def run_serve(args: argparse.Namespace) -> int:
    import uvloop

    from neuronserve.server import EmulatedOptions, ServeConfig, ServeOptions, serve

    # --max-queue, --torch-threads and their environment defaults are checked by the parser.
    if args.manifest_sha256 is not None and args.artifact is None:
        print("neuronserve: --manifest-sha256 pins an artifact's manifest: it needs --artifact", file=sys.stderr)
        return 2
    threads = args.torch_threads or os.cpu_count() or 1
    emulated = None
    if args.device == EMULATED_DEVICE:
        emulated = EmulatedOptions(args.profile, args.emulated_time_scale, args.model_name)
    else:
        if args.artifact is None:
            print(f"neuronserve: --artifact is required (unless --device {EMULATED_DEVICE})", file=sys.stderr)
            return 2
        # torch only when a model really runs: the emulated device stays light (a fleet shares a machine).
        import torch

        torch.set_num_threads(threads)
        # The model thread needs the GIL back for a moment between batches; while the event loop
        # holds it, the default 5 ms switch interval would leave the device idle that long.
        sys.setswitchinterval(0.001)
    opts = ServeOptions(
        artifact=args.artifact,
        host=args.host,
        port=args.port,
        grace_seconds=args.grace_seconds,
        drain_delay_seconds=args.drain_delay_seconds,
        config=ServeConfig(
            max_batch_delay_ms=args.max_batch_delay_ms,
            max_queue=args.max_queue,
            batching=not args.no_batching,
            max_body_bytes=args.max_body_bytes,
            retry_after_seconds=args.retry_after_seconds,
            max_uploads=args.max_uploads,
            body_timeout_seconds=args.body_timeout_seconds,
            device_suspect_after=args.device_failure_requests,
            device_restart_seconds=args.device_failure_restart_seconds,
        ),
        torch_threads=threads,
        cache_dir=args.cache_dir,
        emulated=emulated,
        model_name=args.model_name,
        manifest_sha256=args.manifest_sha256,
    )
    # uvloop: the event loop uvicorn and most Python model servers run; about a tenth less CPU per
    # request than asyncio's own loop here, CPU a replica's batches need.
    code: int = uvloop.run(serve(opts))
    from neuronserve.batcher import batch_executing
    from neuronserve.server import loader_abandoned

    if batch_executing() or loader_abandoned():
        # A batch still runs past the grace period (its requests were answered 503), or the load
        # the stop interrupted: exit now, not when it ends (Python joins the executor's thread),
        # before the kubelet's SIGKILL, and without finalizing Python around a thread inside
        # TorchScript (which aborts the process: exit 134).
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def _join_extra_args(argv: list[str]) -> list[str]:
    """``--extra-arg --flag`` -> ``--extra-arg=--flag``: compiler flags start with dashes, which
    argparse would otherwise take for options of its own (the operator's Jobs pass the joined form;
    the separate one, typed by hand or passed by an older operator, is joined here)."""
    joined: list[str] = []
    args = iter(argv)
    for arg in args:
        if arg == "--extra-arg":
            value = next(args, None)
            joined.append(arg if value is None else f"--extra-arg={value}")
        else:
            joined.append(arg)
    return joined


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s", stream=sys.stderr)
    logging.getLogger("botocore").setLevel(logging.WARNING)
    args = build_parser().parse_args(_join_extra_args(sys.argv[1:] if argv is None else argv))
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
