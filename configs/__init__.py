"""governor's systemd units, example config and scenarios, installed as package data (install-systemd reads them)."""
