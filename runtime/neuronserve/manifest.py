"""The compiled-artifact contract: manifest model, cache key and store layout.

This module is pure (pydantic, hashlib, json only; no torch, no boto3, no I/O) so that the operator
can read manifests and compute cache keys with exactly the code the runtime uses.

Store layout, under a store root (``s3://bucket/prefix`` or a directory)::

    <root>/<cache_key>/manifest.json             written last: its presence marks a complete artifact
    <root>/<cache_key>/model-b<B>-s<S>.pt        one traced module per (batch, sequence) bucket
    <root>/<cache_key>/tokenizer.json            optional, copied from a Hugging Face source
    <root>/<cache_key>/<files_prefix>/...        the same files, in S3: under the folder of the
                                                 writer whose manifest was stored (``files_prefix``)
    <root>/requests/<request_key>.json           RequestRecord: what a compile Job produced, for the
                                                 operator's request key (``--request-key``)

The artifact URI handed to ``neuronserve serve`` is ``<root>/<cache_key>``; the revision label the
operator puts on pods is ``revision(cache_key)``; ``ArtifactStatus.sha256`` is ``manifest_sha256``
of the stored manifest bytes, which in turn pins the sha256 of every other file.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

if TYPE_CHECKING:
    import argparse

FORMAT_VERSION = 1
MANIFEST_NAME = "manifest.json"
TOKENIZER_NAME = "tokenizer.json"
REVISION_LENGTH = 10
REQUESTS_DIR = "requests"
REQUEST_KEY_PATTERN = r"^[A-Za-z0-9._-]{1,128}$"
SHA256_PATTERN = r"^[0-9a-f]{64}$"
#: ``neuronserve serve``'s exit code when the manifest at its artifact URI is not the one its
#: ``--manifest-sha256`` pins: the operator reads it from a crashed pod's last state to check the
#: store again at once (other load failures exit 2).
MANIFEST_MISMATCH_EXIT_CODE = 4
#: The environment variable ``neuronserve serve`` reads the pin from (``--manifest-sha256``'s default).
#: The operator sets the pin there rather than as an argument: a model server older than the pin
#: ignores an unknown variable, where an unknown argument would make every new pod exit 2.
MANIFEST_PIN_ENV = "NEURONSERVE_MANIFEST_SHA256"

Backend = Literal["neuron", "cpu"]
DType = Literal["int64", "int32", "float32", "float16", "bfloat16"]

# KServe v2 datatype names of the element types a manifest can declare.
V2_DATATYPES: dict[str, str] = {
    "int64": "INT64",
    "int32": "INT32",
    "float32": "FP32",
    "float16": "FP16",
    "bfloat16": "BF16",
}


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Bucket(_Frozen):
    """One compiled input shape: every input is padded to (batch, sequence)."""

    batch: int = Field(ge=1, le=4096)
    sequence: int = Field(ge=1, le=65536)

    @property
    def file_name(self) -> str:
        return f"model-b{self.batch}-s{self.sequence}.pt"


class TensorSignature(_Frozen):
    """One input or output tensor. -1 marks a bucketed dimension (batch first, then sequence)."""

    name: str = Field(min_length=1, max_length=128)
    dtype: DType
    shape: list[int] = Field(min_length=1, max_length=8)
    # Inclusive value bounds the server enforces before execution, so that one request with an
    # out-of-vocabulary id is refused with 400 instead of failing the whole batch it landed in.
    min_value: int | None = None
    max_value: int | None = None
    # Value used to pad bucketed dimensions (0 = [PAD] id for input_ids, masked out for attention_mask).
    pad_value: int = 0

    @property
    def v2_datatype(self) -> str:
        return V2_DATATYPES[self.dtype]


class CompilerFlags(_Frozen):
    """What the compile was asked for; part of the cache key whether or not the backend honours it."""

    target_family: Literal["inf2"] = "inf2"
    auto_cast: Literal["none", "matmult", "all"] = "matmult"
    auto_cast_type: Literal["bf16", "fp16", "tf32", "fp8_e4m3"] = "bf16"
    opt_level: int = Field(default=2, ge=1, le=3)
    extra_args: list[str] = Field(default_factory=list, max_length=32)

    @classmethod
    def from_command_line(cls, args: argparse.Namespace) -> CompilerFlags:
        """The flags of a parsed ``neuronserve compile`` command line (``--target``, ``--auto-cast``,
        ``--auto-cast-type``, ``--opt-level``, ``--extra-arg``): one reading for the compiler and
        the sandbox's simulated compile, which parses the same command line."""
        return cls(
            target_family=args.target,
            auto_cast=args.auto_cast,
            auto_cast_type=args.auto_cast_type,
            opt_level=args.opt_level,
            extra_args=args.extra_arg,
        )

    def neuronx_cc_args(self) -> list[str]:
        """The neuronx-cc command-line arguments these flags stand for."""
        return [
            "--target",
            self.target_family,
            "--auto-cast",
            self.auto_cast,
            "--auto-cast-type",
            self.auto_cast_type,
            f"-O{self.opt_level}",
            *self.extra_args,
        ]


