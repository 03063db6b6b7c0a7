"""The architecture as the import graph must keep it (docs/design.md, "Code map"): layers from
the kernel up, each importing only from its own layer and those below, and no circle of
imports anywhere. Imports made only for type checking and inside functions count too: a
circle a lazy import hides is still a circle."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Where each installed package's source is (pyproject's package-dir).
SOURCES = {"governor": ROOT / "governor", "governor.cgroups": ROOT / "cgroups", "governor.cli": ROOT / "cli"}
# Bottom to top: a module may import from its own layer and those before it.
LAYERS = ("governor.cgroups", "governor.errors", "governor.config", "governor.core", "governor.host",
          "governor.wire", "governor.daemon", "governor.cli")
MAX_LINES = 400


def _modules() -> dict[str, Path]:
    found = {}
    for package, directory in SOURCES.items():
        for path in directory.rglob("*.py"):
            parts = path.relative_to(directory).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            name = ".".join((package, *parts))
            if package == "governor" and name.startswith(("governor.cgroups", "governor.cli")):
                continue  # not there in a checkout; listed under their own directories
            found[name] = path
    return found


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """The modules of ours that ``name`` imports (a ``from package import module`` names the module)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            base = node.module
            if node.level:  # relative: from the importing module's package
                package = name if path.name == "__init__.py" else name.rpartition(".")[0]
                for _ in range(node.level - 1):
                    package = package.rpartition(".")[0]
                base = f"{package}.{node.module}"
            submodules = {f"{base}.{alias.name}" for alias in node.names} & set(MODULES)
            found.update(submodules)
            if len(submodules) < len(node.names):  # a name the package itself defines
                found.add(base)
    return {module for module in found if module in MODULES and module != name}


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _layer(module: str) -> int:
    matches = [i for i, layer in enumerate(LAYERS) if module == layer or module.startswith(layer + ".")]
    return max(matches, default=-1)  # governor.cgroups and governor.cli sit under "governor"


def test_every_module_has_a_layer():
    assert [m for m in MODULES if m != "governor" and _layer(m) < 0] == []


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_import_runs_back_up(module):
    upward = sorted(target for target in GRAPH[module] if _layer(target) > _layer(module))
    assert upward == [], f"{module} ({LAYERS[_layer(module)]}) imports from a layer above it"


def test_no_circle_of_imports():
    # Tarjan's strongly connected components: any of more than one module is a circle.
    index, low, stack, on_stack, circles = {}, {}, [], set(), []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in GRAPH[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for module in sorted(GRAPH):
        if module not in index:
            visit(module)
    assert circles == []


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_over_400_lines(module):
    lines = len(MODULES[module].read_text().splitlines())
    assert lines <= MAX_LINES, f"{MODULES[module].relative_to(ROOT)}: {lines} lines; split it along its jobs"


def _version_compared(path: Path) -> list[int]:
    """The lines where ``path`` compares something with "v1" or "v2" (==, !=, in)."""
    def names_a_version(node: ast.AST) -> bool:
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return any(map(names_a_version, node.elts))
        return isinstance(node, ast.Constant) and node.value in ("v1", "v2")

    return [node.lineno for node in ast.walk(ast.parse(path.read_text(), str(path)))
            if isinstance(node, ast.Compare) and any(map(names_a_version, [node.left, *node.comparators]))]


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _layer(m) != 0))
def test_the_cgroup_version_is_decided_in_cgroups_only(module):
    """Issue 45: a layer above the drivers asks governor.cgroups.versions what this host's
    cgroup version gives, and never compares the mode itself."""
    assert _version_compared(MODULES[module]) == [], (
        f"{MODULES[module].relative_to(ROOT)} compares the cgroup mode; ask governor.cgroups.versions")


def test_the_cli_never_reaches_the_cgroup_drivers():
    """Issue 45, point 5: the cli talks to the daemon through governor.wire and reads the host
    through governor.host (a view reads a status's limits through governor.wire.limit_files,
    check-config the host through governor.host.host_check, run its task's memory through
    governor.host.task_memory, uninstall its leftovers through governor.host.uninstall_leftovers)."""
    reaching = sorted(module for module in MODULES if _layer(module) == LAYERS.index("governor.cli")
                      and any(_layer(target) == 0 for target in GRAPH[module]))
    assert reaching == [], f"cli modules importing governor.cgroups: {reaching}"
