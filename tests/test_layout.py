"""The architecture the registry promises, checked on the source: no import cycle in
`vte/`, `train/` and `benchmarks/`; no shared module of `vte/` importing an environment
package (`vte.cluster`, `vte.openb`: they are reached through the registry), nor one
environment another; `vte/__init__.py` importing nothing of vte; no tool comparing an
environment's name (it asks the registry instead); and the layering of `vte/` and
`train/` drawn as parts (each file or folder directly under them), each above what it
imports: at most 8 layers and at most one import running back up
(`python tests/test_layout.py` prints the layers)."""

from __future__ import annotations

import ast
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("vte", "train", "benchmarks")
ENV_PACKAGES = ("vte.cluster", "vte.openb")   # one package per environment
MAX_LAYERS, MAX_BACK = 8, 1
ENV_NAMES = ("synthetic", "openb", "Cluster-v0", "OpenB-v0")
# Where a name may be compared: the registrations themselves and the registry.
REGISTRATIONS = ("vte/registry.py", "vte/cluster/registration.py", "vte/openb/registration.py")


def modules(packages=PACKAGES) -> dict[str, str]:
    out = {}
    for pkg in packages:
        for d, _, files in os.walk(os.path.join(ROOT, pkg)):
            for f in files:
                if f.endswith(".py"):
                    path = os.path.join(d, f)
                    name = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                    out[name.removesuffix(".__init__")] = path
    return out


def import_graph(packages=PACKAGES) -> dict[str, set[str]]:
    """Module -> the modules of `packages` it imports (at any depth of its code)."""
    mods = modules(packages)
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


def _env_of(module: str) -> str | None:
    return next((p for p in ENV_PACKAGES if module == p or module.startswith(p + ".")), None)


def test_no_core_module_imports_an_environment_package():
    """Shared modules of vte/ (the trainers included) reach environments by the registry."""
    graph = import_graph()
    core = [m for m in graph if m.startswith("vte") and _env_of(m) is None]
    bad = sorted((m, n) for m in core for n in graph[m] if _env_of(n) is not None)
    assert bad == []


def test_no_environment_imports_another():
    graph = import_graph()
    bad = sorted((m, n) for m in graph for n in graph[m]
                 if _env_of(m) is not None and _env_of(n) not in (None, _env_of(m)))
    assert bad == []


def test_the_package_imports_nothing_of_itself():
    """`import vte` runs no other module of vte (every name is a lazy attribute)."""
    assert import_graph()["vte"] == set()


def part(module: str) -> str:
    """The part of a module: the file or folder directly under vte/ (or train/) holding it;
    `vte` (and `train`) themselves are their __init__."""
    names = module.split(".")
    return ".".join(names[:2])


def parts_graph(packages=("vte", "train")) -> dict[str, set[str]]:
    """Part -> the parts it imports. Every part of a package also stands on the package's
    `__init__`, which Python runs first."""
    out: dict[str, set[str]] = {}
    for m, deps in import_graph(packages).items():
        a = part(m)
        out.setdefault(a, set())
        if a != m.split(".")[0]:
            out[a].add(m.split(".")[0])
        out[a].update(part(n) for n in deps if part(n) != a)
    return out


def layering(graph: dict[str, set[str]]) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """(layer of each part, the imports running back up): a depth-first walk in name order
    marks the imports that close a circle as running back up; the others place each part
    one layer above the highest it imports (layer 0: it imports nothing)."""
    state, back = {}, []

    def walk(u):
        state[u] = 1
        for v in sorted(graph[u]):
            if state.get(v) == 1:
                back.append((u, v))
            elif v not in state:
                walk(v)
        state[u] = 2

    for u in sorted(graph):
        if u not in state:
            walk(u)
    down = {u: graph[u] - {v for w, v in back if w == u} for u in graph}
    layer: dict[str, int] = {}

    def height(u):
        if u not in layer:
            layer[u] = 1 + max((height(v) for v in down[u]), default=-1)
        return layer[u]

    for u in graph:
        height(u)
    return layer, back


def test_the_layering_finds_layers_and_a_back_edge():
    layer, back = layering({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()})
    assert back == [("c", "a")] and layer == {"a": 2, "b": 1, "c": 0, "d": 0}


def test_vte_and_train_stand_on_few_layers_with_at_most_one_import_back_up(capsys):
    layer, back = layering(parts_graph())
    layers = max(layer.values()) + 1
    with capsys.disabled():
        print(f"\n{len(layer)} parts on {layers} layers, {len(back)} import(s) running back "
              f"up: {back}")
    assert layers <= MAX_LAYERS and len(back) <= MAX_BACK, (layers, back)


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


if __name__ == "__main__":
    layer, back = layering(parts_graph())
    for k in range(max(layer.values()) + 1):
        print(k, " ".join(sorted(p for p in layer if layer[p] == k)))
    print(f"{len(layer)} parts on {max(layer.values()) + 1} layers; running back up: {back}")
