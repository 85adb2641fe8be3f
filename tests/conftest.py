"""Shared small configurations and compiled functions (compiling is the slow part).

Whole clean runs of the suite in one process segfaulted three times inside XLA's CPU
compilation (jax 0.10.2; `backend_compile_and_load`), each time late in the process's life,
after some hundreds of programs, in a program that compiles fine alone. So no process keeps
every program alive: the suite runs on several worker processes (pytest-xdist, `-n auto
--dist loadfile`), and after each test file its compiled programs are dropped
(`jax.clear_caches()` and the trainers' cache). A program needed again later (another
file, another worker, a subprocess, the next run) is read back from the persistent
compilation cache in `.pytest_cache/jax` instead of compiled again.
"""

import gc
import os
import sys
from pathlib import Path

# One persistent compilation cache for the whole run, workers and subprocesses included
# (they inherit the environment). Every program is kept, however fast it compiled: with
# the fast-compile flags below a step at test size compiles in about 1.5 s, but the suite
# also runs code op by op (eager steps, vmap without jit) and so compiles some 6,600
# one-primitive programs of under 0.1 s each (most under 50 ms), the same ones again in
# every worker and after every file's `jax.clear_caches`. Read back from the cache, an
# eager step of either environment at test size costs 2.6-3.4 s of CPU instead of 5.7-6.6
# s, and the whole suite 7 % less CPU and time (docs/benchmarks.md, "The test suite's time").
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR",
                      str(Path(__file__).resolve().parents[1] / ".pytest_cache" / "jax"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")

# Compiling is most of the suite's time and its shapes are tiny, so the CPU backend skips
# LLVM's expensive optimisations in tests (about 30 % less CPU on the throughput smoke
# test) and emits its fused kernels with the older elemental emitters rather than the
# fusion emitters (about 40 % less to compile a step, 25 % less a PPO training at test
# size). The programs compute the same things, only in less optimised machine code (a PPO
# run's metrics agree to float32 rounding). Each program's machine code is generated in one
# piece rather than split over threads (`parallel_codegen_split_count=1`): the workers
# already keep every core busy, and the split parts each repeat work (CPU of a cold run of
# test_benchmarks 169 -> 142 s). Appended to any XLA_FLAGS already set (e.g. a device
# count); subprocesses inherit it, and the tests that set their own device count add
# `FAST_COMPILE`.
FAST_COMPILE = ("--xla_backend_optimization_level=0", "--xla_llvm_disable_expensive_passes=true",
                "--xla_cpu_use_fusion_emitters=false", "--xla_cpu_parallel_codegen_split_count=1")
os.environ["XLA_FLAGS"] = " ".join(
    [os.environ.get("XLA_FLAGS", "")]
    + [f for f in FAST_COMPILE if f.split("=")[0] not in os.environ.get("XLA_FLAGS", "")]).strip()

import jax  # noqa: E402  (after the cache settings it reads)
import pytest  # noqa: E402

jax.config.update("jax_compilation_cache_dir", os.environ["JAX_COMPILATION_CACHE_DIR"])
jax.config.update("jax_persistent_cache_min_compile_time_secs",
                  float(os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"]))

import vte

SMALL = vte.EnvParams(num_nodes=8, queue_len=4, num_sites=2, slots_per_node=4, episode_len=6)


def pytest_xdist_auto_num_workers(config):
    """`-n auto`: with the slow tests, one worker per core and one more (at most 4,
    `--maxprocesses`): a worker whose test waits on a subprocess (examples, several
    devices, the server) leaves its core to the extra one. On 2 cores, every test: 577 s
    with 3 workers, 604 s with 2. The quick suite (`-m "not slow"`, the default) has
    almost no such test, and one worker per core runs it faster: 117 s against 130 s."""
    cores = os.cpu_count() or 1
    quick = " ".join((config.getoption("markexpr") or "").split()) == "not slow"
    return cores if quick else cores + 1


# The longest files (each a few minutes of one worker in CI), started first so that the
# short ones fill the end of the run on every worker; the others follow in their order.
# xdist's own order is by the number of tests (`--no-loadscope-reorder` in addopts), which
# left the few-test, long files (the examples, the README, several devices) to the end.
LONGEST_FIRST = ("test_benchmarks.py", "test_examples_torch.py", "test_contract.py",
                 "test_train.py", "test_examples.py",
                 "test_env.py", "test_adapters.py", "test_train_distributed.py", "test_serve.py",
                 "test_readme.py", "test_render.py", "test_train_openb.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))   # stable: files stay whole


@pytest.fixture(scope="module", autouse=True)
def _drop_compiled_programs_after_each_file():
    yield
    jax.clear_caches()
    run = sys.modules.get("vte.train.run")
    if run is not None:
        run.clear_compiled()
    gc.collect()


@pytest.fixture(scope="session")
def params():
    return SMALL


@pytest.fixture(scope="session")
def jit_step():
    return jax.jit(vte.step)


@pytest.fixture(scope="session")
def jit_reset():
    return jax.jit(vte.reset)


def finite_tree(tree) -> bool:
    """True when every floating leaf of `tree` is finite."""
    import jax.numpy as jnp
    leaves = jax.tree_util.tree_leaves(tree)
    return all(bool(jnp.all(jnp.isfinite(x))) for x in leaves
               if jnp.issubdtype(jnp.asarray(x).dtype, jnp.floating))
