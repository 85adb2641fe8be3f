"""Output files: checked before any work starts, written atomically (temporary file, rename)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable


def check_output_path(path: str, flag: str) -> Path:
    """Raises ValueError naming `flag` unless `path` can be written: not empty, not a
    directory, its directory exists and is writable."""
    if not path:
        raise ValueError(f"{flag} '': give a file path")
    target = Path(path)
    if target.is_dir():
        raise ValueError(f"{flag} {path!r} is a directory; give a file path")
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        raise ValueError(f"{flag} {path!r}: the directory {str(parent)!r} does not exist")
    if not os.access(parent, os.W_OK):
        raise ValueError(f"{flag} {path!r}: the directory {str(parent)!r} is not writable")
    return target


def atomic_write(path: str | os.PathLike, write: Callable[[str], None]) -> None:
    """Calls `write(tmp_path)` on a temporary file beside `path`, then renames it over `path`,
    so that a reader never sees a half-written file and an error leaves `path` untouched."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(dir=target.parent if str(target.parent) else ".",
                               prefix=f".{target.name}.", suffix=target.suffix)
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)                 # the mode a plain open() would give
    try:
        write(tmp)
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    def write(tmp: str) -> None:
        with open(tmp, "w") as f:
            f.write(text)
    atomic_write(path, write)
