"""Command lines refused in one line, before anything starts (review r1).

- ``sandbox up --prometheus on`` on a machine without the prometheus binary: one line saying what
  to install, not a 29-line traceback from deep inside the cluster's start.
- ``demo``: a non-finite or negative ``--minutes``, ``--start-minute`` (and the other figures) is
  an argument error, as argparse says a bad number; ``--minutes nan`` used to crash with a
  ValueError, ``--load simulated --start-minute -5`` to be accepted.
- a sandbox directory in use is refused by ``demo`` too, naming its own flag (``--out``), before
  it writes anything there (the running demo's artifact store and log stay as they were).
- ``demo --out`` a directory that is not new, empty or an earlier demo's (review r11: ``--out .``
  in a project deleted its ``artifacts/`` and overwrote its ``kubeconfig`` and ``report.md``), or
  a file, is refused in one line before anything is written.
"""

from __future__ import annotations

import argparse
import errno
import os
from pathlib import Path

import pytest

from neuronfleet.demo import cli as demo_cli
from neuronfleet.demo.outdir import MARKER_NAME
from neuronfleet.sandbox import command
from neuronfleet.sandbox.dirlock import DirectoryLock
from neuronfleet.sandbox.prometheus import INSTALL_HINT, PrometheusUnavailable


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="neuronfleet")
    sub = root.add_subparsers()
    command.register(sub)
    demo_cli.register(sub)
    return root


def test_prometheus_on_without_the_binary_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    def missing() -> str:
        raise PrometheusUnavailable(f"no prometheus binary on PATH: {INSTALL_HINT}")

    monkeypatch.setattr(command, "find_binary", missing)
    monkeypatch.setattr("neuronfleet.sandbox.cluster.find_binary", missing)
    args = parser().parse_args(
        ["sandbox", "up", "--prometheus", "on", "--no-s3", "--kubeconfig", str(tmp_path / "kubeconfig")]
    )
    assert args.func(args) == 1
    err = capsys.readouterr().err
    assert err.splitlines() == [
        f"neuronfleet sandbox up: --prometheus on: no prometheus binary on PATH: {INSTALL_HINT} "
        "(or pass --prometheus off)"
    ]
    assert not (tmp_path / "kubeconfig").exists()


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--minutes", "nan"),
        ("--minutes", "inf"),
        ("--minutes", "-1"),
        ("--minutes", "0"),
        ("--start-minute", "-5"),
        ("--start-minute", "nan"),
        ("--speed", "inf"),
        ("--peak-rps", "nan"),
        ("--peak-replicas", "-3"),
        ("--lead-in", "-1"),
    ],
)
def test_demo_refuses_a_non_finite_or_negative_figure(
    flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        parser().parse_args(["demo", "--load", "simulated", f"{flag}={value}"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}: " in err
    assert value in err


def test_demo_takes_zero_start_and_lead_in() -> None:
    args = parser().parse_args(["demo", "--load", "simulated", "--start-minute", "0", "--lead-in", "0"])
    assert (args.start_minute, args.lead_in) == (0.0, 0.0)


@pytest.mark.parametrize("load", [["simulated", "--skip-compile"], ["real"]], ids=lambda load: load[0])
def test_demo_on_a_directory_in_use_names_its_out_flag(
    load: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # What a running demo has in its --out (review r7: the refused one deleted its artifact store
    # and emptied its operator log before its sandbox found the directory taken).
    (tmp_path / "artifacts" / "bert").mkdir(parents=True)
    (tmp_path / "artifacts" / "bert" / "model.pt").write_text("compiled")
    (tmp_path / "operator.log").write_text("the running demo's operator log\n")
    lock = DirectoryLock(tmp_path)
    lock.acquire()
    # A demo marks its --out right after locking it (review r11): the directory is a demo's.
    (tmp_path / MARKER_NAME).write_text("running")
    try:
        # Refused before it writes anything in --out, whatever the load.
        args = parser().parse_args(["demo", "--load", *load, "--no-live", "--out", str(tmp_path)])
        assert args.func(args) == 1
    finally:
        lock.release()
    err = capsys.readouterr().err
    assert "already uses" in err
    assert "stop it, or pass --out elsewhere" in err
    assert (tmp_path / "artifacts" / "bert" / "model.pt").read_text() == "compiled"
    assert (tmp_path / "operator.log").read_text() == "the running demo's operator log\n"


# Review r11: `demo --out .` in a project deleted its ./artifacts/ and overwrote its ./kubeconfig,
# ./report.md (and summary.json, timeline.png, operator.log) without a word.
@pytest.mark.parametrize("load", [["simulated", "--skip-compile"], ["real"]], ids=lambda load: load[0])
def test_demo_refuses_an_out_directory_holding_files_not_its_own(
    load: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "project"
    (project / "artifacts").mkdir(parents=True)
    (project / "artifacts" / "keep.txt").write_text("data")
    (project / "kubeconfig").write_text("mine")
    (project / "report.md").write_text("notes")
    before = sorted(p.relative_to(project) for p in project.rglob("*"))
    short = ["--minutes", "1", "--lead-in", "0", "--speed", "1000", "--no-live"]
    args = parser().parse_args(["demo", "--load", *load, *short, "--out", str(project)])
    assert args.func(args) == 1
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1, err
    assert f"--out {project}/" in err and "pass --out a new or empty directory" in err
    # Refused before anything was written: no lock file, no log, no marker; the user's files intact.
    assert sorted(p.relative_to(project) for p in project.rglob("*")) == before
    assert (project / "artifacts" / "keep.txt").read_text() == "data"
    assert (project / "kubeconfig").read_text() == "mine"
    assert (project / "report.md").read_text() == "notes"


def test_demo_refuses_an_out_that_is_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "report.md"
    out.write_text("notes")
    args = parser().parse_args(["demo", "--load", "simulated", "--skip-compile", "--no-live", "--out", str(out)])
    assert args.func(args) == 1
    err = capsys.readouterr().err
    advice = "pass --out a new or empty directory"
    assert err.splitlines() == [f"neuronfleet demo: --out {out} is not a directory: {advice}"]
    assert out.read_text() == "notes"


@pytest.mark.parametrize(
    ("compile_jobs", "serving"), [("simulated", "emulated-device"), ("simulated", "simulated"), ("real", "cpu")]
)
def test_only_simulated_compiles_with_cpu_serving_are_refused(
    compile_jobs: str, serving: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # Each of these gets past that check: the next one (a --crd-dir that is no directory) answers.
    argv = ["sandbox", "up", "--compile-jobs", compile_jobs, "--serving", serving, "--crd-dir", str(tmp_path / "none")]
    args = parser().parse_args([*argv, "--kubeconfig", str(tmp_path / "kubeconfig")])
    assert args.func(args) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"neuronfleet sandbox up: --crd-dir {tmp_path / 'none'} is not a directory"
    ]


@pytest.mark.parametrize(("code", "hint"), [(errno.EADDRINUSE, True), (errno.EACCES, False)])
def test_a_taken_port_is_named_and_another_error_is_not_called_one(
    code: int, hint: bool, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    async def fails(*_: object) -> None:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(command, "_serve", fails)
    args = parser().parse_args(["sandbox", "up", "--port", "8080", "--kubeconfig", str(tmp_path / "kubeconfig")])
    assert args.func(args) == 1
    err = capsys.readouterr().err
    assert err.startswith("neuronfleet sandbox up: cannot serve: ")
    assert ("port 8080 is taken; omit --port for a free one" in err) is hint
