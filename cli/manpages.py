"""Man pages made from governor's click commands and its example config, so they always say
what the code does: ``governor(1)``, ``governor-<command>(1)`` for each subcommand and
``governor.toml(5)``.

Written by ``governor install-systemd`` (into ``/usr/local/share/man``) and ``governor man
--directory DIR`` (for packagers). click's help is turned into roff here rather than by
click-man, which pastes it in raw: click's ``\\b`` marker lands in the page, a long example line
is refilled, NAME is cut at 45 characters, and nothing is escaped (a backslash or a line
starting with a dot in a help text would break the page). This needs no dependency.

Pages: NAME (the short help), SYNOPSIS (click's usage), DESCRIPTION (the help, paragraph by
paragraph; a ``\\b`` block stays line for line), OPTIONS (click's own help records, defaults
included), COMMANDS for the group, EXAMPLES (the help's "Examples:" block) and SEE ALSO.
Non-ASCII characters become groff's ``\\[uXXXX]`` escapes, so a page renders under any locale.
"""

from __future__ import annotations

import inspect
import os
import re
import time

PROGRAM = "governor"
CONFIG_PAGE = "governor.toml.5"
CONFIG_PATH = "/etc/governor/governor.toml"
# "key: text" opening a description in governor.toml's comments (lower case: "Default:" and
# "Units:" are prose), and a TOML line left commented out as an example.
_KEY = re.compile(r'([a-z\[][\w.\[\]"*-]*(?:, [a-z][\w.]*)*): (.*)')
_COMMENTED_TOML = re.compile(r'#( ?\[.*\]| ?[A-Za-z_][\w."*-]* = .*)$')


def _build_date() -> str:
    """``$SOURCE_DATE_EPOCH``'s day (reproducible-builds.org: whole seconds since 1970), else
    today's. A value that is none was a ValueError or OverflowError traceback, or a year of
    -3166904 in every page."""
    from governor.config.units import quoted
    from governor.errors import GovernorError

    given = os.environ.get("SOURCE_DATE_EPOCH")
    if not given:  # (an empty one too, as a build tool may export it)
        return time.strftime("%Y-%m-%d", time.gmtime())
    if not (given.isascii() and given.isdigit() and len(given) <= 11):  # to the year 5138
        raise GovernorError(f"SOURCE_DATE_EPOCH must be whole seconds since 1970, got {quoted(given)}")
    return time.strftime("%Y-%m-%d", time.gmtime(int(given)))


def pages(command, *, version: str | None = None, date: str | None = None) -> dict[str, str]:
    """Every page, as ``{"man1/governor-run.1": roff, ..., "man5/governor.toml.5": roff}``.

    Args:
        command: the click group to document (a command passes its context's root: governor's own).
        version: shown in each page's footer (default: the installed drf-governor's).
        date: ``YYYY-MM-DD`` in the footer (default: ``$SOURCE_DATE_EPOCH``'s day, else today's),
            so a packager's build is reproducible.

    Raises:
        GovernorError: ``$SOURCE_DATE_EPOCH`` is no whole number of seconds a calendar holds.
    """
    version = version or _version()
    date = date or _build_date()
    found = {f"man1/{name}.1": text for name, text in _command_pages(command, PROGRAM, None, version, date)}
    from importlib.resources import files

    found[f"man5/{CONFIG_PAGE}"] = config_page((files("governor.configs") / "governor.toml").read_text(),
                                               version=version, date=date)
    return found


def write_pages(directory, command, **footer) -> list:
    """Write :func:`pages` below ``directory`` (``man1/``, ``man5/``, made if missing), mode 0644;
    return the paths written. OSError propagates."""
    from pathlib import Path

    written = []
    for name, text in pages(command, **footer).items():
        path = Path(directory) / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="ascii")
        path.chmod(0o644)
        written.append(path)
    return written


def _command_pages(command, name: str, parent, version: str, date: str):
    import click

    ctx = click.Context(command, info_name=name, parent=parent, **command.context_settings)  # -h too
    title = ctx.command_path.replace(" ", "-")
    subcommands = {n: c for n, c in getattr(command, "commands", {}).items() if not c.hidden}
    yield title, command_page(ctx, subcommands, version=version, date=date)
    for sub_name, sub in subcommands.items():
        yield from _command_pages(sub, sub_name, ctx, version, date)


def command_page(ctx, subcommands: dict, *, version: str, date: str) -> str:
    """The page of ``ctx.command`` (a click context naming it as the user types it)."""
    command = ctx.command
    title = ctx.command_path.replace(" ", "-")
    paragraphs, examples = _help_paragraphs(command.help or "")
    out = [_header(title, 1, version, date, "User Commands"),
           ".SH NAME", f"{_text(title)} \\- {_text(command.get_short_help_str(limit=200).rstrip('.'))}",
           ".SH SYNOPSIS", f".B {_text(ctx.command_path)}", _text(" ".join(command.collect_usage_pieces(ctx)))]
    if paragraphs:
        out += [".SH DESCRIPTION", *paragraphs]
    # An argument without help of its own (click ≥ 8.3 gives it a record) is in the synopsis.
    records = [record for param in command.get_params(ctx)
               if (record := param.get_help_record(ctx)) and (record[1] or param.param_type_name == "option")]
    if records:
        out.append(".SH OPTIONS")
        for names, help_text in records:
            out += [".TP", _option_names(names), _text(help_text)]
    if subcommands:
        out.append(".SH COMMANDS")
        for sub_name, sub in subcommands.items():
            out += [".TP", f"\\fB{_text(sub_name)}\\fR",
                    f"{_text(sub.get_short_help_str(limit=200))} See {_reference(f'{title}-{sub_name}', 1)}."]
    if examples:
        out += [".SH EXAMPLES", ".nf", ".RS 4", *(_text(line.strip()) for line in examples), ".RE", ".fi"]
    see_also = [(f"{title}-{n}", 1) for n in subcommands] if subcommands else [(PROGRAM, 1)]
    out += [".SH SEE ALSO", ", ".join(_reference(*page) for page in [*see_also, ("governor.toml", 5)])]
    return "\n".join(out) + "\n"


