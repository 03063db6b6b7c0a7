"""cgroups/ (installed as governor.cgroups) is the lowest layer (issue 12): its modules import
nothing else of governor."""

import subprocess
import sys
from pathlib import Path

CGROUPS = Path(__file__).resolve().parents[2] / "cgroups"


def test_the_cgroup_drivers_import_nothing_from_governor():
    modules = sorted(f"governor.cgroups.{path.stem}" for path in CGROUPS.glob("*.py") if path.stem != "__init__")
    probe = (f"import sys\nfor name in {modules!r}:\n    __import__(name)\n"
             "print(sorted(m for m in sys.modules if m.startswith('governor.') and not m.startswith('governor.cgroups')))")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]", f"cgroups/ pulls in {loaded.strip()}"
