"""``neuronserve compile``: trace a PyTorch model per (batch, sequence) bucket and store the artifact.

With torch-neuronx importable the buckets are compiled for Neuron (``torch_neuronx.trace`` with the
neuronx-cc flags); otherwise they are traced to CPU TorchScript and the artifact says
``backend: cpu``. The artifact is looked up by its cache key first: an unchanged model, compiler,
compile code (neuronserve, transformers), flag and bucket set is never traced twice.

Sources: a TorchScript file (its forward takes the declared inputs; in S3, the URI of the object
itself or of a prefix holding one) or a Hugging Face-style directory of a BERT-class encoder. For
the latter the served output is the sentence embedding as sentence-transformers computes it:
token embeddings mean-pooled over the attention mask (CLS when the directory's pooling config asks
for it), then L2-normalized when the directory lists a Normalize module, as all-MiniLM-L6-v2 does.
Shape [batch, hidden], float32.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import importlib
import importlib.metadata
import json
import logging
import shutil
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from neuronserve.manifest import (
    MANIFEST_NAME,
    TOKENIZER_NAME,
    Backend,
    Bucket,
    CompilerFlags,
    FileEntry,
    Manifest,
    TensorSignature,
    cache_key,
    manifest_sha256,
    revision,
    source_digest,
)
from neuronserve.store import Store, download_tree, file_sha256, is_s3, local_path

SourceFormat = Literal["auto", "huggingface", "torchscript"]
# Largest absolute difference between eager and traced outputs accepted by the post-trace check.
TRACE_CHECK_TOLERANCE = 1e-3


class CompileError(Exception):
    """The model could not be loaded, traced or stored; the message says why."""


@dataclass(frozen=True)
class CompileOptions:
    source: str
    store: str
    name: str
    batch_buckets: Sequence[int]
    sequence_buckets: Sequence[int]
    flags: CompilerFlags
    source_format: SourceFormat = "auto"
    backend: Literal["auto", "neuron", "cpu"] = "auto"
    inputs: Sequence[tuple[str, str]] = (("input_ids", "int64"), ("attention_mask", "int64"))


@dataclass(frozen=True)
class CompileResult:
    uri: str
    cache_key: str
    manifest_sha256: str
    backend: Backend
    cached: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "uri": self.uri,
            "cacheKey": self.cache_key,
            "revision": revision(self.cache_key),
            "sha256": self.manifest_sha256,
            "backend": self.backend,
            "cached": self.cached,
        }


@dataclass
class LoadedSource:
    module: torch.nn.Module
    inputs: list[TensorSignature]
    output_name: str
    output_description: str
    tokenizer: Path | None


class SentenceEmbedder(torch.nn.Module):
    """A Hugging Face encoder plus sentence-transformers pooling, as one traceable module."""

    def __init__(self, encoder: torch.nn.Module, pooling: str, normalize: bool) -> None:
        super().__init__()
        self.encoder = encoder
        self.pooling = pooling
        self.normalize = normalize

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        if self.pooling == "cls":
            pooled = hidden[:, 0]
        else:
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            # clamp: a padding row (all-zero mask) pools to zeros instead of NaN
            pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
        if self.normalize:
            pooled = torch.nn.functional.normalize(pooled, p=2.0, dim=1)
        result: torch.Tensor = pooled
        return result


class FirstTensor(torch.nn.Module):
    """Wraps a TorchScript module whose forward returns a tuple: serve its first tensor."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        out = self.inner(*args)
        first: torch.Tensor = out[0] if isinstance(out, tuple | list) else out
        return first


# ------------------------------------------------------------------------------------------ sources


def _hf_pooling(directory: Path) -> tuple[str, bool]:
    pooling, normalize = "mean", False
    modules = directory / "modules.json"
    if modules.is_file():
        entries = json.loads(modules.read_text())
        normalize = any(str(e.get("type", "")).endswith(".Normalize") for e in entries)
        for e in entries:
            if str(e.get("type", "")).endswith(".Pooling"):
                cfg = directory / str(e.get("path", "")) / "config.json"
                if cfg.is_file() and json.loads(cfg.read_text()).get("pooling_mode_cls_token"):
                    pooling = "cls"
    return pooling, normalize


