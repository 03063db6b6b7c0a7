"""``governor man``: write the man pages into a directory, for packagers (install-systemd writes
them into /usr/local/share/man itself)."""

from __future__ import annotations

import click


@click.command("man", short_help="Write the man pages into a directory.")
@click.option("--directory", "-d", metavar="DIR", required=True, type=click.Path(file_okay=False),
              help="Write DIR/man1/governor.1, DIR/man1/governor-<command>.1 and DIR/man5/governor.toml.5 "
                   "(directories made if missing, pages replaced).")
def man(directory: str) -> None:
    """Write governor's man pages into DIR: governor(1), one page per command, and
    governor.toml(5) for the config. They are made from the commands' own help and the example
    config, so they match this version; $SOURCE_DATE_EPOCH sets their date.

    \b
    Examples:
      governor man --directory build/man && man -l build/man/man1/governor-run.1
      governor man --directory "$DESTDIR/usr/share/man"    # in a package build
    """
    from governor.errors import GovernorError
    from governor.cli.manpages import write_pages

    try:
        written = write_pages(directory, click.get_current_context().find_root().command)
    except OSError as error:
        raise GovernorError(f"{error.filename or directory}: cannot write the man pages: {error.strerror}") from error
    click.echo(f"wrote {len(written)} man pages to {directory}")
