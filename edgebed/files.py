"""Writing result files whole or not at all, for every layer."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import IO, Iterator


@contextlib.contextmanager
def atomic_output(path: Path | str, mode: str = "w", newline: str | None = None
                  ) -> Iterator[IO]:
    """A stream to write ``path``'s new contents to ("w" text or "wb" bytes); on leaving the
    block the file is fsynced and renamed over ``path``. On an exception ``path`` keeps what
    it had and the temporary file is removed."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_output writes whole files: mode 'w' or 'wb', not {mode!r}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.",
                                         suffix=".partial")
    try:
        with os.fdopen(handle, mode, newline=newline) as stream:
            yield stream
            stream.flush()
            os.fsync(stream.fileno())
        # mkstemp makes the file private (0600); a result file gets the usual mode.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary, 0o666 & ~umask)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    _sync_directory(path.parent)


def atomic_write(path: Path | str, data: str | bytes) -> None:
    """Replace ``path`` with ``data`` (text or bytes) in one step."""
    with atomic_output(path, "wb" if isinstance(data, bytes) else "w") as stream:
        stream.write(data)


def _sync_directory(directory: Path) -> None:
    """Make the rename itself durable; a file system that cannot sync a directory (some
    network and FUSE ones) still did the rename atomically."""
    try:
        descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)
