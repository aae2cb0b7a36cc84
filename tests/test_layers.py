"""The layers import downwards, and the core names no plug-in, read from the source with ast.

Every import counts, those inside functions too.  A module's imports are resolved to the modules of
rl_core/ and models/ they load (``from rl_core import agents``: rl_core.agents; ``from rl_core.agents import
REPLAY``: rl_core.agents); the parent packages Python loads on the way are not counted as imports.
"""

from __future__ import annotations

import ast
import pathlib
import re

from rl_core.agents import AGENTS

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("rl_core", "models")
# The layers, top to bottom: a module imports its own layer's modules and those of the layers below, never above.
# Every module of rl_core/ and models/ is in one (rl_core's own __init__ aside).
LAYERS = (
    ("rl_core.runtime",),  # the processes and threads of a run
    ("rl_core.evaluation",),  # whole episodes with a frozen model
    ("rl_core.config",),  # the flags, their ranges, the env package interface, the sizing
    ("rl_core.agents",),
    ("models",),
    ("rl_core.losses",),
    ("rl_core.numerics",),  # distributions, normalizers, the optimizer, collectives
    ("rl_core.data",),  # the env spec, batches of unrolls, the replay
    ("rl_core.records", "rl_core.envs"),  # checkpoint files, the run directory and logs; what env packages share
    ("rl_core.errors", "rl_core.flag_types"),
)
# Below the runtime: none of these may import rl_core.runtime
LOWER = ("rl_core.agents", "rl_core.losses", "models", "rl_core.numerics.normalization", "rl_core.data.replay")
# The core that knows no agent and no env package by name
CORE = ("rl_core.runtime", "rl_core.config.sizing", "rl_core.config.flags")
AGENT_NAMES = (*AGENTS, "rnd")  # the registry's agents and the add-on
AGENT_SETS = ("REPLAY", "ON_POLICY", "SCALED_AGENTS")
NAMED = re.compile(r"(?<![\w])(" + "|".join(AGENT_NAMES) + r")(?![\w])|torchbeast_\w+")


def modules() -> dict[str, pathlib.Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = modules()


def in_layer(name: str, layers: tuple[str, ...]) -> bool:
    return any(name == layer or name.startswith(layer + ".") for layer in layers)


def resolve(name: str) -> str | None:
    """The module of rl_core/ or models/ that ``name`` (a module, or a name in one) belongs to."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports(name: str) -> set[str]:
    """The modules of rl_core/ and models/ that module ``name`` imports, anywhere in its code."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(resolve(alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            for alias in node.names:
                full = f"{base}.{alias.name}"
                found.add(full if full in MODULES else resolve(base))
    return found - {None, name}


GRAPH = {name: imports(name) for name in MODULES}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_import_graph_is_read():
    assert {"rl_core.agents.base", "rl_core.runtime.train", "models.qnet"} <= set(GRAPH)
    assert "models" in GRAPH["rl_core.agents.base"]  # (an import inside a function)
    assert "rl_core.losses.scan" in GRAPH["rl_core.losses.vtrace"]  # (a relative import)
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_lower_layers_never_import_the_runtime():
    upward = sorted(
        f"{name} imports {target}"
        for name, targets in GRAPH.items()
        if in_layer(name, LOWER)
        for target in targets
        if in_layer(target, ("rl_core.runtime",))
    )
    assert upward == []


def layer_of(name: str) -> int | None:
    return next((i for i, layer in enumerate(LAYERS) if in_layer(name, layer)), None)


def test_every_module_is_in_a_layer_and_imports_only_its_own_or_lower_ones():
    assert [name for name in MODULES if name != "rl_core" and layer_of(name) is None] == []
    upward = sorted(
        f"{name} imports {target}"
        for name, targets in GRAPH.items()
        if name != "rl_core"
        for target in targets
        if target != "rl_core" and layer_of(target) < layer_of(name)
    )
    assert upward == []


def test_no_import_cycle():
    assert cycles(GRAPH) == []


def core_mentions(name: str) -> list[str]:
    """Where a core module names an agent or an env package in a string constant (docstrings aside), or takes
    the agents' name sets."""
    path = MODULES[name]
    tree = ast.parse(path.read_text(), str(path))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    found = []
    for node in ast.walk(tree):
        where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            found += [f"{where} names {match.group(0)!r}" for match in NAMED.finditer(node.value)]
        elif isinstance(node, ast.ImportFrom):
            found += [f"{where} imports {alias.name}" for alias in node.names if alias.name in AGENT_SETS]
        elif isinstance(node, ast.Attribute) and node.attr in AGENT_SETS:
            found += [f"{where} reads {node.attr}"]
    return found


def test_the_core_names_no_agent_and_no_env_package():
    core = [name for name in MODULES if in_layer(name, CORE)]
    assert "rl_core.runtime.train" in core and "rl_core.config.sizing" in core and "rl_core.config.flags" in core
    assert [m for name in sorted(core) for m in core_mentions(name)] == []
