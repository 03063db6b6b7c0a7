"""Fair share over time: usage decays with the half-life, a group ahead of its share gets a
lower effective weight than it is configured with, and the history survives restarts (and a
bad file) without ever stopping the daemon."""

import json
import logging
import math
import os
import stat

import pytest

from governor.daemon.fairshare_history import FILE_NAME, MAX_FILE_BYTES, FairShareHistory
from governor.daemon.journal import Journal
from governor.config.load import parse_half_life
from governor.core.fairshare import MIN_EFFECTIVE_WEIGHT, FairShare

DAY = 86_400.0
T0 = 1_700_000_000.0


def ran(history: FairShare, shares: dict, seconds: float, at: float = T0) -> FairShare:
    history.add(at, {}, 0)
    history.add(at + seconds, shares, seconds)
    return history


def test_half_life_is_a_systemd_time_span():
    assert parse_half_life("1d") == DAY and parse_half_life("1h30m") == 5400
    for bad in ("", "0s", "soon", 3600, None):
        with pytest.raises(ValueError):
            parse_half_life(bad)
    # A span no fair share needs, past a time limit's ten years, was taken (second-week check).
    assert parse_half_life("3650d") == 3650 * DAY
    with pytest.raises(ValueError, match="at most 3650 days"):
        parse_half_life("99999999999999999999d")


def test_add_accumulates_share_times_seconds():
    history = FairShare(DAY)
    history.add(T0, {"A": 0.5, "B": 1.0}, 10)
    history.add(T0 + 10, {"A": 0.5}, 10)
    assert history.usage == pytest.approx({"A": 10.0, "B": 10.0}, rel=1e-3)
    assert history.at == T0 + 10


def test_usage_halves_after_one_half_life_and_reading_changes_nothing():
    history = FairShare(DAY, {"A": 100.0}, T0)
    assert history.decayed(T0 + DAY) == pytest.approx({"A": 50.0})
    assert history.decayed(T0 + 3 * DAY) == pytest.approx({"A": 12.5})
    assert history.usage == {"A": 100.0} and history.at == T0
    history.add(T0 + DAY, {}, 0)
    assert history.usage == pytest.approx({"A": 50.0}) and history.at == T0 + DAY


def test_a_long_sample_cannot_make_usage_infinite():
    history = FairShare(DAY)
    history.add(T0, {"A": 1.0}, 1e300)
    assert history.usage["A"] == pytest.approx(DAY / math.log(2))


def test_hostile_shares_and_seconds_are_ignored():
    history = FairShare(DAY)
    history.add(T0, {"A": math.nan, "B": -1.0, "C": math.inf, "D": True, "E": 5.0}, 10)
    assert history.usage == pytest.approx({"E": 10.0}, rel=1e-4)  # above 1 counts as the whole host
    for seconds in (-5, math.nan, math.inf * -1):
        history.add(T0, {"A": 1.0}, seconds)
    assert set(history.usage) == {"E"}
    with pytest.raises(ValueError, match="now"):
        history.add(math.nan, {"A": 1.0}, 1)


def test_a_clock_going_back_neither_raises_usage_nor_crashes():
    history = FairShare(DAY, {"A": 100.0}, T0)
    assert history.decayed(T0 - 3600) == {"A": 100.0}
    history.add(T0 - 3600, {}, 0)
    assert history.usage == {"A": 100.0} and history.at == T0 - 3600
    # decay resumes from the new reading at once
    assert history.decayed(T0 - 3600 + DAY) == pytest.approx({"A": 50.0})


def test_without_history_every_group_keeps_its_configured_weight():
    assert FairShare(DAY).effective_weights(T0, {"A": 2.0, "B": 1.0}) == {"A": 2.0, "B": 1.0}


def test_a_group_that_ran_alone_falls_below_its_weight_while_its_idle_sibling_keeps_its_own():
    history = ran(FairShare(DAY), {"A": 1.0}, 3600)
    weights = history.effective_weights(T0 + 3600, {"A": 1.0, "B": 1.0})
    # U = 1, S = 1/2: 2^-2
    assert weights == pytest.approx({"A": 0.25, "B": 1.0})


