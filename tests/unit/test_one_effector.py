"""One effector (issue 45; DESIGN.md §4): above ``cgroups/``, only :mod:`governor.daemon.effector`
changes a cgroup. Every other module decides and hands the effector what to do: none calls a
write of the hierarchy or of a driver (limits, make, remove, move, kill, reset), none imports
``cgroups/``'s write functions, and none reaches past ``Hierarchy`` to its ``.driver``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EFFECTOR = ROOT / "governor" / "daemon" / "effector.py"
# Above cgroups/: every module of the daemon, the core, the host probes and the cli.
ABOVE = sorted(path for directory in (ROOT / "governor", ROOT / "cli") for path in directory.rglob("*.py")
               if path != EFFECTOR)
# The methods of Hierarchy, Driver and SliceDriver that change the kernel's (or systemd's) state.
WRITES = {"apply", "apply_plan", "prepare", "create", "enable_controllers", "delegate_root", "remove", "forget",
          "move", "rejoin", "kill", "release_login", "reset"}
# What the receivers of those calls are called wherever they are held.
HOLDERS = {"hierarchy", "driver", "slices"}
# cgroups/'s functions that write a cgroup file, make or remove a cgroup directory, or move a process.
WRITE_FUNCTIONS = {"write_file", "make_dir", "remove_dir", "put_guard", "take_guard", "attach_guard", "detach_guards",
                   "guard_v1", "unguard_v1", "attach_deny_program", "move_self_to_leaf"}


def _name(node: ast.expr) -> str | None:
    """The last name of a receiver: ``self.hierarchy`` → ``hierarchy``, ``driver`` → ``driver``."""
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return None


def _writes(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in WRITES \
                and _name(node.func.value) in HOLDERS:
            found.append(f"line {node.lineno}: {ast.unparse(node.func)}()")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("governor.cgroups"):
            found += [f"line {node.lineno}: imports {alias.name} from {node.module}" for alias in node.names
                      if alias.name in WRITE_FUNCTIONS]
        elif isinstance(node, ast.Attribute) and node.attr == "driver" and _name(node.value) == "hierarchy":
            found.append(f"line {node.lineno}: {ast.unparse(node)} (reaches past Hierarchy)")
    return found


@pytest.mark.parametrize("path", ABOVE, ids=lambda path: str(path.relative_to(ROOT)))
def test_no_module_but_the_effector_writes_a_cgroup(path):
    assert _writes(path) == [], f"{path.relative_to(ROOT)} changes a cgroup itself: hand it to governor.daemon.effector"


def test_the_check_sees_a_write(tmp_path):
    """The check finds each kind of write it is there to refuse (it would pass on nothing)."""
    module = tmp_path / "stage.py"
    module.write_text("from governor.cgroups.device_guard import put_guard\n"
                      "def f(self, driver):\n"
                      "    self.hierarchy.apply('a', None)\n"
                      "    driver.remove('a')\n"
                      "    self.hierarchy.driver.kill('a')\n")
    assert len(_writes(module)) == 5  # the import, apply, remove, kill, and .driver
    assert _writes(EFFECTOR) != []  # the effector itself writes
