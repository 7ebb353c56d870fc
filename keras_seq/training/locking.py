"""One process at a time in a run folder or an export folder.

`train`, `keras_seq.tuning.search` and `keras_seq.export.export_run` hold
`folder_lock` on the folder they write for as long as they write it: a
second process into the same folder stops at once with `FolderInUseError`,
naming the process that holds it, instead of training beside it and
replacing its files. The lock is an advisory ``flock`` on a file beside the
folder (``.<name>.lock`` in its parent: the folder itself may not exist yet,
and an export is renamed into place whole), which the kernel releases when
the process ends, however it ends: a killed run leaves no stale lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator

from keras_seq._validation import Explained

__all__ = ["FolderInUseError", "folder_lock"]


class FolderInUseError(Explained, RuntimeError):
    """Another process is writing the folder (`folder_lock`)."""


def _lock_path(folder: str) -> str:
    parent, name = os.path.split(os.path.normpath(os.path.abspath(folder)))
    return os.path.join(parent, f".{name}.lock")


def _holder(path: str) -> str:
    """What the holder of the lock at ``path`` wrote there: "process 123 (keras-seq train)"."""
    try:
        with open(path, encoding="utf-8") as f:
            pid, _, what = f.read().strip().partition(" ")
    except OSError:
        pid, what = "", ""
    if not pid.isdigit():
        return "another process"
    return f"process {pid}" + (f" ({what})" if what else "")


@contextlib.contextmanager
def folder_lock(folder: str | os.PathLike, where: str) -> Iterator[None]:
    """Holds the lock of ``folder`` for the ``with`` block.

    Args:
        folder: the run or export folder (it need not exist; its parent is
            created, and removed again if it was created and is left empty).
        where: what holds it, shown to a process that finds it held, e.g.
            ``"keras-seq train"``.

    Raises:
        FolderInUseError: another process holds it; the message names its
            pid and what it runs.

    Examples:
        >>> import os, tempfile
        >>> from keras_seq.training import folder_lock
        >>> run = os.path.join(tempfile.mkdtemp(), "runs", "dates")
        >>> with folder_lock(run, "train"):
        ...     pass  # write the run folder; a second process would get FolderInUseError
    """
    folder = os.fspath(folder)
    path = _lock_path(folder)
    parent = os.path.dirname(path)
    created = not os.path.isdir(parent)
    os.makedirs(parent, exist_ok=True)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise FolderInUseError(
                None, f"{folder} is in use by {_holder(path)}; wait for it to finish, or choose "
                "another folder."
            ) from None
        # The holder before us may have removed the file between our open and
        # our lock: then we hold a lock on a file no one else will find.
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(path))
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()} {where}\n".encode())
        yield
    finally:
        # Removed while still held, so no one locks the file we leave.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        os.close(fd)
        if created:  # a command that wrote nothing leaves nothing behind
            with contextlib.suppress(OSError):
                os.rmdir(parent)
