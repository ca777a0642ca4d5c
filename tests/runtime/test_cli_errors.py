"""`neuronserve compile` fails with one clear line, never a traceback: an unwritable directory store,
an unwritable result file after a good compile, and messages that hold square brackets."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
from tiny_model import save_tiny

from neuronserve import cli
from neuronserve.store import Store, StoreError
from runtime_support import BUCKET, S3Server


@pytest.fixture
def source(tmp_path: Path) -> Path:
    return save_tiny(tmp_path / "tiny.pt")


@pytest.fixture
def a_file(tmp_path: Path) -> Path:
    """A regular file: nothing can be created under it (unlike a read-only directory, even as root)."""
    path = tmp_path / "a-file"
    path.write_text("not a directory\n")
    return path


def _compile(source: Path, store: Path | str, *extra: str) -> int:
    argv = ["compile", "--source", str(source), "--store", str(store), "--batch-buckets", "1"]
    return cli.main([*argv, "--sequence-buckets", "4", *extra])


def test_an_unwritable_directory_store_is_a_store_error(
    source: Path, a_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = _compile(source, a_file / "store")  # was a NotADirectoryError traceback (/proc/nope: FileNotFoundError)
    out, err = capsys.readouterr()
    assert code == 1
    assert out == ""
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if "compile failed" in line]
    assert len(lines) == 1, err
    assert f"compile failed: cannot store the artifact at {a_file}/store/" in lines[0]
    assert f"Not a directory: {a_file}/store" in lines[0]
    # Nothing half-written is left behind where it could be written.
    assert a_file.read_text() == "not a directory\n"


def test_local_store_os_errors_are_store_errors(a_file: Path, tmp_path: Path) -> None:
    store = Store(str(a_file / "store"))
    with pytest.raises(StoreError, match=r"cannot write .*/a-file/store/requests/k\.json: Not a directory"):
        store.put_bytes("requests/k.json", b"{}")
    with pytest.raises(StoreError, match=r"cannot read .*/store/abc/manifest\.json: Not a directory"):
        store.get_bytes("abc/manifest.json")
    with pytest.raises(StoreError, match=r"cannot read .*/nothing/here\.json: No such file or directory"):
        Store(str(tmp_path)).get_bytes("nothing/here.json")
    assert store.has_artifact("abc") is False


def test_a_write_error_without_a_file_name_names_only_the_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A full disk fails the write() of a file already open: its OSError carries no file name, and
    # the message must not end in ': None'.
    def disk_full(_self: Path, _data: bytes) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(Path, "write_bytes", disk_full)
    with pytest.raises(StoreError) as caught:
        Store(str(tmp_path)).put_bytes("requests/k.json", b"{}")
    assert str(caught.value) == f"cannot write {tmp_path}/requests/k.json: No space left on device"
    assert list((tmp_path / "requests").iterdir()) == []  # no partial file left behind


def test_an_unwritable_result_file_is_one_line_and_exit_1_after_the_artifact_is_stored(
    source: Path, a_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store"
    code = _compile(source, store, "--result-file", str(a_file / "result.json"))  # was a traceback
    out, err = capsys.readouterr()
    assert code == 1  # the caller asked for the file; the message says the compile itself succeeded
    result = json.loads(out)  # the result is still on stdout
    assert (store / result["cacheKey"] / "manifest.json").is_file()
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if "result file" in line]
    assert lines == [
        f"cannot write the result file {a_file}/result.json: Not a directory (the compile succeeded: the artifact "
        f"is stored at {result['uri']}; the result is on stdout)"
    ], err


def test_square_brackets_in_messages_are_printed(
    source: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # rich took "[a]" for markup and printed "/tmp/.../nosuch does not exist".
    code = cli.main(["compile", "--source", str(tmp_path / "nosuch[a]"), "--store", str(tmp_path / "store")])
    assert code == 1
    assert f"compile failed: model source {tmp_path}/nosuch[a] does not exist" in capsys.readouterr().err

    store = tmp_path / "store[b]"
    assert _compile(source, store) == 0
    assert f"at {store}/" in capsys.readouterr().err
    assert _compile(source, store) == 0
    assert f"cache hit: {store}/" in capsys.readouterr().err


def test_get_bytes_reads_what_put_bytes_wrote_in_s3_too(s3_env: S3Server) -> None:
    # The compile's cache hit reads the stored manifest through Store.get_bytes.
    store = Store(f"s3://{BUCKET}/cli-errors")
    store.put_bytes("requests/k.json", b'{"a": 1}')
    assert store.get_bytes("requests/k.json") == b'{"a": 1}'
    with pytest.raises(StoreError, match=rf"cannot read s3://{BUCKET}/cli-errors/nothing\.json"):
        store.get_bytes("nothing.json")
