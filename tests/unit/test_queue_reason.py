"""Issue 32, point 5: the queue's reason is computed once (:func:`governor.core.queue.reason`) and
every view shows that one string: ``run --no-wait``, ``ps``, ``status``, ``explain``, ``top``
and the metrics. Rendered from one queued snapshot of the daemon (in-memory driver)."""

import asyncio
import io

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console
from support.daemons import GIB, launch, make_daemon

from governor.host import access
from governor.cli.explain_view import explain_renderables
from governor.cli.ps_view import tasks_table
from governor.cli.status_view import status_renderables
from governor.cli.top_state import TopState
from governor.cli.top_view import top_view
from governor.errors import RequestError
from governor.wire.metrics import Metrics
from governor.wire.protocol import LaunchRequest, Peer, PsRequest
from governor.wire.status_json import decode
from governor.wire.ps_types import TaskRow, decode_rows

# A member's CPU user_limit holds their queued tasks (before: `--no-wait` said "memory: its
# turn" for the second, `status` and `explain` "its turn" / "held by —").
CONFIG = """
[capacity]
cpu = 2
memory = "8G"
[groups.A]
users = ["root"]
user_limit = { cpu = 0.5 }
[sessions]
enabled = false
"""


def text(renderables, width=400):
    console = Console(file=io.StringIO(), width=width, color_system=None)
    for renderable in renderables if isinstance(renderables, list) else [renderables]:
        console.print(renderable)
    return " ".join(console.file.getvalue().split())  # the cells' folding undone


def test_one_queued_snapshot_reads_the_same_in_every_view(tmp_path):
    daemon = make_daemon(tmp_path, CONFIG)
    launch(daemon, 100, group="A", cpu=0.4, memory=GIB)

    async def scenario():
        held = daemon.requests.stream(LaunchRequest(pid=101, group="A", demand={"cpu": 0.4, "memory": GIB}, command=("w",)),
                             Peer(pid=101, uid=0, gid=0))
        await held.__anext__()
        try:
            launch_later = daemon.requests.stream(LaunchRequest(pid=102, group="A", demand={"cpu": 0.1, "memory": GIB},
                                                       command=("w",), wait=False), Peer(pid=102, uid=0, gid=0))
            async for _ in launch_later:
                pass
        except RequestError as refused:
            no_wait = str(refused)
        else:
            raise AssertionError("the task behind a held one started")
        snapshot = daemon.observation.status()
        explained, listed = daemon.requests.explain(), daemon.requests.ps(PsRequest(), access.identify(0, 0))
        await held.aclose()
        return no_wait, snapshot, explained, listed

    no_wait, snapshot, explained, listed = asyncio.run(scenario())
    [entry] = snapshot["queue"]
    reason = entry["reason"]
    assert reason.startswith("root's user_limit in group A: cpu")
    assert reason in no_wait and "its turn" not in no_wait
    assert reason in text(status_renderables(decode(snapshot), now=entry["queued_at"]))
    assert reason in text(explain_renderables(explained, now=entry["queued_at"]))
    [row] = [row for row in listed["tasks"] if row["state"] == "queued"]
    assert row["reason"] == reason and reason in text(tasks_table(decode_rows(TaskRow, listed["tasks"], "tasks"), now=entry["queued_at"], users=True))
    assert reason in text(top_view(TopState(status=decode(snapshot)), width=400, height=60, now=entry["queued_at"]))
    metrics = generate_latest(Metrics(lambda: decode(snapshot)).registry).decode()
    [sample] = [s for family in text_string_to_metric_families(metrics) for s in family.samples
                if s.name == "governor_queue_task_info"]
    assert sample.labels["reason"] == reason


TREE = """
[capacity]
cpu = 2
memory = "8G"
[groups.dept]
limit = { memory = "2G" }
[groups.bio-lab]
parent = "dept"
users = ["root"]
[sessions]
enabled = false
"""


def test_explain_of_a_child_group_names_the_parents_limit_that_holds_it(tmp_path):
    daemon = make_daemon(tmp_path, TREE)
    launch(daemon, 100, group="bio-lab", cpu=0.1, memory=1.5 * GIB)

    async def scenario():
        held = daemon.requests.stream(LaunchRequest(pid=101, group="bio-lab", demand={"cpu": 0.1, "memory": GIB},
                                           command=("w",)), Peer(pid=101, uid=0, gid=0))
        await held.__anext__()
        explained = daemon.requests.explain()
        await held.aclose()
        return explained

    explained = asyncio.run(scenario())
    [entry] = explained["queue"]
    assert entry["reason"].startswith("group dept's limit: memory 1.5G of 2.0G")
    assert entry["reason"] in text(explain_renderables(explained, "bio-lab", now=entry["queued_at"]))
