"""The zoo: trained schedulers shipped inside the package, each loadable by a short name.

    import vte
    policy = vte.load_policy("openb-evidence")        # or "zoo:openb-evidence"
    vte.zoo.names()                 # ['cluster-imitate', 'openb-agnostic', 'openb-evidence']
    print(vte.zoo.card("openb-evidence"))             # what it is, its figures, its limits

Each scheduler is a folder `vte/zoo/NAME/` laid out as a training run directory
(`vte.checkpoint`): `config.json`, `checksums.json` and the one checkpoint it ships, plus
`CARD.md` (written by `python -m vte.zoo.card NAME` from the result files, never by hand).

`zoo:NAME` names it wherever a run directory is read (`vte.load_policy`,
`python -m vte.openb --policies fgd,zoo:openb-evidence`, `python -m vte.render --policy`,
`--init-from`, `plan:zoo:NAME`, `zoo:NAME@STEP`); a bare `NAME` also does, unless a
file or folder of that name exists where it is read (that path wins). `resolve` is the one
place a name becomes a path: `vte.checkpoint.split_step` calls it.

This module imports nothing heavy (no jax): `vte.checkpoint` asks it about every run name.
"""

from __future__ import annotations

import os

PREFIX = "zoo:"
ROOT = os.path.dirname(os.path.abspath(__file__))
CARD_FILE = "CARD.md"
CONFIG_FILE = "config.json"        # vte.checkpoint.CONFIG_FILE (not imported: that needs orbax)


def names() -> list[str]:
    """The zoo's schedulers, sorted: every folder of `vte/zoo/` holding a `config.json`."""
    return sorted(name for name in os.listdir(ROOT)
                  if os.path.isfile(os.path.join(ROOT, name, CONFIG_FILE)))


def _unknown(name: str) -> ValueError:
    return ValueError(f"{name!r} is not a scheduler of the zoo: allowed "
                      f"{', '.join(names())} (vte.zoo.names()), bare or as zoo:NAME")


def path(name: str) -> str:
    """The folder of the zoo's scheduler `name` (`NAME` or `zoo:NAME`): a run directory.
    ValueError naming it and listing the zoo's names when there is none of that name."""
    bare = name[len(PREFIX):] if name.startswith(PREFIX) else name
    if bare not in names():
        raise _unknown(name)
    return os.path.join(ROOT, bare)


def card(name: str) -> str:
    """The card of the zoo's scheduler `name` (`NAME` or `zoo:NAME`): its CARD.md text.
    (Once `vte.zoo.card`, the module that writes cards, is imported, `vte.zoo.card` is that
    module, callable the same way.)"""
    with open(os.path.join(path(name), CARD_FILE), encoding="utf-8") as f:
        return f.read()


_read_card = card        # what the module vte.zoo.card calls when called as vte.zoo.card(name)


def resolve(name: str) -> str:
    """The path a run name means: `zoo:NAME` and `zoo:NAME@STEP` the zoo's folder (with
    `@STEP` kept for `vte.checkpoint.split_step`); a bare `NAME` or `NAME@STEP` the same
    when no file or folder of that name (or of NAME) exists here; anything else unchanged.
    ValueError naming it and listing the zoo's names for `zoo:` before an unknown name."""
    if name.startswith(PREFIX):
        head, sep, tail = name[len(PREFIX):].partition("@")
        if head not in names():
            raise _unknown(name)
        return path(head) + sep + tail
    if not name or os.path.exists(name):
        return name
    head, sep, tail = name.partition("@")
    if head in names() and not os.path.exists(head) and (not sep or tail.isdigit()):
        return path(head) + sep + tail
    return name


__all__ = ["names", "path", "card", "resolve", "PREFIX", "ROOT"]