def _load_huggingface(directory: Path) -> LoadedSource:
    try:
        transformers = importlib.import_module("transformers")
    except ImportError as exc:
        raise CompileError("a Hugging Face source needs the transformers package") from exc
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    try:
        # eager attention: its masking is plain tensor arithmetic, which traces to a graph that is
        # valid for every mask (SDPA paths may branch on the mask's values at trace time).
        encoder = transformers.AutoModel.from_pretrained(
            str(directory), attn_implementation="eager", local_files_only=True
        )
    except (OSError, ValueError) as exc:
        raise CompileError(f"cannot load a Hugging Face model from {directory}: {exc}") from exc
    config = encoder.config
    pooling, normalize = _hf_pooling(directory)
    module = SentenceEmbedder(encoder, pooling, normalize).eval()
    inputs = [
        TensorSignature(
            name="input_ids", dtype="int64", shape=[-1, -1], min_value=0, max_value=int(config.vocab_size) - 1
        ),
        TensorSignature(name="attention_mask", dtype="int64", shape=[-1, -1], min_value=0, max_value=1),
    ]
    description = (
        f"sentence embedding: token embeddings {pooling}-pooled over attention_mask"
        + (", L2-normalized" if normalize else "")
        + f"; shape [batch, {int(config.hidden_size)}], float32"
    )
    tokenizer = directory / TOKENIZER_NAME
    return LoadedSource(module, inputs, "embedding", description, tokenizer if tokenizer.is_file() else None)


def _load_torchscript(path: Path, inputs: Sequence[tuple[str, str]]) -> LoadedSource:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            scripted = torch.jit.load(str(path), map_location="cpu")  # type: ignore[no-untyped-call]
    except (RuntimeError, ValueError, OSError) as exc:
        raise CompileError(f"cannot load TorchScript from {path}: {exc}") from exc
    signature = [TensorSignature(name=n, dtype=d, shape=[-1, -1]) for n, d in inputs]
    return LoadedSource(FirstTensor(scripted).eval(), signature, "output", "the module's first output", None)


def _source_files(path: Path) -> Iterator[Path]:
    if path.is_file():
        yield path
        return
    for p in sorted(path.rglob("*")):
        if p.is_file() and ".git" not in p.relative_to(path).parts:
            yield p


def digest_of(path: Path) -> str:
    """Content digest of a model source (a file or every file of a directory)."""
    if path.is_file():
        return source_digest({path.name: file_sha256(path)})
    return source_digest({p.relative_to(path).as_posix(): file_sha256(p) for p in _source_files(path)})


# ------------------------------------------------------------------------------------------ backends


def neuron_available() -> bool:
    try:
        importlib.import_module("torch_neuronx")
    except ImportError:
        return False
    return True


#: The version of what this module puts in an artifact (the wrappers, pooling, example inputs,
#: trace calls). Bump it with any change that changes a traced module: it is in the cache key, so
#: artifacts of the code it fixes are compiled again instead of served from the cache. A test pins
#: this file's digest to it, so no change goes in without that decision (a comment's edit only
#: updates the pinned digest; recompiling every model in every cluster costs hours for an LLM).
COMPILE_CODE_VERSION = 1


def _code_identity() -> str:
    """``neuronserve==<version>/compile-<COMPILE_CODE_VERSION>``: the code that builds and traces the model.

    The package version alone is not enough: a fixed compile image often keeps it.
    """
    import neuronserve

    return f"neuronserve=={neuronserve.__version__}/compile-{COMPILE_CODE_VERSION}"


def _dist_version(dist: str) -> str:
    try:
        return f"{dist}=={importlib.metadata.version(dist)}"
    except importlib.metadata.PackageNotFoundError:
        return f"{dist}==unknown"


def compiler_identity(backend: Backend, source_format: Literal["huggingface", "torchscript"] = "torchscript") -> str:
    """Everything besides the source, flags and buckets that decides the compiled artifact.

    The compiler (neuronx-cc and torch-neuronx, or torch's TorchScript tracer), neuronserve's own
    compile code and, for a Hugging Face source, transformers (which builds the traced model).
    Part of the cache key, and the manifest's ``compiler``.
    """
    if backend == "neuron":
        parts = [_dist_version("neuronx-cc"), _dist_version("torch-neuronx")]
    else:
        parts = [f"torch.jit=={torch.__version__}"]
    parts.append(_code_identity())
    if source_format == "huggingface":
        parts.append(_dist_version("transformers"))
    return ",".join(parts)


