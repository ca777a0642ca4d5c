"""Which ``--out`` the demo takes: new, empty, a crashed sandbox's lock file alone, or an earlier demo's.

Review r11: ``neuronfleet demo --out .`` in a project deleted ``./artifacts/`` and overwrote
``./kubeconfig`` and ``./report.md``. The command-line refusal is in test_sandbox_cli_refusals.py;
these are the rules of :func:`neuronfleet.demo.outdir.check_out_dir`, and the help that lists what
the demo writes there.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from neuronfleet.demo import cli as demo_cli
from neuronfleet.demo.options import DemoError
from neuronfleet.demo.outdir import DEMO_ENTRIES, MARKER_NAME, check_out_dir
from neuronfleet.sandbox.dirlock import LOCK_FILE_NAME, DirectoryLock

DEMO_SUMMARY = {"load": "simulated", "facts": {}, "compile": "skipped", "timeline": {}, "attribution": "Trace: ..."}


def assert_refused(out: Path) -> str:
    with pytest.raises(DemoError) as raised:
        check_out_dir(out)
    message = str(raised.value)
    assert "\n" not in message and "pass --out a new or empty directory" in message
    return message


def test_a_new_directory_is_taken_and_not_created(tmp_path: Path) -> None:
    check_out_dir(tmp_path / "a" / "b")
    assert list(tmp_path.iterdir()) == []


def test_an_empty_directory_is_taken(tmp_path: Path) -> None:
    check_out_dir(tmp_path)


def test_a_directory_holding_only_a_crashed_sandboxs_lock_file_is_taken(tmp_path: Path) -> None:
    # What a sandbox killed outright leaves: its lock file with its pid (the kernel dropped the lock).
    (tmp_path / LOCK_FILE_NAME).write_text("4242\n")
    check_out_dir(tmp_path)
    # And it is then free to lock.
    lock = DirectoryLock(tmp_path)
    lock.acquire()
    lock.release()


def test_a_file_named_like_the_lock_that_is_not_one_is_refused(tmp_path: Path) -> None:
    (tmp_path / LOCK_FILE_NAME).write_text("my notes on locks\n")
    assert f"--out {tmp_path}/ " in assert_refused(tmp_path)


def test_a_directory_of_other_files_is_refused_naming_it(tmp_path: Path) -> None:
    (tmp_path / "artifacts").mkdir()
    (tmp_path / "kubeconfig").write_text("mine")
    message = assert_refused(tmp_path)
    assert f"--out {tmp_path}/" in message and MARKER_NAME in message


def test_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "report.md").write_text("notes")
    assert "is not a directory" in assert_refused(tmp_path / "report.md")


def test_an_earlier_demos_directory_is_taken_whatever_else_it_holds(tmp_path: Path) -> None:
    (tmp_path / MARKER_NAME).write_text("demo")
    (tmp_path / "kubeconfig").write_text("demo's")
    (tmp_path / "my-notes-on-the-run.md").write_text("kept by the user beside the report")
    check_out_dir(tmp_path)


def test_a_directory_written_before_the_marker_is_taken_when_all_of_it_is_the_demos(tmp_path: Path) -> None:
    (tmp_path / "artifacts").mkdir()
    for name in ("kubeconfig", "operator.log", "report.md", "timeline.png"):
        (tmp_path / name).write_text("demo's")
    (tmp_path / "summary.json").write_text(json.dumps(DEMO_SUMMARY))
    check_out_dir(tmp_path)


@pytest.mark.parametrize(
    ("summary", "extra"),
    [
        ({"load": "mine"}, None),  # a summary.json that is not a demo's
        (None, None),  # no summary.json at all
        (DEMO_SUMMARY, "main.py"),  # a demo's summary beside a file the demo never writes
    ],
    ids=["foreign-summary", "no-summary", "foreign-file"],
)
def test_a_directory_without_the_marker_is_otherwise_refused(
    tmp_path: Path, summary: dict[str, object] | None, extra: str | None
) -> None:
    (tmp_path / "report.md").write_text("notes")
    if summary is not None:
        (tmp_path / "summary.json").write_text(json.dumps(summary))
    if extra is not None:
        (tmp_path / extra).write_text("print('hello')")
    assert_refused(tmp_path)


def test_the_help_of_out_names_every_file_the_demo_writes_there() -> None:
    parser = argparse.ArgumentParser(prog="neuronfleet demo")
    demo_cli.add_arguments(parser)
    out = next(action for action in parser._actions if "--out" in action.option_strings)
    assert out.help is not None
    for name in DEMO_ENTRIES:
        assert name in out.help, name
