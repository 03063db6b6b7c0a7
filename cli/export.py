"""``governor export FORMAT [CONFIG]``: a config's group tree in another scheduler's terms."""

from __future__ import annotations

import click

# The config the installed governor.service names (governor.config.load.CONFIG_PATH; not
# imported here so that `governor run` does not load the config package).
_INSTALLED = "/etc/governor/governor.toml"


@click.command("export", short_help="Write the group tree as another scheduler's accounts.")
@click.argument("format_name", metavar="FORMAT", type=click.Choice(["slurm"]))
@click.argument("config_file", metavar="[CONFIG]", required=False, default=_INSTALLED, type=click.Path())
def export(format_name: str, config_file: str) -> None:
    """Write CONFIG's group tree (default: the installed config) in FORMAT on stdout.

    slurm: a sh script of sacctmgr commands making an account for each group, under its
    parent (top-level groups under root), with fairshare from the weights (all scaled by one
    factor to whole numbers), GrpTRES from each limit (cpu, mem in MiB, gres/gpu), a user
    association for each member (the users named and the members, on this host, of the Unix
    groups named) and GrpTRES on it from user_limit. What Slurm has no equivalent for
    (guarantees, "*", sessions, I/O) ends the script as "# no Slurm equivalent:" lines.
    A group name with upper case, or named root, is refused: Slurm would change it.

    \b
    Examples:
      governor export slurm > accounts.sh && sh accounts.sh
      governor export slurm /etc/governor/governor.toml | less
    """
    from governor.cli.inputs import read_input
    from governor.config.load import parse_config
    from governor.config.slurm_export import slurm_accounting

    config = parse_config(read_input(config_file), config_file)
    unix_groups = {name for rule in config.groups for name in rule.unix_groups}
    click.echo(slurm_accounting(config, unix_members(unix_groups)).script(config_file), nl=False)


def unix_members(names: set[str]) -> dict[str, list[str]]:
    """Unix group name → its members on this host: those its entry lists, then those having it
    as their primary group (sorted by uid). A name this host does not know is left out."""
    import grp
    import pwd

    found = {}
    for name in names:
        try:
            entry = grp.getgrnam(name)
        except KeyError:
            continue
        primary = [user.pw_name for user in sorted(pwd.getpwall(), key=lambda user: user.pw_uid)
                   if user.pw_gid == entry.gr_gid]
        found[name] = list(dict.fromkeys([*entry.gr_mem, *primary]))
    return found
