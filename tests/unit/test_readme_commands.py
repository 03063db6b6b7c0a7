"""Every ``governor …`` line in the README's command blocks parses with the CLI as it is (click's
own parser, no daemon), and every ``governor run`` of a section that describes a host fits that
host (issue 44.5: the tour's ``--cpus 2 --memory 4G`` beside "a 2-core host, 1.5 cores … governed"
was refused: ``demand cpu = 2 cores exceeds the capacity of 1.75 cores``)."""

from __future__ import annotations

import shlex
from pathlib import Path

import click
import pytest

from governor.cli.main import main
from governor.config.units import parse_quantity

README = Path(__file__).resolve().parents[2] / "README.md"
# The hosts the README's sections describe: what a task there may declare at most.
HOSTS = {"## A five-minute tour": {"cpus": 1.5, "memory": 1 << 30},  # "a 2-core host, 1.5 cores and 1G governed"
         "## GPU hosts": {"cpus": 64, "memory": 256 << 30, "gpus": 4}}  # "a 64-core, 256G, 4-GPU workstation"


def _commands() -> list[tuple[str, list[str]]]:
    """(section heading, argv after ``governor``) of each governor line in a sh/console block."""
    found, section, fence = [], "", None
    for line in README.read_text().splitlines():
        if line.startswith("```"):
            fence = line[3:] if fence is None else None
            continue
        if fence is None:
            section = line if line.startswith("## ") else section
            continue
        if fence not in ("sh", "console"):
            continue
        words = shlex.split(line.removeprefix("$ "), comments=True)
        while words and (words[0] == "sudo" or words[0].endswith("/governor")):
            words = words[1:] if words[0] == "sudo" else ["governor", *words[1:]]
        if words[:1] == ["governor"]:
            found.append((section, [w for w in words[1:] if w != "&"]))
    return found


COMMANDS = _commands()


def test_the_readme_has_governor_commands_to_check():
    assert len(COMMANDS) >= 10 and any(argv[0] == "run" for _, argv in COMMANDS)


@pytest.mark.parametrize("section, argv", COMMANDS, ids=[" ".join(argv)[:60] for _, argv in COMMANDS])
def test_each_readme_command_parses_and_fits_the_host_it_describes(section, argv):
    name, *rest = argv
    # The group's own settings (-h as well as --help): click keeps a command's help option as
    # the first context it saw made it.
    parent = click.Context(main, info_name="governor", **main.context_settings)
    command = main.get_command(parent, name)
    assert command is not None, f"`governor {' '.join(argv)}`: no command {name!r}"
    try:
        parsed = command.make_context(name, rest, parent=parent)
    except click.UsageError as error:
        pytest.fail(f"`governor {' '.join(argv)}` does not parse: {error.format_message()}")
    host = next((limits for heading, limits in HOSTS.items() if section.startswith(heading)), None)
    if name == "run" and host is not None:
        for option, most in host.items():
            given = parsed.params.get(option)
            assert given is None or parse_quantity(given) <= most, \
                f"`governor {' '.join(argv)}` in {section!r}: --{option} {given} does not fit the host it describes"
