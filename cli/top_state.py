"""``governor top``'s screen state and what each key does to it. Pure: no terminal, no socket.

The state is what the person chose (selection, expanded groups, sort column, filter, help)
plus what the stream last said (the status snapshot, or why the daemon cannot be reached).
:func:`press` applies one key; :func:`visible_groups` is the group order the screen shows.

Keys are names, as :func:`parse_keys` decodes them from the terminal's bytes: single
characters (``"q"``, ``"j"``, ``"/"``…) and ``"up"``, ``"down"``, ``"enter"``, ``"esc"``,
``"backspace"``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from governor.cli.view_common import printable, tree_order
from governor.wire.status_types import Group, Status

# Sort columns in the order `s` cycles through them; name ascends, the others descend.
SORTS = ("share", "cpu", "memory", "tasks", "name")
_ESCAPES = {b"\x1b[A": "up", b"\x1b[B": "down", b"\x1bOA": "up", b"\x1bOB": "down"}
_CONTROL = {b"\r": "enter", b"\n": "enter", b"\x7f": "backspace", b"\x08": "backspace"}


@dataclass
class TopState:
    """Everything the screen shows besides the terminal's size and the clock.

    Attributes:
        status: the last snapshot from the ``watch`` stream (schema in ``cli/status_view.py``,
            plus ``events`` and ``fair_level``), or None before the first one.
        received: Unix time the snapshot arrived.
        down: why the daemon cannot be reached (shown as a banner while reconnecting), or None.
        selected: the selected group's name (kept by name, so it survives re-sorting).
        expanded: groups whose tasks are shown.
        folded: groups of a group tree whose child groups are hidden.
        sort: one of :data:`SORTS`.
        filter: groups shown must contain this text (case-insensitive); "" shows all.
        editing: the filter being typed after ``/``, or None when not typing.
        help: the help panel is shown instead of the groups.
        quit: ``q`` was pressed.
    """

    status: Status | None = None
    received: float | None = None
    down: str | None = None
    selected: str | None = None
    expanded: set[str] = field(default_factory=set)
    folded: set[str] = field(default_factory=set)
    sort: str = SORTS[0]
    filter: str = ""
    editing: str | None = None
    help: bool = False
    quit: bool = False

    def __post_init__(self) -> None:
        if self.status is not None:
            self.status = printable(self.status)

    def receive(self, status: Status, at: float) -> None:
        """``status`` arrived at ``at`` (Unix time): shown from now on. Its text is made
        printable once, here (group names key the selection and the expanded groups), not at
        every frame."""
        self.status, self.received, self.down = printable(status), at, None


def visible_groups(state: TopState) -> list[str]:
    """Group names that pass the filter, in the sort column's order (ties by name). In a group
    tree, each group is followed by its child groups (sorted among themselves), and a folded
    group's are left out; a filter shows the groups that match, flat."""
    groups = _groups(state)
    needle = state.filter.casefold()
    names = sorted(name for name in groups if needle in name.casefold())
    if state.sort != "name":
        names = sorted(names, key=lambda name: -_sort_value(state.sort, groups[name]))  # stable: ties by name
    if needle or not any(g.parent for g in groups.values()):
        return names
    parents = {name: groups[name].parent for name in names}
    return [name for depth, name in tree_order(names, parents) if not _hidden(name, parents, state.folded)]


def depth_of(state: TopState, name: str) -> int:
    """How deep ``name`` sits in the group tree (0 at the top, or with no tree)."""
    groups = _groups(state)
    depth, seen = 0, {name}
    parent = groups[name].parent if name in groups else None
    while parent in groups and parent not in seen:
        seen.add(parent)
        depth += 1
        parent = groups[parent].parent
    return depth


def is_internal(state: TopState, name: str) -> bool:
    """Whether ``name`` has child groups in the snapshot."""
    return any(g.parent == name for g in _groups(state).values())


