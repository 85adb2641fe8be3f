"""The persistent compilation cache: on by default for the commands, its folder in --help."""

import argparse
import subprocess
import sys

import jax
import pytest

from vte import compilation_cache


@pytest.fixture
def restore_cache_config():
    before = (jax.config.jax_enable_compilation_cache, jax.config.jax_compilation_cache_dir)
    yield
    jax.config.update("jax_enable_compilation_cache", before[0])
    jax.config.update("jax_compilation_cache_dir", before[1])
    from jax.experimental.compilation_cache import compilation_cache as cc
    cc.reset_cache()                       # reopened in the suite's folder on the next compile


def test_use_sets_a_folder_turns_off_and_refuses_an_empty_one(tmp_path, restore_cache_config):
    assert compilation_cache.use(str(tmp_path)) == str(tmp_path)
    assert jax.config.jax_compilation_cache_dir == str(tmp_path)
    assert jax.config.jax_enable_compilation_cache
    assert compilation_cache.use(None) == str(tmp_path)       # kept when the flag is absent
    assert compilation_cache.use("off") is None
    assert not jax.config.jax_enable_compilation_cache
    assert compilation_cache.use(None) is None                 # off stays off
    with pytest.raises(ValueError, match="--compilation-cache='' is invalid"):
        compilation_cache.use("")


def test_the_flag_names_the_default_folder():
    parser = argparse.ArgumentParser()
    compilation_cache.add_flag(parser)
    assert compilation_cache.tilde(compilation_cache.DEFAULT_CACHE) in parser.format_help()
    assert parser.parse_args(["--compilation-cache", "off"]).compilation_cache == "off"
    with pytest.raises(SystemExit):                   # one line from argparse, no traceback
        parser.parse_args(["--compilation-cache", ""])


def test_the_flag_wins_over_a_cache_opened_by_an_earlier_compile(tmp_path):
    """A command's imports may compile a little before its flags are read (OpenB's power
    tables are built at import); JAX then opens the cache in $JAX_COMPILATION_CACHE_DIR. The
    folder the flag names must still receive the command's programs."""
    import os
    env = {**os.environ, "JAX_COMPILATION_CACHE_DIR": str(tmp_path / "env"),
           "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}
    code = ("import jax, jax.numpy as jnp\n"
            "jnp.ones(3) + 1\n"                                  # opens the cache in env/
            "from vte import compilation_cache\n"
            f"compilation_cache.use({str(tmp_path / 'flag')!r})\n"
            "jax.jit(lambda x: x * 3 + 2)(jnp.ones(5))\n")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    flag = [p.name for p in (tmp_path / "flag").iterdir()]
    assert any(name.startswith("jit__lambda") for name in flag), flag
    assert not any(p.name.startswith("jit__lambda") for p in (tmp_path / "env").iterdir())
    # 'off' after the same early compile: the command's program is written nowhere.
    off = code.replace(repr(str(tmp_path / "flag")), "'off'")
    out = subprocess.run([sys.executable, "-c", off], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert not any(p.name.startswith("jit__lambda") for p in (tmp_path / "env").iterdir())


@pytest.mark.parametrize("command", [["vte.evaluate"], ["vte.openb"],
                                     ["vte.serve", "--protocol", "kube-extender"]])
def test_the_commands_offer_it(command):
    out = subprocess.run([sys.executable, "-m", *command, "--help"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0 and "--compilation-cache DIR" in out.stdout
