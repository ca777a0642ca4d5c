"""``--manifest-sha256``: a server serves the artifact its operator recorded, or nothing.

The operator records an artifact's manifest sha256 in the status and passes it to every serving
pod. Should the manifest at the URI have been replaced since (a republish, a racing compile, an
overwritten prefix), the server must refuse before reading anything else, naming both digests and
the URI, and exit with the code the operator looks for; without the flag it serves whatever
manifest is there, as ``neuronserve`` used by hand always did.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import boto3
import pytest

from neuronserve import cli
from neuronserve.emulated import PROFILES, synthetic_manifest
from neuronserve.manifest import MANIFEST_MISMATCH_EXIT_CODE, MANIFEST_NAME, Bucket, Manifest, manifest_sha256
from neuronserve.store import ManifestMismatch, fetch_artifact, fetch_manifest
from runtime_support import BUCKET, S3Server, ServeProcess, http_json, wait_for

EMULATED = ["--device", "emulated-neuroncore", "--profile", "bert-base"]


def _manifest(name: str) -> Manifest:
    return synthetic_manifest(PROFILES["bert-base"], name)


def _directory_artifact(root: Path, manifest: Manifest) -> tuple[str, str]:
    """An emulated-device artifact in a directory (its model files are never read): URI and sha256."""
    root.mkdir(parents=True, exist_ok=True)
    data = manifest.to_json_bytes()
    (root / MANIFEST_NAME).write_bytes(data)
    return str(root), manifest_sha256(data)


def _ready(process: ServeProcess) -> bool:
    process.wait_listening()
    status, _, _ = http_json(process.url, "GET", "/v2/health/ready")
    return status == 200


# ------------------------------------------------------------------------------------------- store


def test_a_directory_artifact_is_fetched_when_its_manifest_has_the_pinned_sha256(tmp_path: Path) -> None:
    uri, digest = _directory_artifact(tmp_path / "artifact", _manifest("recorded"))
    manifest, _ = fetch_manifest(uri, tmp_path / "scratch", (), digest)
    assert manifest.name == "recorded"
    # Upper-case hex is the same digest.
    manifest, _ = fetch_manifest(uri, tmp_path / "scratch", (), digest.upper())
    assert manifest.name == "recorded"


def test_a_replaced_directory_manifest_is_refused_naming_both_digests_and_the_uri(tmp_path: Path) -> None:
    uri, recorded = _directory_artifact(tmp_path / "artifact", _manifest("recorded"))
    _, replaced = _directory_artifact(tmp_path / "artifact", _manifest("republished"))
    for fetch in (
        lambda: fetch_manifest(uri, tmp_path / "scratch", (), recorded),
        lambda: fetch_artifact(uri, tmp_path / "scratch", recorded),
    ):
        with pytest.raises(ManifestMismatch) as caught:
            fetch()
        message = str(caught.value)
        assert uri in message and recorded in message and replaced in message, message
        assert (caught.value.expected, caught.value.found) == (recorded, replaced)


def test_a_replaced_s3_manifest_is_refused_before_any_model_file_is_downloaded(
    s3_env: S3Server, tmp_path: Path
) -> None:
    client = boto3.client("s3")
    prefix = "pinned/" + "d" * 64
    uri = f"s3://{BUCKET}/{prefix}"
    recorded = _manifest("recorded").model_copy(update={"buckets": [Bucket(batch=1, sequence=128)]})
    recorded = recorded.model_copy(update={"files": recorded.files[:1]})
    model_file = recorded.files[0].path
    client.put_object(Bucket=BUCKET, Key=f"{prefix}/{model_file}", Body=b"")
    client.put_object(Bucket=BUCKET, Key=f"{prefix}/{MANIFEST_NAME}", Body=recorded.to_json_bytes())
    recorded_sha = manifest_sha256(recorded.to_json_bytes())

    _, data, directory = fetch_artifact(uri, tmp_path / "match", recorded_sha)
    assert manifest_sha256(data) == recorded_sha and (directory / model_file).is_file()

    republished = recorded.model_copy(update={"created_at": "republished"}).to_json_bytes()
    client.put_object(Bucket=BUCKET, Key=f"{prefix}/{MANIFEST_NAME}", Body=republished)
    scratch = tmp_path / "mismatch"
    with pytest.raises(ManifestMismatch, match=f"the manifest at {uri} has sha256 {manifest_sha256(republished)}"):
        fetch_artifact(uri, scratch, recorded_sha)
    assert not scratch.exists()  # nothing downloaded, not even a directory made
    with pytest.raises(ManifestMismatch):
        fetch_manifest(uri, tmp_path / "manifest-only", (), recorded_sha)
    # Unpinned: today's behaviour, whatever manifest is there.
    _, data, _ = fetch_artifact(uri, tmp_path / "unpinned")
    assert data == republished


# ------------------------------------------------------------------------------------------ server


def test_a_server_pinned_to_the_manifest_it_finds_serves(tmp_path: Path, serve_process: Any) -> None:
    uri, digest = _directory_artifact(tmp_path / "artifact", _manifest("recorded"))
    process: ServeProcess = serve_process([*EMULATED, "--artifact", uri, "--manifest-sha256", digest])
    wait_for(lambda: _ready(process), 60, "the pinned server to be ready")
    status, _, meta = http_json(process.url, "GET", "/v2/models/recorded")
    assert status == 200, meta
    assert f"manifest sha256 {digest}" in process.log


def test_a_server_pinned_to_another_manifest_exits_serving_nothing(tmp_path: Path, serve_process: Any) -> None:
    uri, recorded = _directory_artifact(tmp_path / "artifact", _manifest("recorded"))
    _, replaced = _directory_artifact(tmp_path / "artifact", _manifest("republished"))
    # From the environment, as a pod spec's env would set it.
    process: ServeProcess = serve_process([*EMULATED, "--artifact", uri], env={"NEURONSERVE_MANIFEST_SHA256": recorded})
    code = process.wait_exit()
    assert code == MANIFEST_MISMATCH_EXIT_CODE, process.log
    refusals = [line for line in process.lines if line.startswith("neuronserve: ")]
    assert len(refusals) == 1, process.log
    assert uri in refusals[0] and recorded in refusals[0] and replaced in refusals[0], refusals
    assert "ready: model" not in process.log and "Traceback" not in process.log


def test_a_server_without_a_pin_serves_whatever_manifest_is_there(tmp_path: Path, serve_process: Any) -> None:
    uri, _ = _directory_artifact(tmp_path / "artifact", _manifest("recorded"))
    _directory_artifact(tmp_path / "artifact", _manifest("republished"))
    process: ServeProcess = serve_process([*EMULATED, "--artifact", uri])
    wait_for(lambda: _ready(process), 60, "the unpinned server to be ready")
    status, _, _ = http_json(process.url, "GET", "/v2/models/republished")
    assert status == 200


@pytest.mark.parametrize(
    ("argv", "env", "error"),
    [
        (["--manifest-sha256", "abc"], {}, "expected a sha256 (64 hex digits), got 'abc'"),
        ([], {"NEURONSERVE_MANIFEST_SHA256": "xyz"}, "$NEURONSERVE_MANIFEST_SHA256='xyz': expected a sha256"),
    ],
)
def test_a_malformed_pin_is_a_usage_error(
    argv: list[str],
    env: dict[str, str],
    error: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(SystemExit) as caught:
        cli.main(["serve", "--artifact", "/nowhere", *EMULATED, *argv])
    assert caught.value.code == 2
    assert error in capsys.readouterr().err


def test_a_pin_without_an_artifact_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["serve", *EMULATED, "--manifest-sha256", "a" * 64]) == 2
    assert "--manifest-sha256 pins an artifact's manifest: it needs --artifact" in capsys.readouterr().err
