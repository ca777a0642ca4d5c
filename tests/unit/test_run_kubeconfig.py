"""`neuronfleet run` with a kubeconfig it cannot use: one line naming the file, exit code 2, no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from neuronfleet.cli import main


@pytest.fixture(autouse=True)
def outside_a_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBECONFIG", raising=False)


def test_a_missing_kubeconfig_flag_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nonexistent"
    assert main(["run", "--kubeconfig", str(missing)]) == 2
    assert capsys.readouterr().err == (
        f"error: kubeconfig {missing} not found: pass --kubeconfig or set KUBECONFIG to an existing file\n"
    )


def test_a_missing_kubeconfig_variable_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nonexistent"
    monkeypatch.setenv("KUBECONFIG", str(missing))
    assert main(["run"]) == 2
    assert capsys.readouterr().err.startswith(f"error: kubeconfig {missing} not found: ")


def test_an_unusable_kubeconfig_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "kubeconfig"
    broken.write_text("{}\n")
    assert main(["run", "--kubeconfig", str(broken)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: kubeconfig {broken}: Invalid kube-config file. Expected key current-context")
    assert err.endswith("; fix it or pass another with --kubeconfig\n")
    assert err.count("\n") == 1
