"""The architecture the registry promises, checked on the source: no import cycle in
`vte/` and `train/`, no core module importing an environment package, and no tool
comparing an environment's name (it asks the registry instead)."""

from __future__ import annotations

import ast
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("vte", "train")
ENV_PACKAGES = ("vte.openb",)              # one folder per environment with its own package
ENV_NAMES = ("synthetic", "openb", "Cluster-v0", "OpenB-v0")
# Where a name may be compared: the registrations themselves and the registry.
REGISTRATIONS = ("vte/registry.py", "vte/cluster/registration.py", "vte/openb/registration.py")


def modules() -> dict[str, str]:
    out = {}
    for pkg in PACKAGES:
        for d, _, files in os.walk(os.path.join(ROOT, pkg)):
            for f in files:
                if f.endswith(".py"):
                    path = os.path.join(d, f)
                    name = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                    out[name.removesuffix(".__init__")] = path
    return out


def import_graph() -> dict[str, set[str]]:
    """Module -> the modules of vte/train it imports (at any depth of its code)."""
    mods = modules()
    graph = {m: set() for m in mods}
    for m, path in mods.items():
        with open(path) as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                subs = [f"{node.module}.{a.name}" for a in node.names]
                names = [s for s in subs if s in mods]
                if len(names) < len(subs):
                    names.append(node.module)
            else:
                continue
            graph[m].update(n for n in names if n in mods and n != m)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle():
    assert cycles(import_graph()) == []


def test_the_cycle_finder_finds_one():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_core_module_imports_an_environment_package():
    graph = import_graph()
    core = [m for m in graph if m.startswith("vte")
            and not any(m == p or m.startswith(p + ".") for p in ENV_PACKAGES)]
    bad = sorted((m, n) for m in core for n in graph[m]
                 if any(n == p or n.startswith(p + ".") for p in ENV_PACKAGES))
    assert bad == []


def test_no_environment_name_is_compared_outside_the_registrations():
    names = "|".join(re.escape(n) for n in ENV_NAMES)
    pattern = re.compile(rf"""(==|!=)\s*["']({names})["']|["']({names})["']\s*(==|!=|in\b)""")
    found = []
    for pkg in PACKAGES + ("benchmarks",):
        for d, _, files in os.walk(os.path.join(ROOT, pkg)):
            for f in files:
                path = os.path.join(d, f)
                rel = os.path.relpath(path, ROOT)
                if not f.endswith(".py") or rel in REGISTRATIONS:
                    continue
                with open(path) as fh:
                    for i, line in enumerate(fh, 1):
                        if pattern.search(line) or "is_openb(" in line:
                            found.append(f"{rel}:{i}: {line.strip()}")
    assert found == []
