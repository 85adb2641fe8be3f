"""Several hosts: `jax.distributed.initialize` from the training scripts' flags.

    # on host 0 and host 1, the same command but for --process-id:
    python train/ppo.py --coordinator 10.0.0.1:1234 --num-processes 2 --process-id 0

The flags default to the environment variables `JAX_COORDINATOR_ADDRESS`,
`JAX_NUM_PROCESSES` and `JAX_PROCESS_ID`; in an `srun` step or an `mpirun` launch of more
than one task, `jax.distributed.initialize()` finds all three itself. With none of these,
nothing is initialised: a single process.

`jax.distributed.initialize` must run before anything starts JAX's backend, so every
command line of a trainer (`train/ppo.py`, `train/imitate.py`, `vte-ppo`, `vte-imitate`,
`python -m vte.train.ppo`) starts with `launch`, which initialises from the flags and only
then imports the trainer. This module imports no part of `vte`.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Sequence

import jax

ENV = {"coordinator": "JAX_COORDINATOR_ADDRESS", "num_processes": "JAX_NUM_PROCESSES",
       "process_id": "JAX_PROCESS_ID"}
# Tasks of an `srun` step or an `mpirun` launch: with more than one, every task is a
# process of the run, and `jax.distributed.initialize()` detects the settings by itself.
_LAUNCHERS = ("SLURM_STEP_NUM_TASKS", "OMPI_COMM_WORLD_SIZE")


def add_flags(group) -> None:
    group.add_argument("--coordinator", metavar="HOST:PORT",
                       default=argparse.SUPPRESS,
                       help="address of process 0 for jax.distributed.initialize "
                            f"(default: ${ENV['coordinator']}); every process runs the "
                            "same command")
    group.add_argument("--num-processes", type=int, metavar="P",
                       default=argparse.SUPPRESS,
                       help=f"processes (hosts) in the run (default: ${ENV['num_processes']})")
    group.add_argument("--process-id", type=int, metavar="I",
                       default=argparse.SUPPRESS,
                       help=f"this process, 0..P-1 (default: ${ENV['process_id']})")


def _launched() -> bool:
    return any(os.environ.get(v, "1").strip().isdigit() and int(os.environ[v]) > 1
               for v in _LAUNCHERS if v in os.environ)


def requested(args: argparse.Namespace) -> dict | None:
    """The arguments of `jax.distributed.initialize` that the flags and the environment
    ask for, or None for a single process."""
    given = {}
    for name, var in ENV.items():
        value = getattr(args, name, None)   # absent when not given
        if value is None and os.environ.get(var):
            value = os.environ[var]
            if name != "coordinator":
                try:
                    value = int(value)
                except ValueError:
                    raise ValueError(f"${var}={value!r} is invalid: allowed an integer") from None
        if value is not None:
            given[name] = value
    if given or _launched():
        return given   # under Slurm or Open MPI, jax detects what is not given
    return None


def check(given: dict) -> None:
    """ValueError naming the flag when the values cannot describe a run of processes."""
    if not _launched():
        for name, var in ENV.items():
            if name not in given:
                flag = "--" + name.replace("_", "-")
                raise ValueError(f"{flag} is missing: several processes need --coordinator, "
                                 "--num-processes and --process-id (or $" +
                                 ", $".join(ENV.values()) + ")")
    n, i = given.get("num_processes"), given.get("process_id")
    if n is not None and n < 1:
        raise ValueError(f"--num-processes={n} is invalid: allowed an integer >= 1")
    if i is not None and n is not None and not 0 <= i < n:
        raise ValueError(f"--process-id={i} is invalid: allowed 0..{n - 1} "
                         f"(--num-processes={n})")
    if i is not None and i < 0:
        raise ValueError(f"--process-id={i} is invalid: allowed an integer >= 0")
    address = given.get("coordinator")
    if address is not None:
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"--coordinator={address!r} is invalid: allowed HOST:PORT")


def initialize(args: argparse.Namespace | Sequence[str] | None) -> bool:
    """Call `jax.distributed.initialize` when the flags or the environment ask for several
    processes (once; later calls do nothing). `args`: parsed flags, or a command line to
    read them from (other flags are ignored). Returns whether JAX runs distributed.

    Raises ValueError for bad values, RuntimeError when JAX's backend already started."""
    if not isinstance(args, argparse.Namespace):
        parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
        add_flags(parser)
        args, _ = parser.parse_known_args(args)
    given = requested(args)
    if given is None:
        return jax.distributed.is_initialized()
    check(given)
    if jax.distributed.is_initialized():
        return True
    try:
        jax.distributed.initialize(coordinator_address=given.get("coordinator"),
                                   num_processes=given.get("num_processes"),
                                   process_id=given.get("process_id"))
    except RuntimeError as err:
        raise RuntimeError(f"{err} Several processes: run the training script itself "
                           "(python train/ppo.py ...), not main() from a process that "
                           "already used JAX.") from None
    return True


def initialize_from_command_line() -> None:
    """`initialize(sys.argv[1:])` for a script, before it imports `vte`; a bad value is
    left for the script's flag parser to report."""
    try:
        initialize(sys.argv[1:])
    except ValueError:
        pass


def launch(module: str) -> None:
    """A trainer from the command line: `jax.distributed.initialize` from its flags first
    (`initialize_from_command_line`), then `module`'s `main()`."""
    initialize_from_command_line()
    importlib.import_module(module).main()


def ppo() -> None:
    """The `vte-ppo` command: `python train/ppo.py`."""
    launch("vte.train.ppo")


def imitate() -> None:
    """The `vte-imitate` command: `python train/imitate.py`."""
    launch("vte.train.imitate")
