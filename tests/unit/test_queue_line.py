"""`governor run`'s queue line off a terminal (issue 44.4): a waiting `nohup` job printed a line
at each move of the session memory it waited on, a few KB each (four in 20 s, the same holders)."""

from governor.cli.become_task import QUIET_REPEAT_S, _QueueLine

GIB = 1 << 30


def place(chem: float, physics: float = 1.2, position: int = 1, more: str = "") -> dict:
    return {"position": position,
            "reason": f"memory: waits for 2.0G to free (held by chem {chem}G, physics {physics}G{more})"}


def test_off_a_terminal_a_line_is_written_when_the_reason_changes_materially_or_a_minute_passed(capsys):
    now = [0.0]
    line = _QueueLine(clock=lambda: now[0], live=False)
    seen = []
    for second, at in [(0, place(1.2)), (5, place(1.21)), (10, place(1.19)), (20, place(1.22)),  # KB moves
                       (25, place(1.22, more=", bio 1.0G")),  # another holder: at once
                       (30, place(1.23, more=", bio 1.0G")),
                       (25 + QUIET_REPEAT_S, place(1.24, more=", bio 1.0G")),  # a minute on: once more
                       (26 + QUIET_REPEAT_S, place(1.9, more=", bio 1.0G")),  # a figure off by > 10 %
                       (27 + QUIET_REPEAT_S, place(1.9, position=2, more=", bio 1.0G"))]:  # another position
        now[0] = float(second)
        line.show(at)
        seen.append(capsys.readouterr().err.count("\n"))
    assert seen == [1, 0, 0, 0, 1, 0, 1, 1, 1]


def test_on_a_terminal_every_change_rewrites_the_line_in_place(capsys):
    line = _QueueLine(clock=lambda: 0.0, live=True)
    line.show(place(1.2))
    line.show(place(1.21))
    assert capsys.readouterr().err.count("\r\x1b[K") == 2
