import sys
from pathlib import Path

# The run-overhead benchmark starts a real daemon with the integration tests' harness.
sys.path.insert(0, str(Path(__file__).parents[1] / "integration"))
