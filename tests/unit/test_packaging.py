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


def test_every_file_of_configs_is_package_data():
    # configs/ installs as governor.configs: a file its globs miss (configs/notify/'s commands)
    # is in the checkout and absent where governor is installed.
    from fnmatch import fnmatch

    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["governor.configs"]
    files = [path.relative_to(ROOT / "configs").as_posix() for path in (ROOT / "configs").rglob("*")
             if path.is_file() and path.suffix not in (".py", ".pyc")]
    assert [name for name in files if not any(fnmatch(name, glob) for glob in globs)] == []
