"""Finished replays on disk, so that an interrupted grid continues and a repeated one is instant.

One small JSON file per (trace, policy, seed) run, named by a hash of everything its result
depends on: the bytes of the node and pod files, the tune, the policy's name, the seed, and the
code's version (the source of the modules that replay and measure, and the JAX version). Editing
any of them makes new keys, so a stale result is never read. Only the published policies
(`policies.POLICIES`) are kept; a learned policy's weights are not part of the key.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
from pathlib import Path

import jax

from vte.files import atomic_write_text

# The modules whose code decides a run's result (trace input, cluster, policies, workload,
# replay and binning); the cache keys hash their source.
CODE_MODULES = ("vte.openb.trace", "vte.openb.cluster", "vte.openb.policies",
                "vte.openb.workload", "vte.openb.lab.simulator")
FORMAT = 1                    # the layout of a record; raise it when the record changes


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    """A hash of the replay's source (`CODE_MODULES`), the record format and the JAX version."""
    digest = hashlib.sha256(f"{FORMAT}|{jax.__version__}".encode())
    for name in CODE_MODULES:
        digest.update(Path(importlib.util.find_spec(name).origin).read_bytes())
    return digest.hexdigest()


def file_digest(path: str | os.PathLike) -> str:
    """sha256 of a file's bytes: a trace is known by its content, not by its name."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


class RunCache:
    """Records of finished (trace, policy, seed) runs under `directory` (created on first write)."""

    def __init__(self, directory: str | os.PathLike):
        self.directory = Path(directory)
        if self.directory.exists() and not self.directory.is_dir():
            raise ValueError(f"cache {str(directory)!r} is a file; give a directory")

    def key(self, nodes_path: str, pods_path: str, tune: float, policy: str, seed: int) -> str:
        """The record's name: a hash of the node and pod files' bytes, the tune, the policy,
        the seed and `code_version()`."""
        parts = (_digest(nodes_path), _digest(pods_path), repr(float(tune)), policy,
                 str(int(seed)), code_version())
        return hashlib.sha256("|".join(parts).encode()).hexdigest()

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict | None:
        """The record, or None when there is none (or it cannot be read: it is then recomputed)."""
        try:
            return json.loads(self._path(key).read_text())
        except (OSError, ValueError):
            return None

    def put(self, key: str, record: dict) -> None:
        """Stores a JSON-ready record atomically (a reader never sees half a file)."""
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(record, allow_nan=False))


@functools.lru_cache(maxsize=64)
def _digest_cached(path: str, mtime_ns: int, size: int) -> str:
    return file_digest(path)


def _digest(path: str) -> str:
    """`file_digest`, read once per file version (path, modification time, size) per process."""
    stat = os.stat(path)
    return _digest_cached(os.fspath(path), stat.st_mtime_ns, stat.st_size)