class FileEntry(_Frozen):
    """One file of the artifact, relative to the artifact root."""

    path: str = Field(min_length=1)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    size: int = Field(ge=0)

    @field_validator("path")
    @classmethod
    def _relative(cls, path: str) -> str:
        return _relative_path(path)


def _relative_path(path: str) -> str:
    # A manifest is input to the server: never let it name a file outside the artifact directory.
    # A NUL byte is refused here too: the OS would raise ValueError on it, not a rejection.
    parts = path.split("/")
    if path.startswith("/") or "\\" in path or "\0" in path or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"file path must be relative and normalized, got {path!r}")
    return path


class Manifest(_Frozen):
    """What ``neuronserve compile`` produced and ``neuronserve serve`` verifies before loading."""

    format_version: int = FORMAT_VERSION
    name: str = Field(min_length=1, max_length=128, description="Model name served under /v2/models/{name}.")
    backend: Backend
    buckets: list[Bucket] = Field(min_length=1)
    inputs: list[TensorSignature] = Field(min_length=1)
    outputs: list[TensorSignature] = Field(min_length=1)
    output_description: str = ""
    compiler: str = Field(
        description="Compiler identity, e.g. neuronx-cc==2.15.128.0,torch-neuronx==2.1.2.2.3.0,neuronserve==0.1.0+"
        "<code digest> or torch.jit==2.13.0+cpu,neuronserve==0.1.0+<code digest>,transformers==4.46.0."
    )
    torch_version: str
    flags: CompilerFlags
    source_digest: str = Field(pattern=r"^[0-9a-f]{64}$")
    source: str = ""
    cache_key: str = Field(pattern=r"^[0-9a-f]{64}$")
    files: list[FileEntry] = Field(min_length=1)
    created_at: str = ""
    files_prefix: str = Field(
        default="",
        description="Where the files lie below the artifact, in an S3 store: the folder of the writer "
        "that stored this manifest. S3 has no atomic rename, so each compile uploads into a folder of "
        "its own and the manifest, stored only if none is yet (a conditional put), names the winner's: "
        "two compiles of one key never mix their files. Empty in a directory store (a rename stores "
        "the whole artifact at once) and in manifests written before it.",
    )

    @field_validator("files_prefix")
    @classmethod
    def _prefix_relative(cls, prefix: str) -> str:
        return prefix and _relative_path(prefix)

    @model_validator(mode="after")
    def _consistent(self) -> Manifest:
        if self.format_version != FORMAT_VERSION:
            raise ValueError(
                f"unsupported manifest format_version {self.format_version} (this server reads {FORMAT_VERSION})"
            )
        if len(set(self.buckets)) != len(self.buckets):
            raise ValueError("duplicate buckets")
        names = {f.path for f in self.files}
        missing = [b.file_name for b in self.buckets if b.file_name not in names]
        if missing:
            raise ValueError(f"buckets without a model file: {', '.join(missing)}")
        return self

    @property
    def batch_sizes(self) -> list[int]:
        return sorted({b.batch for b in self.buckets})

    @property
    def sequence_lengths(self) -> list[int]:
        return sorted({b.sequence for b in self.buckets})

    @property
    def max_batch(self) -> int:
        return max(b.batch for b in self.buckets)

    @property
    def max_sequence(self) -> int:
        return max(b.sequence for b in self.buckets)

    def bucket_for(self, batch: int, sequence: int) -> Bucket | None:
        """The smallest compiled bucket that holds (batch, sequence), or None if none does."""
        fitting = [b for b in self.buckets if b.batch >= batch and b.sequence >= sequence]
        return min(fitting, key=lambda b: (b.batch * b.sequence, b.sequence)) if fitting else None

    def stored_path(self, path: str) -> str:
        """Where a listed file lies below the artifact's URI (in its writer's folder, if any)."""
        return f"{self.files_prefix}/{path}" if self.files_prefix else path

    def has_tokenizer(self) -> bool:
        return any(f.path == TOKENIZER_NAME for f in self.files)

    def to_json_bytes(self) -> bytes:
        data = self.model_dump(mode="json")
        if not data["files_prefix"]:
            del data["files_prefix"]  # a directory store's manifest stays as it was before the field
        return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode()

    @classmethod
    def from_json_bytes(cls, data: bytes) -> Manifest:
        return cls.model_validate_json(data)


class RequestRecord(_Frozen):
    """Written by ``neuronserve compile --request-key K`` at ``<root>/requests/K.json`` once the
    artifact is stored (or found in the cache): the operator's lookup from its request key."""

    cache_key: str = Field(pattern=r"^[0-9a-f]{64}$")
    artifact_uri: str
    manifest_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    backend: Backend
    revision: str

    def to_json_bytes(self) -> bytes:
        return (json.dumps(self.model_dump(mode="json"), sort_keys=True) + "\n").encode()


