"""Typed, checked configuration sections, declared once and shared by research code, the
command line and a run's `config.json`.

    @dataclass(frozen=True)
    class ClusterConfig:
        num_nodes: int = option(64, "nodes per cluster", low=1)

        def __post_init__(self):
            check_fields(self)

A section is a frozen dataclass whose fields are `option`s: a default, a help line and the
values it allows (`low` <= v <= `high`, or one of `choices`). `check_fields` checks every
value (ValueError naming the flag, the bad value and what is allowed, `vte.registry.
flag_error`) and turns lists into the tuples the fields are; `add_flags` turns the fields
into `argparse` flags (`num_nodes` -> `--num-nodes`, booleans get `--no-...`);
`to_json` is the section as `config.json` holds it. The trainers' configuration
(`vte.train.config`), each environment's section (its registration's `config`) and the
OpenB planner's settings (`vte.openb.lab.lookahead.PlanSettings`) are such sections.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import warnings
from typing import Any

from vte.registry import flag_error

NOT_GIVEN = argparse.SUPPRESS    # a flag's default where only the flags given are wanted


def option(default, help: str, *, low=None, high=None, group: str = "training",
           choices: tuple | None = None, metavar=None, strict: bool = False):
    """A configuration field: its default, help and allowed values (`low` <= v <= `high`,
    or `low` < v with `strict`, or one of `choices`); `group` is its section of `--help`."""
    return dataclasses.field(default=default, metadata={
        "help": help, "low": low, "high": high, "group": group, "choices": choices,
        "metavar": metavar, "strict": strict})


def base_type(annotation) -> type:
    """int, float, bool, str or tuple of a field's annotation (a string under
    `from __future__ import annotations`)."""
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
    for name, kind in (("tuple", tuple), ("bool", bool), ("int", int), ("float", float)):
        if text.startswith(name):
            return kind
    return str


def flag_name(name: str, prefix: str = "") -> str:
    return "--" + (prefix + name).replace("_", "-")


def check_field(obj, f: dataclasses.Field, prefix: str = "") -> None:
    """Raise `flag_error` (naming `prefix + f.name`) unless the field's value is allowed."""
    v, meta = getattr(obj, f.name), f.metadata
    kind = base_type(f.type)
    if v is None and f.default is None:
        return
    if kind is bool:
        ok, allowed = isinstance(v, bool), "True or False"
    elif kind is int:
        ok, allowed = isinstance(v, int) and not isinstance(v, bool), "an integer"
    elif kind is float:
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        allowed = "a finite number"
    elif kind is tuple:
        ok = (isinstance(v, (tuple, list)) and len(v) == len(f.default)
              and all(isinstance(x, (int, float)) and not isinstance(x, bool)
                      and math.isfinite(x) for x in v))
        allowed = f"{len(f.default)} finite numbers"
    else:
        ok, allowed = isinstance(v, str), "a string"
    lo, hi, choices = meta.get("low"), meta.get("high"), meta.get("choices")
    if ok and choices is not None:
        ok, allowed = v in choices, "one of " + ", ".join(choices)
    if ok and lo is not None and hi is not None:
        ok = lo <= v <= hi
        allowed = ("an integer in [0, 2**32)" if f.name == "seed" and kind is int
                   else f"{'an integer' if kind is int else 'a number'} in [{lo}, {hi}]")
    elif ok and lo is not None:
        strict = meta.get("strict", False)
        ok = v > lo if strict else v >= lo
        word = "an integer" if kind is int else "a finite number"
        allowed = f"{word} {'>' if strict else '>='} {lo}"
    if not ok:
        raise flag_error(prefix + f.name, v, allowed)


def check_fields(obj, prefix: str = "") -> None:
    """Check every field of a frozen section and store tuple fields as tuples of floats
    (a list from JSON compares equal to its round trip)."""
    for f in dataclasses.fields(obj):
        check_field(obj, f, prefix)
        if base_type(f.type) is tuple:
            object.__setattr__(obj, f.name, tuple(float(x) for x in getattr(obj, f.name)))


