"""One user's costly reads (``ps``, ``explain``) take at most a tenth of the daemon's time: an
attacker's 30 connections asking ``ps --all`` in a loop kept the daemon at a full core, and other
users' launches took seconds."""

import asyncio

from support.daemons import launch, make_daemon, on_loop

from governor.daemon.pacing import READ_SHARE, Pacer
from governor.wire.protocol import ExplainRequest, Peer, PsRequest


class Clock:
    """Seconds that pass only as the reads say, and waits that last until the test lets them
    end (the time they waited then passes)."""

    def __init__(self):
        self.now = 100.0
        self.waits: list[tuple[float, asyncio.Future]] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        gate = asyncio.get_running_loop().create_future()
        self.waits.append((seconds, gate))
        await gate

    def end_a_wait(self) -> float:
        seconds, gate = self.waits.pop(0)
        self.now += seconds
        gate.set_result(None)
        return seconds


def test_a_users_reads_take_at_most_their_share_and_others_are_not_held_by_them():
    clock = Clock()
    pacer = Pacer(clock=clock, sleep=clock.sleep)
    began: list[tuple[int, float]] = []

    def work(uid: int, cost: float):
        def read():
            began.append((uid, clock.now))
            clock.now += cost
            return uid
        return read

    async def until_waiting(count: int):
        async with asyncio.timeout(5):  # (a regression fails, not hangs)
            while len(clock.waits) < count:
                await asyncio.sleep(0)

    async def asks():
        flood = [asyncio.ensure_future(pacer.read(1000, work(1000, 0.1))) for _ in range(4)]
        await until_waiting(1)  # its first read done, the second waits its turn; the others behind it
        others = await asyncio.gather(pacer.read(1001, work(1001, 0.2)), pacer.read(0, work(0, 0.3)))
        assert len(clock.waits) == 1  # neither waited
        waited = []
        for left in (2, 1, 0):
            waited.append(clock.end_a_wait())
            await until_waiting(1 if left else 0) if left else await asyncio.gather(*flood)
        return others, waited

    others, waited = asyncio.run(asks())
    assert others == [1001, 0]
    assert [uid for uid, _ in began] == [1000, 1001, 0, 1000, 1000, 1000]
    # After a read of 0.1 s, uid 1000's next starts 0.9 s after it ended at the soonest: its
    # reads take a tenth of the time. (This clock's waits do not overlap the others' reads.)
    assert [round(w, 9) for w in waited] == [0.9, 0.9, 0.9]
    starts = [at for uid, at in began if uid == 1000]
    assert all(b - a >= 0.1 / READ_SHARE - 1e-9 for a, b in zip(starts, starts[1:]))
    assert round(pacer.due(1000) - starts[-1], 9) == round(0.1 / READ_SHARE, 9)  # and the next one waits too


def test_a_read_that_fails_is_paced_too_and_nothing_is_kept_of_a_uid_once_due():
    clock = Clock()
    pacer = Pacer(clock=clock, sleep=clock.sleep)

    def failing():
        clock.now += 0.5
        raise ValueError("refused")

    async def ask():
        try:
            await pacer.read(1000, failing)
        except ValueError:
            pass
        due = pacer.due(1000)
        clock.now += 10  # past it: the next read starts at once
        await pacer.read(1000, lambda: None)
        return due

    assert asyncio.run(ask()) == 100.5 + 0.5 / READ_SHARE - 0.5
    assert not clock.waits
    assert pacer.due(1000) == 0 and not pacer._turns and not pacer._waiting  # a read of no time: due now


def test_ps_and_explain_of_a_user_go_through_the_pacer_and_roots_do_not(tmp_path):
    daemon = make_daemon(tmp_path)
    launch(daemon, 4242, group="A", cpu=0.5)
    asked = []
    read = daemon.requests.pacer.read

    async def noted(uid, work):
        asked.append(uid)
        done = await read(uid, work)
        assert isinstance(done.encoded(), bytes)  # encoded within the paced work: charged to the user
        return done

    daemon.requests.pacer.read = noted
    for uid in (1000, 0):
        on_loop(daemon, lambda: daemon.requests.handle(PsRequest(all=True), Peer(pid=1, uid=uid, gid=0)))
    on_loop(daemon, lambda: daemon.requests.handle(ExplainRequest(), Peer(pid=1, uid=1000, gid=0)))
    assert asked == [1000, 0, 1000]
    assert daemon.requests.pacer.due(1000) > 0 and daemon.requests.pacer.due(0) == 0


def test_uids_the_user_database_does_not_know_share_one_pace(tmp_path):
    # A user's subordinate uids (a user namespace's) would each take a tenth of the daemon's time.
    from governor.daemon.requests import UNKNOWN_UIDS

    daemon = make_daemon(tmp_path)
    unknown = [uid for uid in range(4_000_000_000, 4_000_000_100) if daemon.policy.identities.identify(uid, uid).user.isdigit()]
    assert len(unknown) >= 2
    paced = {daemon.requests.paced_as(uid) for uid in unknown[:2]}
    assert paced == {UNKNOWN_UIDS}
    import pwd

    known = next((entry.pw_uid for entry in pwd.getpwall() if entry.pw_uid > 0), None)
    if known is not None:  # a user the host knows: a pace of its own
        assert daemon.requests.paced_as(known) == known
    assert daemon.requests.paced_as(0) == 0
