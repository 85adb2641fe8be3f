"""JAX's persistent compilation cache, on by default for vte's commands.

    from vte import compilation_cache
    compilation_cache.add_flag(parser)                      # --compilation-cache DIR|off
    compilation_cache.use(args.compilation_cache)           # before anything compiles

A command compiling what an earlier one compiled (the same shapes, the same versions)
loads the program from the cache instead of compiling it again: the trainers, `python -m
vte.evaluate` and `python -m vte.openb` keep their programs in `DEFAULT_CACHE`
(`$XDG_CACHE_HOME/vte/jax`, else `~/.cache/vte/jax`) unless told otherwise. The cache key
covers the program, the devices, the XLA flags and the versions of jax and jaxlib, so a
changed program or installation compiles afresh; removing the folder is always safe.
"""

from __future__ import annotations

import argparse
import os

DEFAULT_CACHE = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                             "vte", "jax")


def tilde(path: str) -> str:
    """`path` with the home folder written as ~ (for --help)."""
    home = os.path.expanduser("~")
    return "~" + path[len(home):] if path.startswith(home + os.sep) else path


def _folder(text: str) -> str:
    if not text:
        raise argparse.ArgumentTypeError(
            "--compilation-cache='' is invalid: allowed a directory or 'off'")
    return text


def add_flag(parser, what: str = "a later run of the same shapes") -> None:
    """`--compilation-cache DIR|off` on an argparse parser (or group), its help naming the
    folder used by default."""
    parser.add_argument(
        "--compilation-cache", metavar="DIR", default=argparse.SUPPRESS, type=_folder,
        help=f"where compiled programs are kept, so that {what} loads them instead of "
             "compiling again (JAX's persistent compilation cache); 'off' turns it off "
             "(default: $JAX_COMPILATION_CACHE_DIR if set, else "
             f"{tilde(DEFAULT_CACHE)})")


def use(path: str | None) -> str | None:
    """Turns on JAX's persistent compilation cache in `path` ("off": off) for this
    process, before anything compiles; returns the directory in use (None: off).

    `path` None (the flag not given) keeps a directory already configured (the variable
    JAX_COMPILATION_CACHE_DIR, or `jax.config` in research code and tests), else uses
    DEFAULT_CACHE; a cache turned off there (JAX_ENABLE_COMPILATION_CACHE=false) stays
    off. Programs are cached when they took 1 s or more to compile
    (`jax_persistent_cache_min_compile_time_secs`)."""
    import jax
    if path == "":
        raise ValueError("--compilation-cache='' is invalid: allowed a directory or 'off'")
    from jax.experimental.compilation_cache import compilation_cache as cc
    if path == "off":
        jax.config.update("jax_enable_compilation_cache", False)
        cc.reset_cache()          # closed, even if an earlier compile opened it
        return None
    if path is None:
        if not jax.config.jax_enable_compilation_cache:
            return None
        path = jax.config.jax_compilation_cache_dir or DEFAULT_CACHE
    if path != jax.config.jax_compilation_cache_dir:
        # A program compiled before this call (an import that builds arrays) opened the
        # cache in the folder configured then ($JAX_COMPILATION_CACHE_DIR): reopen it here,
        # or the flag would be ignored.
        cc.reset_cache()
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_enable_compilation_cache", True)
    return path


__all__ = ["DEFAULT_CACHE", "add_flag", "use", "tilde"]
