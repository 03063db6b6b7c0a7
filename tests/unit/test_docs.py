"""The README stays short and true, and the guides in docs/ build (issue 27).

- README.md is at most 200 lines, shows the exact test command `.ci/run` runs and the demo
  command, and every relative link in it (and every anchor into a page) resolves.
- `mkdocs build --strict` succeeds: a broken link, a missing anchor or a page left out of the
  nav fails it; docs/cli.md is generated from the click commands by mkdocs-click.
- A newcomer finds "why did my task end" on the first screen of docs/user.md.
- The exit-code table of docs/user.md matches cli/failures.py, row by row.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from governor.cli.failures import KINDS

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
USER_GUIDE = REPO / "docs" / "user.md"
FIRST_SCREEN = 40  # lines

# [text](target) and ![alt](target), outside code; the target ends at a space or ")".
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_FENCE = re.compile(r"^```.*?^```", re.S | re.M)
_CODE_SPAN = re.compile(r"`[^`\n]*`")


def _prose(markdown: str) -> str:
    """``markdown`` without fenced blocks and code spans (a link there is not a link)."""
    return _CODE_SPAN.sub("", _FENCE.sub("", markdown))


def _slug(heading: str) -> str:
    """The anchor of a heading, as MkDocs' toc and GitHub make it for plain headings."""
    text = _CODE_SPAN.sub(lambda m: m.group(0).strip("`"), heading).strip().lower()
    return re.sub(r"\s+", "-", re.sub(r"[^\w\- ]", "", text))


def _anchors(markdown: str) -> set[str]:
    return {_slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*$", _FENCE.sub("", markdown), re.M)}


def _code_blocks(markdown: str) -> list[list[str]]:
    """The lines of each fenced block, comments and trailing spaces dropped."""
    return [[line.split("#")[0].rstrip() for line in block.splitlines()[1:-1]]
            for block in _FENCE.findall(markdown)]


def _ci_command() -> str:
    """The command `.ci/run` executes: its `exec` line."""
    lines = [line.strip() for line in (REPO / ".ci" / "run").read_text().splitlines()]
    execs = [line.removeprefix("exec ").strip() for line in lines if line.startswith("exec ")]
    assert len(execs) == 1, f".ci/run should exec exactly one command, found {execs}"
    return execs[0]


def test_readme_is_at_most_200_lines():
    lines = README.read_text().splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines; move detail into docs/"


def test_readme_shows_the_exact_test_command_ci_runs():
    command = _ci_command()
    assert command == "scripts/test", f".ci/run runs {command!r}; the README and this test say scripts/test"
    assert (REPO / command).is_file()
    shown = {line.strip() for block in _code_blocks(README.read_text()) for line in block}
    assert command in shown or f"./{command}" in shown, \
        f"README.md shows no code line running {command} (the command .ci/run executes)"


def test_readme_shows_the_demo_command():
    # Run as root, with no sudo in front (issue 44.5: a host without sudo has none to run).
    shown = {line.partition("#")[0].strip() for block in _code_blocks(README.read_text()) for line in block}
    assert "./scripts/demo" in shown
    assert (REPO / "scripts" / "demo").is_file()


def test_every_relative_link_in_the_readme_resolves():
    text = README.read_text()
    targets = _LINK.findall(_prose(text))
    assert targets, "README.md links nothing: the guides should be linked"
    broken = []
    for target in targets:
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        if not path:  # an anchor in the README itself
            if anchor not in _anchors(text):
                broken.append(target)
            continue
        file = (README.parent / path).resolve()
        if not file.exists():
            broken.append(target)
        elif anchor and file.suffix == ".md" and anchor not in _anchors(file.read_text()):
            broken.append(target)
    assert not broken, f"README.md links to what does not exist: {broken}"


def test_readme_links_every_guide():
    targets = {target.partition("#")[0] for target in _LINK.findall(_prose(README.read_text()))}
    for page in ("admin", "user", "operator", "design", "benchmarks", "cli"):
        assert f"docs/{page}.md" in targets, f"README.md does not link docs/{page}.md"


def test_why_did_my_task_end_is_on_the_first_screen_of_the_user_guide():
    first = USER_GUIDE.read_text().splitlines()[:FIRST_SCREEN]
    assert any(re.match(r"^#{1,3}\s+why did my task end\??\s*$", line, re.I) for line in first), \
        f"docs/user.md: no 'Why did my task end' heading in its first {FIRST_SCREEN} lines"


def test_the_user_guide_lists_every_exit_code_as_cli_failures_does():
    rows = {}
    for line in USER_GUIDE.read_text().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0].isdigit():
            rows[int(cells[0])] = set(re.findall(r"`([a-z_]+)`", cells[-1]))
    for code, (status, _hint) in KINDS.items():
        assert code in rows.get(status, set()), \
            f"docs/user.md: internal code {code} should be in the row of exit {status}"


def test_mkdocs_builds_strict(tmp_path):
    for module in ("mkdocs", "mkdocs_click"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed (pip install mkdocs mkdocs-click)")
    site = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
                           str(REPO / "mkdocs.yml"), "--site-dir", str(site)],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout}\n{done.stderr}"
    for page in ("index.html", "admin/index.html", "user/index.html", "operator/index.html",
                 "design/index.html", "benchmarks/index.html", "cli/index.html"):
        assert (site / page).is_file(), f"the site has no {page}"
    # The CLI reference is generated from the click group: every command is there.
    from governor.cli.main import main

    cli = (site / "cli" / "index.html").read_text()
    for name in main.commands:
        assert f'id="{name}"' in cli, f"docs/cli.md does not document `governor {name}`"


def test_the_shipped_configs_cite_pages_that_exist():
    # Issue 33, point 9: the unit file cited "DESIGN.md §8", a file and section that are no more.
    for path in sorted((REPO / "configs").glob("governor*")):
        for cited in re.findall(r"[\w./-]+\.md\b", path.read_text()):
            assert (REPO / cited).is_file(), f"{path.name} cites {cited}, which is not in the repository"