def test_usage_in_proportion_to_weight_halves_every_weight_so_ratios_stay():
    history = ran(FairShare(DAY), {"A": 0.6, "B": 0.2, "C": 0.2}, 3600)
    standings = history.standings(T0 + 3600, {"A": 3.0, "B": 1.0, "C": 1.0})
    assert {g: s.factor for g, s in standings.items()} == pytest.approx({"A": 0.5, "B": 0.5, "C": 0.5})
    assert {g: s.effective for g, s in standings.items()} == pytest.approx({"A": 1.5, "B": 0.5, "C": 0.5})
    assert standings["A"].usage_share == pytest.approx(0.6) and standings["A"].weight_share == pytest.approx(0.6)
    assert standings["A"].weight == 3.0 and standings["A"].usage == pytest.approx(0.6 * 3600, rel=0.02)


def test_as_usage_decays_the_effective_weight_returns_to_the_configured_one():
    weights = {"A": 1.0, "B": 1.0}
    history = ran(FairShare(DAY), {"A": 1.0}, 3600)
    # B then uses half the host for a week: A's hour of old use weighs less and less
    before = history.effective_weights(T0 + 3600, weights)["A"]
    for hour in range(1, 7 * 24 + 1):
        history.add(T0 + 3600 * (hour + 1), {"B": 0.5}, 3600)
    after = history.effective_weights(T0 + 3600 * (7 * 24 + 1), weights)
    assert before == pytest.approx(0.25) and after["A"] == pytest.approx(1.0, abs=0.005)
    assert after["B"] == pytest.approx(0.25, abs=0.005)


def test_a_history_nobody_followed_is_forgotten_so_per_user_groups_do_not_pile_up():
    history = ran(FairShare(DAY), {"A": 1.0}, 3600)
    # U is relative: decayed but alone, A's usage is still all the usage there is...
    assert history.effective_weights(T0 + 3600 + 30 * DAY, {"A": 1.0, "B": 1.0})["A"] == pytest.approx(0.25)
    # ...until it falls below a millionth of a capacity-second (about 32 half-lives for an hour)
    assert history.effective_weights(T0 + 3600 + 40 * DAY, {"A": 1.0, "B": 1.0})["A"] == 1.0
    history.add(T0 + 3600 + 40 * DAY, {}, 0)
    assert history.usage == {}


def test_the_effective_weight_never_falls_below_the_configs_least_weight():
    history = ran(FairShare(DAY), {"A": 1.0}, 3600)
    weights = history.effective_weights(T0 + 3600, {"A": 0.001, "B": 1000.0})
    assert weights == {"A": MIN_EFFECTIVE_WEIGHT, "B": 1000.0}
    assert history.effective_weights(T0 + 3600, {"A": 1e-4, "B": 1.0})["A"] == 1e-4  # never raised


def test_nested_groups_compare_only_with_their_siblings_and_a_parent_counts_its_subtree():
    parents = {"phys": None, "chem": None, "alice": "phys", "bob": "phys", "carol": "chem"}
    weights = {"phys": 1.0, "chem": 1.0, "alice": 1.0, "bob": 1.0, "carol": 1.0}
    history = ran(FairShare(DAY), {"alice": 0.5, "carol": 0.5}, 3600)
    standings = history.standings(T0 + 3600, weights, parents)
    # phys (alice's) and chem (carol's) used the same: each U = S = 1/2
    assert standings["phys"].usage_share == pytest.approx(0.5) and standings["phys"].effective == pytest.approx(0.5)
    assert standings["chem"].effective == pytest.approx(0.5)
    # alice is compared with bob alone: U = 1, S = 1/2; carol has no sibling: U = S = 1
    assert standings["alice"].effective == pytest.approx(0.25) and standings["bob"].effective == 1.0
    assert standings["carol"].effective == pytest.approx(0.5)


def test_a_cycle_or_a_bad_weight_is_refused_naming_the_group():
    history = ran(FairShare(DAY), {"A": 1.0}, 10)
    with pytest.raises(ValueError, match="cycle"):
        history.effective_weights(T0 + 10, {"A": 1.0, "B": 1.0}, {"A": "B", "B": "A"})
    for bad in (0, -1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match=r"weights\['B'\]"):
            history.effective_weights(T0 + 10, {"A": 1.0, "B": bad})
    with pytest.raises(ValueError, match="half_life_s"):
        FairShare(0)


def test_json_round_trip():
    history = ran(FairShare(DAY), {"A": 0.3, "B": 0.7}, 60)
    data = json.loads(json.dumps(history.to_json()))
    again = FairShare.from_json(data, DAY)
    assert again == history
    assert FairShare.from_json(FairShare(DAY).to_json(), DAY) == FairShare(DAY)


