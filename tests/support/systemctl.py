"""A stand-in for ``systemctl``, the runner :class:`~governor.cgroups.systemd.SliceDriver` calls."""

import subprocess


class Systemctl:
    """Records each systemctl command line; ``refuse`` makes it fail as systemctl does."""

    def __init__(self):
        self.calls: list[list[str]] = []
        self.refuse = False

    def __call__(self, argv):
        self.calls.append(list(argv))
        if self.refuse:
            return subprocess.CompletedProcess(argv, 1, "", "Failed to set unit properties: Access denied\n")
        return subprocess.CompletedProcess(argv, 0, "", "")

    def properties(self) -> list[tuple[str, ...]]:
        """Per ``systemctl set-property --runtime UNIT ...`` call: the unit, then its assignments."""
        return [tuple(call[4:]) for call in self.calls]
