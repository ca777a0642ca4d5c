"""One sandbox per directory: an advisory lock on a file in the directory its kubeconfig lives in.

Two sandboxes sharing a directory overwrite each other's kubeconfig, ``sandbox.env`` and Prometheus
targets, and the one that stops first removes the other's files. The lock is ``fcntl.flock`` on
``sandbox.lock``: the kernel drops it when its process dies, however it dies, so a crashed sandbox
leaves no stale lock behind. The file holds the holder's pid, to name it in the refusal.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

LOCK_FILE_NAME = "sandbox.lock"


class SandboxBusy(RuntimeError):
    """Another sandbox (``pid``, None when it could not be read) holds the lock on ``directory``."""

    def __init__(self, directory: Path, pid: int | None) -> None:
        self.directory = directory
        self.pid = pid
        holder = f"pid {pid}" if pid is not None else "pid unknown"
        super().__init__(f"a sandbox ({holder}) already uses {directory}/")


class DirectoryLock:
    """``acquire()`` or SandboxBusy; ``release()`` removes the file (idempotent)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.path = directory / LOCK_FILE_NAME
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        if self._fd is not None:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                pid = _read_pid(fd)
                os.close(fd)
                raise SandboxBusy(self.directory, pid) from None
            # The holder before us removes the file as it releases: the file we locked may be
            # one no longer at the path, while another process locks the new one. Lock again.
            try:
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is None:
            return
        # Unlink while still holding the lock, so nobody locks the file on its way out (see acquire).
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        os.close(self._fd)
        self._fd = None


def _read_pid(fd: int) -> int | None:
    try:
        return int(os.pread(fd, 32, 0).decode().strip())
    except (OSError, ValueError):
        return None


__all__ = ["LOCK_FILE_NAME", "DirectoryLock", "SandboxBusy"]
