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


@pytest.mark.parametrize("module", ["vte.evaluate", "vte.openb"])
def test_the_commands_offer_it(module):
    out = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0 and "--compilation-cache DIR" in out.stdout