def request_record_path(request_key: str) -> str:
    """Path of a request record relative to the store root."""
    return f"{REQUESTS_DIR}/{request_key}.json"


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def manifest_sha256(manifest_bytes: bytes) -> str:
    """Digest of a stored manifest: the artifact's identity (it pins every file's sha256)."""
    return sha256_hex(manifest_bytes)


def source_digest(file_digests: Mapping[str, str]) -> str:
    """Digest of a model source from the sha256 of each of its files, keyed by relative path.

    Order-independent, and a renamed file changes it as much as a changed one.
    """
    lines = "".join(f"{path}\0{digest}\n" for path, digest in sorted(file_digests.items()))
    return sha256_hex(lines.encode())


def cache_key(
    source_digest: str,
    compiler: str,
    flags: CompilerFlags,
    buckets: Iterable[Bucket],
    inputs: Iterable[TensorSignature] = (),
) -> str:
    """The key an artifact is stored under: equal inputs give the same key, so nothing compiles twice.

    It hashes the source digest, the compiler identity (which also tells the backend apart and
    names the compile code: neuronserve's, transformers' for a Hugging Face source), the
    flags (target family included) and the bucket set (order and duplicates ignored), plus the
    input names and dtypes when given.
    """
    doc = {
        "format_version": FORMAT_VERSION,
        "source_digest": source_digest,
        "compiler": compiler,
        "flags": flags.model_dump(mode="json"),
        "target_family": flags.target_family,
        "buckets": sorted({(b.batch, b.sequence) for b in buckets}),
        "inputs": [(t.name, t.dtype) for t in inputs],
    }
    return sha256_hex(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode())


def revision(key: str) -> str:
    """The short revision label derived from a cache key (pods carry it as a label)."""
    return key[:REVISION_LENGTH]


def artifact_uri(store_root: str, key: str) -> str:
    """Where the artifact with this cache key lives under a store root."""
    return f"{store_root.rstrip('/')}/{key}"


def manifest_uri(store_root: str, key: str) -> str:
    return f"{artifact_uri(store_root, key)}/{MANIFEST_NAME}"


def split_s3_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/some/prefix/`` -> ``("bucket", "some/prefix")``. Raises ValueError if not S3."""
    if not uri.startswith("s3://"):
        raise ValueError(f"not an s3:// URI: {uri!r}")
    rest = uri[len("s3://") :]
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise ValueError(f"s3 URI without a bucket: {uri!r}")
    return bucket, prefix.strip("/")


def verify_files(manifest: Manifest, digests: Mapping[str, str], sizes: Mapping[str, int] | None = None) -> list[str]:
    """Compare fetched files with the manifest; return one message per problem.

    ``digests`` maps a relative path to the file's sha256 and ``sizes`` (when given) to its size in
    bytes. The size is compared first: a file whose size is wrong needs no digest (the caller may
    leave it out of ``digests`` and skip hashing it), and a path in either mapping is present.
    """
    sizes = sizes or {}
    problems = []
    for entry in manifest.files:
        size, actual = sizes.get(entry.path), digests.get(entry.path)
        if size is None and actual is None:
            problems.append(f"{entry.path}: missing")
        elif size is not None and size != entry.size:
            problems.append(f"{entry.path}: {size} bytes, the manifest says {entry.size}")
        elif actual is None:
            problems.append(f"{entry.path}: not hashed")
        elif actual != entry.sha256:
            problems.append(f"{entry.path}: sha256 {actual} does not match the manifest's {entry.sha256}")
    listed = {f.path for f in manifest.files}
    problems.extend(f"{path}: not listed in the manifest" for path in sorted((set(digests) | set(sizes)) - listed))
    return problems


#: S3 storage classes whose objects cannot be read (GET) until restored. GLACIER_IR is read at once.
ARCHIVE_STORAGE_CLASSES = frozenset({"GLACIER", "DEEP_ARCHIVE"})


def archived(head: Mapping[str, object]) -> str | None:
    """Why an S3 object cannot be read now, from its HEAD response (boto3's dict): "archived
    (storage class X)" when a lifecycle transition (or a put) left it in an archive class with no
    completed restore; None when it is readable. A HEAD still finds such an object at its size."""
    storage_class = str(head.get("StorageClass") or "")
    if storage_class not in ARCHIVE_STORAGE_CLASSES:
        return None
    if 'ongoing-request="false"' in str(head.get("Restore") or ""):
        return None  # a restored copy is readable until it expires
    return f"archived (storage class {storage_class})"


def missing_files(manifest: Manifest, sizes: Mapping[str, int]) -> list[str]:
    """The manifest's files absent from ``sizes`` (path -> size in bytes) or of another size: one
    message each. A check by listing only (no file read), for a stored artifact whose files may
    have been deleted behind its manifest's back."""
    problems = []
    for entry in manifest.files:
        size = sizes.get(entry.path)
        if size is None:
            problems.append(f"{entry.path}: missing")
        elif size != entry.size:
            problems.append(f"{entry.path}: {size} bytes, the manifest says {entry.size}")
    return problems
