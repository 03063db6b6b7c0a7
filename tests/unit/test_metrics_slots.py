"""The metrics endpoint's scrape slots: bounded descriptors for idle connections (issue 22), at
most 2 slots per client, a client being the uid at the other end of a local connection (a local
user's 40 idle connections kept every scrape out, unsaid: a stranger's check), and a slot taken
from an idle connection when every one is held (8 users together held them all)."""

import asyncio
import os
import socket
import subprocess
import sys

import pytest
from support.rendered import samples
from support.status_sample import STATUS
from support.waits import until

import governor.wire.metrics as module
from governor.host.socket_owner import answers
from governor.wire.metrics import Metrics
from governor.wire.status_json import decode


def serving() -> tuple[Metrics, int]:
    metrics = Metrics(lambda: decode(STATUS))
    metrics.bind("127.0.0.1", 0)
    return metrics, metrics._listener.getsockname()[1]


def refused(metrics: Metrics, why: str | None = None) -> float:
    got = samples(metrics)
    return sum(got[("governor_metrics_refused_total", (("reason", reason),))]
               for reason in ("busy", "client", "idle") if why in (None, reason))


async def scrape(port: int) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    data = await reader.read()
    writer.close()
    return data


def needs_uids():
    if os.geteuid() != 0:
        pytest.skip("needs root: the connections are held by other users")
    if not answers():
        pytest.skip("this kernel answers no TCP socket diagnostics (tcp_diag): local clients are told apart "
                    "by address only")


async def holders(port: int, uids: list[int], each: int) -> list[asyncio.subprocess.Process]:
    """A process per uid of ``uids``, each holding ``each`` idle connections to ``port``."""
    code = ("import os, socket, sys\nos.setgid(65534); os.setuid(int(sys.argv[1]))\n"
            f"held = [socket.create_connection(('127.0.0.1', {port})) for _ in range({each})]\n"
            "print('held', flush=True); sys.stdin.read()")
    started = [await asyncio.create_subprocess_exec(sys.executable, "-c", code, str(uid), stdin=subprocess.PIPE,
                                                    stdout=subprocess.PIPE) for uid in uids]
    for process in started:
        assert await process.stdout.readline() == b"held\n"
    return started


async def release(processes: list[asyncio.subprocess.Process]) -> None:
    for process in processes:
        process.stdin.close()
        await process.wait()


def test_idle_connections_cost_at_most_a_few_descriptors_for_a_few_seconds(monkeypatch):
    # Issue 22, point 3: nobody's ~1,010 idle connections each took a thread and a descriptor of
    # the daemon for ever (no timeout), until launches and status failed with EMFILE.
    monkeypatch.setattr(module, "SCRAPE_TIMEOUT_S", 0.5)
    metrics, port = serving()

    async def attack():
        await metrics.serve()
        fds = len(os.listdir("/proc/self/fd"))
        idle = [await asyncio.open_connection("127.0.0.1", port) for _ in range(200)]
        said = [asyncio.ensure_future(reader.read()) for reader, _ in idle]  # what each hears until closed
        await until(lambda: sum(heard.done() for heard in said) >= len(idle) - module.MAX_SCRAPES_PER_CLIENT,
                    "the server to close at once the connections over its limit")
        held = len(os.listdir("/proc/self/fd")) - fds - len(idle)  # the server's side of them
        await until(lambda: all(heard.done() for heard in said), "the scrape timeout to close the idle ones")
        answer = await scrape(port)
        for _, writer in idle:
            writer.close()
        await metrics.close()
        return held, await asyncio.gather(*said, return_exceptions=True), answer

    held, said, answer = asyncio.run(attack())
    assert held <= module.MAX_SCRAPES_PER_CLIENT + 1
    # Each new one took the slot of the client's oldest idle one, which was reset.
    assert all(isinstance(heard, ConnectionResetError) or heard == b"" for heard in said)
    assert refused(metrics, "idle") >= len(said) - module.MAX_SCRAPES_PER_CLIENT
    assert answer.startswith(b"HTTP/1.1 200 OK") and b"governor_group_dominant_share" in answer


def test_a_local_user_holding_connections_open_keeps_no_scrape_out(caplog):
    # 40 of nobody's idle connections held every slot: Prometheus's scrapes were reset, with no
    # 503 and no log line, and it paged that the daemon was down.
    needs_uids()
    metrics, port = serving()  # the default scrape timeout: nothing frees a slot meanwhile

    async def attack():
        await metrics.serve()
        nobody = await holders(port, [65534], 40)
        try:
            await until(lambda: metrics.holders().get("uid 65534", 0) + refused(metrics) == 40,
                        "each of nobody's connections to be held or refused")
            busy = metrics.holders()
            answers_ = [await scrape(port) for _ in range(3)]
        finally:
            await release(nobody)
        await metrics.close()
        return answers_, busy

    answers_, busy = asyncio.run(attack())
    assert busy == {"uid 65534": module.MAX_SCRAPES_PER_CLIENT}
    assert all(answer.startswith(b"HTTP/1.1 200 OK") and b"governor_group_dominant_share" in answer
               for answer in answers_)
    # nobody's own idle ones made way for her newer ones; root's took no slot of hers
    assert refused(metrics, "idle") == 40 - module.MAX_SCRAPES_PER_CLIENT and refused(metrics, "busy") == 0
    lines = [r.getMessage() for r in caplog.records if r.name == "governor.wire.metrics"]
    assert len(lines) == 1 and "from uid 65534 closed unserved (it had not asked" in lines[0]  # once a minute


