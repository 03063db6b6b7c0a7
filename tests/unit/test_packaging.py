"""pyproject's explicit package list names every package of the source, so a wheel ships them
all (a package left out builds, or fails to build, only where it is installed)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_directory_is_listed_in_pyproject():
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    where = {"governor": ROOT / "governor", **{name: ROOT / path for name, path in setuptools["package-dir"].items()}}
    found = set(where)  # governor itself has no __init__.py: the installed package is made of these
    for package, directory in where.items():
        found |= {".".join((package, *init.parent.relative_to(directory).parts))
                  for init in directory.rglob("__init__.py") if "__pycache__" not in init.parts}
    assert sorted(setuptools["packages"]) == sorted(found)
