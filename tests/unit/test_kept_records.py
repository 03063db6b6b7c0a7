"""The daemon's last ended records are kept per user fairly: one user's churn of 1,005 short
tasks pushed every other user's records out of the last 1,000 (an attacker's check)."""

from hypothesis import given
from hypothesis import strategies as st

from governor.core.kept_records import KeptRecords


def test_a_churning_owner_pushes_out_her_own_records_not_anothers():
    kept = KeptRecords(10, owner=lambda record: record[0])
    kept.append(("victim", 0))
    for n in range(1, 1006):
        kept.append(("attacker", n))
    assert len(kept) == 10 and kept[0] == ("victim", 0)
    assert [n for who, n in kept if who == "attacker"] == list(range(997, 1006))  # her newest, in order
    assert kept[-1] == ("attacker", 1005)


@given(st.lists(st.integers(0, 4), max_size=200), st.integers(1, 20))
def test_never_more_than_the_limit_in_order_and_an_owner_under_her_share_keeps_all_hers(owners, limit):
    kept = KeptRecords(limit, owner=lambda record: record[0])
    for n, owner in enumerate(owners):
        kept.append((owner, n))
    records = list(kept)
    assert len(records) == min(limit, len(owners))
    assert [n for _, n in records] == sorted(n for _, n in records)  # oldest first
    appended = {owner: [n for n, o in enumerate(owners) if o == owner] for owner in set(owners)}
    share = limit // max(1, len(appended))
    for owner, numbers in appended.items():
        mine = [n for o, n in records if o == owner]
        assert mine == numbers[len(numbers) - len(mine):]  # what is kept of hers is her newest
        if len(numbers) <= share:
            assert mine == numbers  # under her share: none pushed out


def test_the_daemons_ended_records_keep_another_users_through_ones_churn(tmp_path, monkeypatch):
    import governor.daemon.exits as exits
    from support.daemons import launch, make_daemon, on_loop

    monkeypatch.setattr(exits, "ENDED_KEPT", 5)
    daemon = make_daemon(tmp_path)
    driver = daemon.hierarchy.driver
    for n, uid in enumerate([0] + [65534] * 12):  # root's one, then nobody's churn
        started = launch(daemon, 100 + n, uid=uid, cpu=0.1)
        driver.procs.pop(started["cgroup"].removeprefix("/fake/"), None)  # its processes gone
        on_loop(daemon, lambda: daemon.exits.check([started["task"]], "exit"))
    kept = [(record.task.uid, record.task.id) for record in daemon.exits.ended]
    assert len(kept) == 5 and kept[0] == (0, "1")
    assert [task for uid, task in kept[1:]] == ["10", "11", "12", "13"]
