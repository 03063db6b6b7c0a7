"""Requests to the in-memory daemon (:mod:`support.daemons`) as a given user, for the tests of
users' task commands: :func:`ask` (one reply), :func:`launch_as` (a launch's last reply), and
:data:`NOBODY`, a host user in no configured group."""

import asyncio

from governor.wire.protocol import LaunchRequest, Peer
from support.daemons import GIB, collect


NOBODY = 65534  # a host user in no configured group: its own group "nobody"


def ask(daemon, request, uid=0):
    return asyncio.run(daemon.requests.handle(request, Peer(pid=1, uid=uid, gid=uid)))


def launch_as(daemon, pid, uid, **fields):
    request = LaunchRequest(pid=pid, group=None, demand={"cpu": 0.5, "memory": GIB}, command=("/usr/bin/work", "-v"),
                            **fields)
    return asyncio.run(collect(daemon.requests.stream(request, Peer(pid=pid, uid=uid, gid=uid))))[-1]