def _groups(state: TopState) -> dict[str, Group]:
    return dict(state.status.groups) if state.status is not None else {}


def _hidden(name: str, parents: dict, folded: set[str]) -> bool:
    seen, parent = {name}, parents.get(name)
    while parent is not None and parent not in seen:
        if parent in folded:
            return True
        seen.add(parent)
        parent = parents.get(parent)
    return False


def selected_group(state: TopState) -> str | None:
    """The selected group if it is visible, else the first visible group (or None)."""
    names = visible_groups(state)
    return state.selected if state.selected in names else (names[0] if names else None)


def press(state: TopState, key: str) -> None:
    """Apply one key to ``state``.

    While typing a filter (after ``/``): characters add to it, ``backspace`` removes one,
    ``enter`` applies it, ``esc`` clears it. Otherwise: ``q`` quits, ``up``/``k`` and
    ``down``/``j`` move the selection, ``enter`` expands or collapses the selected group (a
    group with child groups: folds or unfolds them),
    ``s`` moves to the next sort column, ``/`` starts a filter, ``esc`` clears the filter,
    ``?`` shows or hides the help. Other keys do nothing.
    """
    if state.editing is not None:
        if key == "enter":
            state.filter, state.editing = state.editing, None
        elif key == "esc":
            state.filter, state.editing = "", None
        elif key == "backspace":
            state.editing = state.editing[:-1]
        elif len(key) == 1 and key.isprintable():
            state.editing += key
        return
    if key == "q":
        state.quit = True
    elif key in ("up", "k", "down", "j"):
        _move(state, -1 if key in ("up", "k") else 1)
    elif key == "enter":
        group = selected_group(state)
        if group is not None and is_internal(state, group):
            state.folded ^= {group}
        elif group is not None:
            state.expanded ^= {group}
    elif key == "s":
        state.sort = SORTS[(SORTS.index(state.sort) + 1) % len(SORTS)]
    elif key == "/":
        state.editing = state.filter
    elif key == "esc":
        state.filter = ""
    elif key == "?":
        state.help = not state.help


def parse_keys(data: bytes) -> list[str]:
    """Key names from bytes read off a terminal in cbreak mode (see the module docstring).

    Arrow keys come as escape sequences (``ESC [ A`` or, in application mode, ``ESC O A``); a
    lone ESC is the escape key. Unknown sequences and undecodable bytes are dropped.
    """
    keys, i = [], 0
    while i < len(data):
        sequence = data[i:i + 3]
        if sequence in _ESCAPES:
            keys.append(_ESCAPES[sequence])
            i += 3
        elif data[i:i + 1] == b"\x1b":
            # ESC followed by something we do not know (or nothing): skip a whole CSI sequence.
            rest = data[i + 1:i + 2]
            if rest in (b"[", b"O"):
                j = i + 2
                while j < len(data) and not 0x40 <= data[j] <= 0x7e:
                    j += 1
                i = j + 1
            else:
                keys.append("esc")
                i += 1
        elif data[i:i + 1] in _CONTROL:
            keys.append(_CONTROL[data[i:i + 1]])
            i += 1
        else:
            # One UTF-8 character (a filter may contain non-ASCII group names).
            for size in (1, 2, 3, 4):
                try:
                    keys.append(data[i:i + size].decode())
                    break
                except UnicodeDecodeError:
                    continue
            i += size
    return [key for key in keys if key in ("up", "down", "enter", "esc", "backspace") or key.isprintable()]


def _move(state: TopState, step: int) -> None:
    names = visible_groups(state)
    if not names:
        return
    current = selected_group(state)
    index = names.index(current) + step
    state.selected = names[max(0, min(len(names) - 1, index))]


def _sort_value(column: str, group: Group) -> float:
    """A group's value in a descending sort column: dominant share, cores or bytes used, tasks."""
    if column == "share":
        return float(group.dominant_share)
    if column == "tasks":
        return float(len(group.tasks))
    return float(group.usage.get(column, 0.0))
