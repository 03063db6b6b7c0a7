"""``governor simulate``: run a fairness policy on a scenario file and show the allocation."""

from __future__ import annotations

import click

from governor.errors import AllocationInputError

# Spelled out, not read from governor.policies.POLICIES, so `--help` loads no allocator code.
POLICY_NAMES = ("drf", "asset", "ceei")
MODES = ("continuous", "discrete")


@click.command(short_help="Divide a scenario file's capacity by DRF.")
@click.argument("scenario", type=click.Path())
@click.option("--mode", type=click.Choice(MODES), default="continuous", show_default=True,
              help="continuous: divisible tasks (share mode); discrete: whole tasks (queue mode).")
@click.option("--policy", type=click.Choice(POLICY_NAMES), default="drf", show_default=True,
              help="drf, or a comparison from the paper: asset fairness, CEEI (continuous only).")
@click.option("--trace", is_flag=True, help="Also show the filling step by step (paper Table 1).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
def simulate(scenario: str, mode: str, policy: str, trace: bool, as_json: bool) -> None:
    """Allocate the capacity in SCENARIO (a TOML file) among its groups and show the result.

    Amounts in JSON are base units: cores, bytes, bytes/s.

    \b
    Examples:
      governor simulate scenario.toml --trace
      governor simulate scenario.toml --mode discrete --json
    """
    if policy == "ceei" and mode == "discrete":
        raise click.BadOptionUsage("policy", "--policy ceei needs --mode continuous (CEEI divides tasks)")
    # Imported here so commands that never simulate do not pay for them.
    from governor.cli.inputs import read_input
    from governor.policies import allocate
    from governor.scenario import allocation_error, load_scenario
    from governor.tomlcheck import parse_toml

    loaded = load_scenario(parse_toml(read_input(scenario), scenario), scenario)
    if loaded.tree and (policy, mode) != ("drf", "continuous"):
        raise click.UsageError(f"{scenario} has a group tree or quotas: H-DRF divides it, with --policy drf "
                               "--mode continuous")
    try:
        if loaded.tree:
            from governor.hdrf import hierarchical_filling

            allocation = hierarchical_filling(loaded.capacity, loaded.groups, loaded.tree, trace=trace)
        else:
            allocation = allocate(policy, loaded.capacity, loaded.groups, mode=mode, trace=trace)
    except AllocationInputError as error:
        raise allocation_error(error, scenario) from error

    if as_json:
        import json

        click.echo(json.dumps(allocation.to_json()))
        return
    from rich.console import Console

    from governor.cli.render import allocation_table, trace_table

    console = Console()
    console.print(allocation_table(allocation))
    if trace:
        console.print(trace_table(allocation))