def test_users_holding_every_slot_together_keep_no_scrape_out():
    # A reviewer's: 16 slots at 2 a client are all held by 8 users (or one user's 8 subordinate
    # uids). A new connection takes the slot of the oldest that has not asked.
    needs_uids()
    metrics, port = serving()
    uids = list(range(60001, 60001 + module.MAX_SCRAPES // module.MAX_SCRAPES_PER_CLIENT))

    async def attack():
        await metrics.serve()
        held = await holders(port, uids, module.MAX_SCRAPES_PER_CLIENT)
        try:
            await until(lambda: len(metrics._slots) == module.MAX_SCRAPES, "the users to hold every slot")
            answers_ = [await scrape(port) for _ in range(3)]
            left = sum(metrics.holders().values())
        finally:
            await release(held)
        await metrics.close()
        return answers_, left

    answers_, left = asyncio.run(attack())
    assert all(answer.startswith(b"HTTP/1.1 200 OK") for answer in answers_)
    assert left == module.MAX_SCRAPES - 1  # the first took an idle one's slot (and gave it up); the next found it free
    assert refused(metrics, "idle") == 1 and refused(metrics) == 1


def test_a_refused_client_that_sent_its_request_reads_the_503_not_a_reset(monkeypatch):
    # A reviewer's: closed with the request unread, the connection was reset and the 503 lost,
    # as Prometheus (which sends its request at once) would have seen it. Its share is held by
    # scrapes that asked: of a reply that does not fit the socket, read by no one.
    needs_uids()
    monkeypatch.setattr(module, "generate_latest", lambda registry: b"x" * (64 << 20))
    metrics, port = serving()
    code = ("import os, socket, sys\nos.setuid(65534)\n"
            f"held = [socket.create_connection(('127.0.0.1', {port})) for _ in range({module.MAX_SCRAPES_PER_CLIENT})]\n"
            "for each in held:\n    each.sendall(b'GET /metrics HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n')\n"
            "print('held', flush=True); sys.stdin.readline()\n"
            f"third = socket.create_connection(('127.0.0.1', {port}))\n"
            "third.sendall(b'GET /metrics HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n')\n"
            "said = b''\nwhile chunk := third.recv(4096):\n    said += chunk\n"
            "print(said.split(b'\\r\\n')[0].decode(), flush=True)")

    async def attack():
        await metrics.serve()
        nobody = await asyncio.create_subprocess_exec(sys.executable, "-c", code, stdin=subprocess.PIPE,
                                                      stdout=subprocess.PIPE)
        assert await nobody.stdout.readline() == b"held\n"
        await until(lambda: sum(slot.asked for slot in metrics._slots.values()) == module.MAX_SCRAPES_PER_CLIENT,
                    "nobody's connections to hold its share, asked")
        nobody.stdin.write(b"go\n")
        said = await nobody.stdout.readline()
        nobody.stdin.close()
        await nobody.wait()
        await metrics.close()
        return said

    assert asyncio.run(attack()) == b"HTTP/1.1 503 Service Unavailable\n"


def test_one_sharing_a_clients_identity_takes_an_idle_ones_slot_and_an_ipv4_peer_is_its_address():
    # A reviewer's: an IPv4 client known by no uid raised AttributeError (every remote scrape
    # over IPv4 reset); and a neighbour on the scraper's /64 (or behind its NAT) holding its 2
    # idle connections had the scraper refused.
    metrics, _ = serving()
    metrics._by_uid = False

    class Writer:
        def __init__(self, peer):
            self.peer, self.transport = peer, self

        def get_extra_info(self, name):
            return self.peer if name == "peername" else None

        def abort(self):
            self.aborted = True

    assert metrics._client(Writer(("192.0.2.1", 1))) == "192.0.2.1"
    assert metrics._client(Writer(("::ffff:192.0.2.1", 1, 0, 0))) == "192.0.2.1"
    assert metrics._client(Writer(("2001:db8:1::5", 1, 0, 0))) == "2001:db8:1::/64"
    idle = [Writer(("2001:db8:1::5", n)) for n in (1, 2)]
    for n, writer in enumerate(idle):
        metrics._slots[n] = module._Slot("2001:db8:1::/64", float(n), writer)
    assert metrics._free_a_slot("2001:db8:1::/64") and idle[0].aborted and 0 not in metrics._slots
    metrics._slots[1].asked = True
    assert not metrics._free_a_slot("2001:db8:1::/64")  # one that asked keeps its slot
    assert not metrics._free_a_slot("192.0.2.1")