GOOD = {"version": 1, "at": T0, "usage": {"A": 1.0}}


@pytest.mark.parametrize("data, where", [
    ([], "JSON object"),
    ({"version": 1, "at": T0}, "keys must be"),
    ({**GOOD, "extra": 1}, "keys must be"),
    ({**GOOD, "version": 2}, "version"),
    ({**GOOD, "version": True}, "version"),
    ({**GOOD, "at": math.nan}, "at"),
    ({**GOOD, "at": -1}, "at"),
    ({**GOOD, "at": "now"}, "at"),
    ({**GOOD, "at": 10**400}, "at"),
    ({**GOOD, "usage": []}, "usage"),
    ({**GOOD, "usage": {"A": math.inf}}, r"usage\['A'\]"),
    ({**GOOD, "usage": {"A": -1.0}}, r"usage\['A'\]"),
    ({**GOOD, "usage": {"A": math.nan}}, r"usage\['A'\]"),
    ({**GOOD, "usage": {"A": None}}, r"usage\['A'\]"),
    ({**GOOD, "usage": {"A": False}}, r"usage\['A'\]"),
    ({**GOOD, "usage": {"../x": 1.0}}, r"usage\['../x'\]"),
    ({**GOOD, "usage": {"A": 1e308, "B": 1e308}}, "total"),
])
def test_hostile_history_is_refused_naming_the_key(data, where):
    with pytest.raises(ValueError, match=where):
        FairShare.from_json(data, DAY)


# The daemon's stage: a file under the state directory.

def stage(directory) -> tuple[FairShareHistory, Journal]:
    journal = Journal()
    return FairShareHistory(directory, DAY, journal), journal


def test_saved_history_is_loaded_by_the_next_daemon_with_mode_0644(tmp_path):
    first, _ = stage(tmp_path)
    assert first.history == FairShare(DAY)  # no file yet: an empty history, no warning
    first.record(T0, {"A": 0.5}, 0)
    first.record(T0 + 60, {"A": 0.5}, 60)
    old_umask = os.umask(0o077)
    try:
        assert first.save()
    finally:
        os.umask(old_umask)
    path = tmp_path / FILE_NAME
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert not list(tmp_path.glob(".*.tmp")) and not list(tmp_path.glob("*.json"))
    second, journal = stage(tmp_path)
    assert second.history == first.history and not journal.events
    assert second.weights(T0 + 60, {"A": 1.0, "B": 1.0}) == pytest.approx({"A": 0.25, "B": 1.0})
    assert set(second.standings(T0 + 60, {"A": 1.0})) == {"A"}


@pytest.mark.parametrize("content", [b"{not json", b'{"version": 1, "at": null, "usage": {"A": -1}}',
                                     b"\xff\xfe", b"[" * 100_000, b" " * (MAX_FILE_BYTES + 1)])
def test_a_corrupt_file_is_set_aside_with_a_warning_and_the_daemon_starts_afresh(tmp_path, caplog, content):
    (tmp_path / FILE_NAME).write_bytes(content)
    with caplog.at_level(logging.WARNING, logger="governor.daemon"):
        history, journal = stage(tmp_path)
    assert history.history == FairShare(DAY)
    assert (tmp_path / (FILE_NAME + ".bad")).read_bytes() == content and not (tmp_path / FILE_NAME).exists()
    assert "set aside" in journal.events[-1]["message"] and "set aside" in caplog.text
    assert history.save() and stage(tmp_path)[0].history == FairShare(DAY)


def test_a_link_or_a_file_others_may_write_is_not_trusted(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text(json.dumps(GOOD))
    (tmp_path / FILE_NAME).symlink_to(target)
    history, journal = stage(tmp_path)
    assert history.history == FairShare(DAY) and journal.events and target.exists()
    (tmp_path / FILE_NAME).write_text(json.dumps(GOOD))
    os.chmod(tmp_path / FILE_NAME, 0o666)
    history, journal = stage(tmp_path)
    assert history.history == FairShare(DAY) and "writable by others" in journal.events[-1]["message"]


def test_a_failed_save_is_told_once_and_does_not_raise(tmp_path):
    history, journal = stage(tmp_path / "missing")
    assert not history.save() and not history.save()
    assert len(journal.events) == 1 and "cannot write" in journal.events[0]["message"]
    (tmp_path / "missing").mkdir()
    assert history.save() and "written again" in journal.events[-1]["message"]