def _help_paragraphs(help_text: str) -> tuple[list[str], list[str]]:
    """click's help as roff paragraphs, and the lines of its "Examples:" block apart.

    As click does: the text stops at ``\\f``; a paragraph whose first line is ``\\b`` is kept
    line for line, any other is refilled."""
    text = inspect.cleandoc(help_text.split("\f", 1)[0])
    out, examples = [], []
    for block in re.split(r"\n\s*\n", text):
        lines = block.splitlines()
        if lines and lines[0].strip() == "\b":
            lines = lines[1:]
            if lines and lines[0].strip() == "Examples:":
                examples += lines[1:]
                continue
            out += [".PP", ".nf", *(_text(line) for line in lines), ".fi"]
        elif lines:
            out += [".PP", *(_text(line.strip()) for line in lines)]
    return out, examples


def config_page(toml_text: str, *, version: str, date: str) -> str:
    """``governor.toml(5)`` from the commented example config: its comments become the text,
    its settings (and the settings it leaves commented out) the example lines between them,
    one subsection per top-level table."""
    blocks = re.split(r"\n\s*\n", toml_text.strip())
    out = [_header("GOVERNOR.TOML", 5, version, date, "File Formats"),
           ".SH NAME", "governor.toml \\- configuration of the governor daemon",
           ".SH SYNOPSIS", f".B {CONFIG_PATH}",
           ".SH DESCRIPTION",
           ".PP",
           "The TOML file that \\fBgovernor daemon\\fR reads at start and again on SIGHUP;",
           "\\fBgovernor check-config\\fR checks one.",
           "This page is made from the example configuration shipped with governor, the file",
           f"\\fBgovernor install-systemd\\fR copies to {CONFIG_PATH} when there is none:",
           "its comments describe every key and its default, and the indented lines are its",
           "settings as in the file (those it leaves commented out start with #)."]
    current = None
    for index, block in enumerate(blocks):
        table = _top_table(block)
        if table is None and index > 0:
            table = current
        if table != current:
            if current is None:
                out.append(".SH TABLES")
            out.append(f".SS [{_text(table)}]")
            current = table
        out += _config_block(block.splitlines())
    out += [".SH FILES", ".TP", f".I {CONFIG_PATH}", "The config the installed governor.service names.",
            ".SH SEE ALSO", ", ".join(_reference(f"governor{name}", 1)
                                      for name in ("", "-daemon", "-check-config", "-install-systemd"))]
    return "\n".join(out) + "\n"


def _top_table(block: str) -> str | None:
    """The top-level table of the first table header in ``block`` (commented out or not)."""
    for line in block.splitlines():
        header = re.match(r'#? ?\[\[?([^\].]+)[\].]', line.strip())
        if header:
            return header[1]
    return None


def _config_block(lines: list[str]) -> list[str]:
    """One blank-line-separated block of the config: runs of prose and runs of TOML lines."""
    out: list[str] = []
    code: list[str] = []
    indent = None  # of the line that opened the paragraph now being filled; None: none open
    for line in lines:
        if not line.startswith("#") or _COMMENTED_TOML.match(line):
            code.append(line)
            indent = None
            continue
        if code:
            out += _code(code)
            code = []
        prose = line[1:].removeprefix(" ")
        depth = len(prose) - len(prose.lstrip())
        key = _KEY.fullmatch(prose.strip())
        if key:
            out += [".TP", f"\\fB{_text(key[1])}\\fR", _text(key[2])]
            indent = depth
        elif not prose.strip():
            indent = None
        elif indent is None or depth < indent:
            out += [".PP", _text(prose.strip())]
            indent = depth
        else:
            out.append(_text(prose.strip()))
    return out + (_code(code) if code else [])


def _code(lines: list[str]) -> list[str]:
    return [".PP", ".nf", ".RS 4", *(_text(line) for line in lines), ".RE", ".fi"]


def _header(title: str, section: int, version: str, date: str, manual: str) -> str:
    # No hyphenation, ragged right: option names and page names stay whole and copyable.
    return f'.TH "{_text(title.upper())}" "{section}" "{date}" "governor {_text(version)}" "{manual}"\n.nh\n.ad l'


def _reference(page: str, section: int) -> str:
    """``governor-run(1)``, bold, never broken at its hyphens (``\\%``)."""
    return f"\\%\\fB{_text(page)}\\fR({section})"


def _option_names(names: str) -> str:
    """click's "-m, --memory SIZE": the option names bold, the metavar italic."""
    words = []
    for word in names.split(" "):
        comma = "," if word.endswith(",") else ""
        word = word.removesuffix(",")
        style = "B" if word.startswith("-") else "I"
        words.append(f"\\f{style}{_text(word)}\\fR{comma}")
    return " ".join(words)


def _text(text: str) -> str:
    """``text`` safe on a roff text line: backslashes and hyphens escaped (so ``--memory`` stays
    two ASCII hyphens), a leading dot or quote defused, non-ASCII as ``\\[uXXXX]``."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    text = "".join(c if ord(c) < 128 else f"\\[u{ord(c):04X}]" for c in text)
    text = text.replace("\b", "")
    return "\\&" + text if text.startswith((".", "'")) else text


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("drf-governor")
    except PackageNotFoundError:
        return "unknown"