def add_flags(cls, group, prefix: str = "", given_only: bool = False,
              fields: tuple | None = None) -> None:
    """One flag per field of `cls` in the argparse `group`, named `--PREFIX-NAME`, dest
    `PREFIX_NAME`. `given_only`: the flags not given stay out of the parsed namespace
    (their default is shown in the help instead)."""
    for f in dataclasses.fields(cls):
        if fields is not None and f.name not in fields:
            continue
        meta, kind = f.metadata, base_type(f.type)
        default = list(f.default) if kind is tuple else f.default
        help_text = meta["help"] + (f" (default: {default})" if given_only else "")
        opts: dict[str, Any] = {"default": NOT_GIVEN if given_only else default,
                                "help": help_text, "dest": prefix + f.name}
        if kind is bool:
            opts["action"] = argparse.BooleanOptionalAction
        elif kind is tuple:
            opts.update(type=float, nargs=len(f.default))
        elif kind in (int, float):
            opts["type"] = kind
        if meta.get("choices"):
            opts["choices"] = meta["choices"]
        if meta.get("metavar"):
            opts["metavar"] = meta["metavar"]
        group.add_argument(flag_name(f.name, prefix), **opts)


def given(cls, namespace: argparse.Namespace, prefix: str = "") -> dict:
    """The fields of `cls` a parsed namespace holds (dest `PREFIX_NAME`), by field name."""
    out = {}
    for f in dataclasses.fields(cls):
        if hasattr(namespace, prefix + f.name):
            v = getattr(namespace, prefix + f.name)
            out[f.name] = tuple(v) if isinstance(v, list) else v
    return out


def to_json(obj) -> dict:
    """A section as `config.json` holds it (tuples as lists)."""
    return {f.name: (list(v) if isinstance(v, tuple) else v)
            for f in dataclasses.fields(obj) for v in (getattr(obj, f.name),)}


def from_json(cls, values: dict, saved_before: dict | None = None) -> Any:
    """The section of a `config.json` dict; fields it lacks take `saved_before` (the value
    runs saved before the field existed used), else their default; unknown keys raise
    ValueError naming them."""
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - names)
    if unknown:
        raise ValueError(f"{unknown} are not fields of {cls.__name__}: allowed {sorted(names)}")
    kwargs = {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}
    for name in names - set(kwargs):
        if saved_before and name in saved_before:
            kwargs[name] = saved_before[name]
    return cls(**kwargs)


class RenamedWarning(UserWarning):
    """An old flag or an old config.json key was read under its new name."""


def note(message: str) -> None:
    """Say that an old name was read under its new one (once per place)."""
    warnings.warn(message, RenamedWarning, stacklevel=4)


def read_renamed(reg, values: dict, spell=lambda n: "--" + n.replace("_", "-")) -> dict:
    """`values` (name -> value) with each old name of the registration's section
    (`Registration.renamed`) read under its new one, a note each; `spell` writes a name as
    the user wrote it (`--trace` by default, `trace=`, `env.trace`). An old name given
    beside its new one raises a FlagError naming both. The one rule of the flags,
    `TrainConfig.of` and a saved run's config.json."""
    out = {}
    for name, value in values.items():
        new = reg.renamed.get(name)
        if new is None:
            out[name] = value
            continue
        if new in values:
            raise flag_error(name, value, f"not given with {spell(new)} (its new name with "
                             f"--env {reg.flag})", depends=(new,))
        note(f"{spell(name)} is {spell(new)} with --env {reg.flag} (renamed)")
        out[new] = value
    return out


def env_section(config: dict):
    """The environment section of a saved run's `config.json` dict, as its registration's
    `config` object: renamed keys read under their new names (`read_renamed`, with a
    note), keys of other environments (older files stored every environment's) dropped,
    keys added later taking the value those runs used (`Registration.defaults`)."""
    from vte import registry
    reg = registry.of_run(config)
    names = {f.name for f in dataclasses.fields(reg.config)}
    values = {k: v for k, v in config.get("env", {}).items()
              if k in names or k in reg.renamed}
    values = read_renamed(reg, values, lambda n: f"env.{n}")
    return from_json(reg.config, values, saved_before=reg.defaults)


__all__ = ["env_section", "read_renamed", "note", "RenamedWarning", "option", "check_fields", "check_field", "add_flags", "given", "to_json",
           "from_json", "base_type", "flag_name", "NOT_GIVEN"]