def _example(bucket: Bucket, inputs: Sequence[TensorSignature], seed: int) -> tuple[torch.Tensor, ...]:
    """Example inputs for one bucket. Masks vary per row so no 'all ones' shortcut gets traced in."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, bucket.sequence + 1, (bucket.batch,), generator=gen)
    lengths[0] = bucket.sequence
    valid = torch.arange(bucket.sequence).unsqueeze(0) < lengths.unsqueeze(1)
    tensors = []
    for sig in inputs:
        dtype = getattr(torch, sig.dtype)
        if sig.name == "attention_mask":
            tensors.append(valid.to(dtype))
        elif sig.max_value is not None:
            low = max(sig.min_value or 0, 1000 if sig.max_value > 2000 else 0)
            values = torch.randint(low, sig.max_value + 1, (bucket.batch, bucket.sequence), generator=gen)
            tensors.append((values * valid).to(dtype))
        else:
            tensors.append(torch.ones(bucket.batch, bucket.sequence, dtype=dtype))
    return tuple(tensors)


def _trace(module: torch.nn.Module, example: tuple[torch.Tensor, ...], backend: Backend, flags: CompilerFlags) -> Any:
    with warnings.catch_warnings():
        # The tracer warns about Python-side shape arithmetic in transformers; the post-trace check
        # below is what actually guards correctness.
        warnings.simplefilter("ignore")
        if backend == "neuron":
            torch_neuronx = importlib.import_module("torch_neuronx")
            return torch_neuronx.trace(module, example, compiler_args=flags.neuronx_cc_args())
        with torch.no_grad():
            return torch.jit.trace(module, example, check_trace=False)  # type: ignore[no-untyped-call]


def _check_trace(module: torch.nn.Module, traced: Any, bucket: Bucket, inputs: Sequence[TensorSignature]) -> None:
    example = _example(bucket, inputs, seed=bucket.batch * 7919 + bucket.sequence)
    with torch.no_grad():
        expected = module(*example)
        actual = traced(*example)
    diff = float((expected - actual).abs().max())
    if not diff <= TRACE_CHECK_TOLERANCE:
        raise CompileError(
            f"traced bucket (batch {bucket.batch}, sequence {bucket.sequence}) disagrees with the eager "
            f"model on fresh inputs (max abs diff {diff:.3g}): the model has value-dependent control flow"
        )


# ------------------------------------------------------------------------------------------ compile


@contextlib.contextmanager
def _local_source(source: str) -> Iterator[Path]:
    if is_s3(source):
        with tempfile.TemporaryDirectory(prefix="neuronserve-src-") as tmp:
            yield download_tree(source, Path(tmp))
    else:
        path = local_path(source)
        if not path.exists():
            raise CompileError(f"model source {source} does not exist")
        yield path


TORCHSCRIPT_SUFFIXES = (".pt", ".pth", ".ts")


def _torchscript_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.is_file() and p.suffix in TORCHSCRIPT_SUFFIXES)


def _torchscript_file(directory: Path) -> Path:
    """The one TorchScript file of a directory source: with none or several, which to compile is a
    guess (the first listed was taken), so the source is refused and the message says what is there."""
    files = _torchscript_files(directory)
    if len(files) == 1:
        return files[0]
    if not files:
        raise CompileError(
            f"model source {directory} holds no TorchScript file ({', '.join(TORCHSCRIPT_SUFFIXES)}) to compile "
            "as --format torchscript"
        )
    names = ", ".join(p.name for p in files)
    raise CompileError(
        f"model source {directory} holds {len(files)} TorchScript files ({names}): name the one to compile "
        "as the source, or keep one in the directory"
    )


def _resolve_format(path: Path, fmt: SourceFormat) -> Literal["huggingface", "torchscript"]:
    if fmt != "auto":
        return fmt
    if path.is_file():
        return "torchscript"
    if (path / "config.json").is_file():
        return "huggingface"
    if len(_torchscript_files(path)) == 1:
        return "torchscript"
    raise CompileError(f"cannot tell the format of {path}: no config.json and not one TorchScript file")


def compile_model(opts: CompileOptions, console: Console) -> CompileResult:
    """Trace and store the model unless the store already holds an artifact under its cache key."""
    if opts.backend == "neuron" and not neuron_available():
        raise CompileError("--backend neuron was asked for but torch_neuronx cannot be imported")
    backend: Backend = "neuron" if opts.backend != "cpu" and neuron_available() else "cpu"
    buckets = sorted(
        {Bucket(batch=b, sequence=s) for b in opts.batch_buckets for s in opts.sequence_buckets},
        key=lambda b: (b.batch, b.sequence),
    )
    store = Store(opts.store)

    with _local_source(opts.source) as path:
        fmt = _resolve_format(path, opts.source_format)
        if fmt == "torchscript" and path.is_dir():
            path = _torchscript_file(path)
        compiler = compiler_identity(backend, fmt)
        digest = digest_of(path)
        signature_hint = [TensorSignature(name=n, dtype=d, shape=[-1, -1]) for n, d in opts.inputs]
        if fmt == "huggingface":
            signature_hint = [
                TensorSignature(name="input_ids", dtype="int64", shape=[-1, -1]),
                TensorSignature(name="attention_mask", dtype="int64", shape=[-1, -1]),
            ]
        key = cache_key(digest, compiler, opts.flags, buckets, signature_hint)
        if store.has_artifact(key):
            uri = f"{opts.store.rstrip('/')}/{key}"
            console.print(
                f"[green]cache hit[/]: {escape(uri)} already holds this model (key {key[:12]}); nothing traced"
            )
            sha = _stored_manifest_sha(store, key)
            return CompileResult(uri, key, sha, backend, cached=True)
        # Before the trace (minutes to hours): a store that cannot take the artifact fails now.
        store.check_writable(key)

        if backend == "cpu":
            console.print(
                "[yellow]torch_neuronx is not importable: tracing to CPU TorchScript (backend: cpu). "
                "This is NOT a Neuron compile; the artifact runs on CPU only.[/]"
            )
        else:
            console.print(f"compiling for Neuron with neuronx-cc {escape(' '.join(opts.flags.neuronx_cc_args()))}")
        loaded = _load_huggingface(path) if fmt == "huggingface" else _load_torchscript(path, opts.inputs)

        with tempfile.TemporaryDirectory(prefix="neuronserve-art-") as tmp:
            out = Path(tmp)
            output_width = _trace_buckets(loaded, buckets, backend, opts.flags, out, console)
            if loaded.tokenizer is not None:
                shutil.copyfile(loaded.tokenizer, out / TOKENIZER_NAME)
            files = sorted(p.name for p in out.iterdir())
            manifest = Manifest(
                name=opts.name,
                backend=backend,
                buckets=buckets,
                inputs=loaded.inputs,
                outputs=[TensorSignature(name=loaded.output_name, dtype="float32", shape=[-1, output_width])],
                output_description=loaded.output_description,
                compiler=compiler,
                torch_version=torch.__version__,
                flags=opts.flags,
                source_digest=digest,
                source=opts.source,
                cache_key=key,
                files=[FileEntry(path=n, sha256=file_sha256(out / n), size=(out / n).stat().st_size) for n in files],
                created_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            )
            data = manifest.to_json_bytes()
            (out / "manifest.json").write_bytes(data)
            published = store.publish(out, manifest)
    if not published.stored:
        console.print(
            f"[green]cache hit[/]: another compile stored this model at {escape(published.uri)} first "
            f"(key {key[:12]}); it is kept and this trace discarded"
        )
        return CompileResult(published.uri, key, manifest_sha256(published.manifest_bytes), backend, cached=True)
    console.print(f"stored {len(buckets)} bucket(s) ({backend}) at {escape(published.uri)}")
    # The stored manifest, not the local one: in S3 it also names the folder its files went to.
    return CompileResult(published.uri, key, manifest_sha256(published.manifest_bytes), backend, cached=False)


def _trace_buckets(
    loaded: LoadedSource,
    buckets: Sequence[Bucket],
    backend: Backend,
    flags: CompilerFlags,
    out: Path,
    console: Console,
) -> int:
    width = -1
    progress = Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    )
    with progress:
        task = progress.add_task(f"tracing ({backend})", total=len(buckets))
        for bucket in buckets:
            progress.update(task, description=f"tracing ({backend}) batch {bucket.batch} seq {bucket.sequence}")
            example = _example(bucket, loaded.inputs, seed=bucket.batch * 31 + bucket.sequence)
            try:
                traced = _trace(loaded.module, example, backend, flags)
            except (RuntimeError, TypeError, ValueError) as exc:
                raise CompileError(
                    f"tracing bucket (batch {bucket.batch}, sequence {bucket.sequence}) failed: {exc}"
                ) from exc
            if backend == "cpu":
                # A Neuron-traced module runs only on a Neuron device, which a compile host may lack.
                _check_trace(loaded.module, traced, bucket, loaded.inputs)
            with torch.no_grad():
                shape = tuple(loaded.module(*example).shape)
            if len(shape) != 2:
                raise CompileError(
                    f"the model's output has shape {list(shape)} at bucket (batch {bucket.batch}, sequence "
                    f"{bucket.sequence}); the server answers one vector per row: [batch, width]"
                )
            if width not in (-1, shape[1]):
                # A width that follows the bucket would make a request's answer depend on the
                # requests it was batched with (and the metadata state one width only).
                raise CompileError(
                    f"the model's output width changes with the bucket: {width} before, {shape[1]} at (batch "
                    f"{bucket.batch}, sequence {bucket.sequence}); the server needs one width for every bucket "
                    "(pool or cut sequence-shaped outputs in the model)"
                )
            width = shape[1]
            with warnings.catch_warnings():
                # torch marks TorchScript deprecated, but it is the format torch-neuronx emits.
                warnings.simplefilter("ignore", DeprecationWarning)
                torch.jit.save(traced, str(out / bucket.file_name))
            progress.advance(task)
    return width


def _stored_manifest_sha(store: Store, key: str) -> str:
    return manifest_sha256(store.get_bytes(f"{key}/{MANIFEST_NAME}"))


def configure_quiet_logging() -> None:
    # transformers logs config quirks of this checkpoint at warning level; they are not actionable.
    logging.getLogger("transformers").setLevel(logging.ERROR)
