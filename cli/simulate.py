"""``governor simulate``: run a fairness policy on a scenario file and show the allocation.

SCENARIO is a path, or the name of a scenario shipped in ``configs/scenarios/`` (package data
``governor.configs``): ``governor simulate paper``. A file of that name wins, so a scenario
called "paper" in the current directory is never shadowed; a name with a ``/`` is always a path.
"""

from __future__ import annotations

import click

from governor.errors import AllocationInputError

# Spelled out, not read from governor.core.policies.POLICIES, so `--help` loads no allocator code.
POLICY_NAMES = ("drf", "asset", "ceei")
MODES = ("continuous", "discrete")
# The bundled scenarios (configs/scenarios/<name>.toml), spelled out for `--help` like the
# policies; a test checks them against the directory.
SCENARIO_NAMES = ("paper", "weighted", "gpu-lab", "login-node", "hdrf-starvation", "hdrf-blocking", "quotas")

_HELP = f"""Allocate the capacity in SCENARIO among its groups and show the result.

SCENARIO is a TOML file, or the name of a bundled example: {", ".join(SCENARIO_NAMES)}
(a file of that name wins).

\b
Scenario format:
  [capacity]                # what is divided: any resource names
  cpu = 9                   # cores
  memory = "18G"            # K M G T are powers of 1024
  [groups.A]
  task = {{ cpu = 1, memory = "4G" }}   # one task's demand (required)
  weight = 2                # optional, 0.001 to 1000, default 1
  tasks = 3                 # optional: at most 3 tasks (default unbounded)

A group tree is divided by H-DRF: parent = "NAME" puts a group under another
(which then has no task); any group may have guarantee = {{ cpu = 2 }}, what its
subtree gets first, and limit = {{ cpu = 6 }}, what it never exceeds.

Amounts in JSON are base units: cores, bytes, bytes/s.

\b
Examples:
  governor simulate paper --trace
  governor simulate scenario.toml --mode discrete --json
"""


@click.command(short_help="Divide a scenario's capacity by DRF.", help=_HELP)
@click.argument("scenario", type=click.Path())
@click.option("--mode", type=click.Choice(MODES), default="continuous", show_default=True,
              help="continuous: divisible tasks (share mode); discrete: whole tasks (queue mode).")
@click.option("--policy", type=click.Choice(POLICY_NAMES), default="drf", show_default=True,
              help="drf, or a comparison from the paper: asset fairness, CEEI (continuous only).")
@click.option("--trace", is_flag=True, help="Also show the filling step by step (paper Table 1).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
def simulate(scenario: str, mode: str, policy: str, trace: bool, as_json: bool) -> None:
    if policy == "ceei" and mode == "discrete":
        raise click.BadOptionUsage("policy", "--policy ceei needs --mode continuous (CEEI divides tasks)")
    # Imported here so commands that never simulate do not pay for them.
    from governor.core.policies import allocate
    from governor.core.scenario import allocation_error, load_scenario
    from governor.config.tomlcheck import parse_toml

    loaded = load_scenario(parse_toml(_read_scenario(scenario), scenario), scenario)
    if loaded.tree and (policy, mode) != ("drf", "continuous"):
        raise click.UsageError(f"{scenario} has a group tree or quotas: H-DRF divides it, with --policy drf "
                               "--mode continuous")
    try:
        if loaded.tree:
            from governor.core.hdrf import hierarchical_filling

            allocation = hierarchical_filling(loaded.capacity, loaded.groups, loaded.tree, trace=trace)
        else:
            allocation = allocate(policy, loaded.capacity, loaded.groups, mode=mode, trace=trace)
    except AllocationInputError as error:
        raise allocation_error(error, scenario) from error

    if as_json:
        import json

        click.echo(json.dumps(allocation.to_json()))
        return
    from governor.cli.render import allocation_table, trace_table
    from governor.cli.view_common import console as plain_console

    console = plain_console()
    console.print(allocation_table(allocation))
    if trace:
        console.print(trace_table(allocation))


def _read_scenario(scenario: str) -> bytes:
    """The bytes of the file ``scenario``, else of the bundled scenario of that name.

    Raises:
        ConfigError: the file cannot be read, or the name is neither a file nor bundled.
    """
    import os

    from governor.cli.inputs import read_input

    if "/" not in scenario and not os.path.lexists(scenario):
        if scenario not in SCENARIO_NAMES:
            from governor.errors import ConfigError

            raise ConfigError(scenario, None, "no such file, nor a bundled scenario "
                                              f"(bundled: {', '.join(SCENARIO_NAMES)})")
        from importlib.resources import files

        return (files("governor.configs") / "scenarios" / f"{scenario}.toml").read_bytes()
    return read_input(scenario)
