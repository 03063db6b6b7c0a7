"""A status snapshot shaped like the daemon's (schema in cli/status_view.py), for view and CLI tests.

Host: 16 cores, 64G, one disk. physics (weight 2) and ops (weight 1); both dominated by CPU,
physics at twice ops's share (8/16 = 50%, 4/16 = 25%) as weighted DRF equalises s/w.

Allocations are guarantees and declarations caps: physics's two tasks declare 10 cores (its cap),
it is guaranteed 8 and uses 8.4, so it borrows 0.4 cores that ops leaves idle; their declared
memory (16G) is what it reserves. The group "idle" has no task (weight 1: floor 1/4). The disk has no
proportional I/O controller (``io.max``: guarantees are hard limits there). Two tasks wait in the
memory queue: declared memory is 28G of 64G, so t10's 40G needs 4G more to free; t11's 8G would
fit (``waiting_for`` 0) but is admitted in order, after t10.
"""

G = 1024**3
M = 1024**2
NOW = 1_700_000_100.0

QUEUE = [
    {"task": "t10", "group": "ops", "user": "bob", "uid": 1002, "command": ["pg_restore", "-j", "4", "dump.pgdata"],
     "demand": {"cpu": 2, "memory": 40 * G}, "queued_at": NOW - 42, "position": 1, "waiting_for": 4 * G,
     "held_by": [{"group": "physics", "memory": 16 * G}, {"group": "ops", "memory": 12 * G}],
     "reason": "memory: waits for 4.0G to free (held by physics 16.0G, ops 12.0G)"},
    {"task": "t11", "group": "physics", "user": "carol", "uid": 1003, "command": ["python", "big.py"],
     "demand": {"cpu": 0.5, "memory": 8 * G}, "queued_at": NOW - 5, "position": 2, "waiting_for": 0,
     "held_by": [{"group": "physics", "memory": 16 * G}, {"group": "ops", "memory": 12 * G}],
     "reason": "its turn: the tasks ahead of it start first"},
]

STATUS = {
    "daemon": {"pid": 812, "started": NOW - 7380, "cgroup_mode": "v2",
               "cgroup_root": "/sys/fs/cgroup/governor.slice", "config": "/etc/governor/governor.toml",
               "io_sharing": {"nvme0n1": "io.max"},
               "version": "a key this CLI does not know"},
    "capacity": {"cpu": 16, "memory": 64 * G, "io.nvme0n1.read": 2 * G, "io.nvme0n1.write": 1 * G},
    "guaranteed": {"cpu": 12, "io.nvme0n1.read": 200 * M},
    "reserved": {"memory": 28 * G},
    "used": {"cpu": 10.65, "memory": 20 * G, "io.nvme0n1.read": 150 * M, "io.nvme0n1.write": 5 * M},
    "filling": {"at": NOW - 3, "trigger": "launch", "duration_ms": 1.25},
    "groups": {
        "physics": {
            "weight": 2.0, "floor": 0.5, "members": ["alice", "carol"], "idle": False,
            "demand": {"cpu": 10, "memory": 16 * G}, "allocation": {"cpu": 8, "memory": 12.8 * G},
            "guarantee": {"cpu": 8}, "reserved": {"memory": 16 * G},
            "lambda": 0.8, "dominant_resources": ["cpu"], "dominant_share": 0.5, "stop": "cpu saturated",
            "usage": {"cpu": 8.4, "memory": 11 * G}, "borrowed": {"cpu": 0.4},
            "tasks": [
                {"id": "t7", "pid": 4242, "uid": 1001, "user": "alice",
                 "command": ["python", "train.py", "--epochs", "100", "--data", "/scratch/alice/imagenet"],
                 "started": NOW - 600, "demand": {"cpu": 8, "memory": 12 * G},
                 "limits": {"cpu.max": "800000 100000", "memory.high": 12 * G}, "reserved": {"memory": 12 * G},
                 "usage": {"cpu": 7.25, "memory": 9 * G}},
                {"id": "t9", "pid": 4300, "uid": 1001, "user": "alice", "command": ["python", "eval.py"],
                 "started": NOW - 120, "demand": {"cpu": 2, "memory": 4 * G},
                 "limits": {"cpu.max": "200000 100000", "memory.high": 4 * G}, "reserved": {"memory": 4 * G},
                 "usage": {"cpu": 1.15, "memory": 2 * G}},
            ],
        },
        "ops": {
            "weight": 1.0, "floor": 0.25, "members": ["bob"], "idle": False,
            "demand": {"cpu": 4, "memory": 12 * G, "io.nvme0n1.read": 200 * M},
            "allocation": {"cpu": 4, "memory": 12 * G, "io.nvme0n1.read": 200 * M},
            "guarantee": {"cpu": 4, "io.nvme0n1.read": 200 * M}, "reserved": {"memory": 12 * G},
            "lambda": 1.0, "dominant_resources": ["cpu"], "dominant_share": 0.25, "stop": "demand met",
            "usage": {"cpu": 2.25, "memory": 9 * G, "io.nvme0n1.read": 150 * M}, "borrowed": {},
            "tasks": [
                {"id": "t8", "pid": 5001, "uid": 1002, "user": "bob", "command": ["backup.sh"],
                 "started": NOW - 60, "demand": {"cpu": 4, "memory": 12 * G, "io.nvme0n1.read": 200 * M},
                 "limits": {"cpu.max": "400000 100000", "memory.high": 12 * G,
                            "io.max": "259:0 rbps=209715200 wbps=max"}, "reserved": {"memory": 12 * G},
                 "usage": {"cpu": 2.25, "memory": 9 * G, "io.nvme0n1.read": 150 * M}},
            ],
        },
        "idle": {"weight": 1.0, "floor": 0.25, "members": ["dave"], "idle": True, "demand": {}, "allocation": {},
                 "guarantee": {}, "reserved": {}, "lambda": 0.0, "dominant_resources": [],
                 "dominant_share": 0.0, "stop": "", "usage": {}, "borrowed": {}, "tasks": []},
    },
    "queue": QUEUE,
}


def without_new_keys(status: dict) -> dict:
    """``status`` as a daemon from before guarantees and the memory queue sends it: no
    ``borrowed``, ``queue`` or ``daemon.io_sharing``."""
    import copy

    old = copy.deepcopy(status)
    old.pop("queue", None)
    old.get("daemon", {}).pop("io_sharing", None)
    for group in old.get("groups", {}).values():
        group.pop("borrowed", None)
    return old


def with_gpus(status: dict) -> dict:
    """``status`` on a host with four governed GPUs: physics's t7 holds 0 and 1 (it declared
    2), ops's t8 holds 3 (a MIG instance), 2 is free (a listed node NVML does not know: no UUID)."""
    import copy

    gpus = copy.deepcopy(status)
    gpus["capacity"]["gpu"] = 4
    gpus["reserved"]["gpu"] = 3
    physics, ops = gpus["groups"]["physics"], gpus["groups"]["ops"]
    for group, task, held in ((physics, 0, [0, 1]), (ops, 0, [3])):
        group["demand"]["gpu"] = group["reserved"]["gpu"] = len(held)
        group["tasks"][task]["demand"]["gpu"] = group["tasks"][task]["reserved"]["gpu"] = len(held)
        group["tasks"][task]["gpus"] = held
    physics["tasks"][1]["gpus"] = []
    gpus["gpus"] = [
        {"index": 0, "node": "/dev/nvidia0", "uuid": "GPU-8a3bbf48-4b8c-4d2e-9f10-0123456789ab",
         "name": "NVIDIA A100-SXM4-40GB", "task": "t7", "group": "physics", "user": "alice"},
        {"index": 1, "node": "/dev/nvidia1", "uuid": "GPU-9b4ccf59-4b8c-4d2e-9f10-0123456789ab",
         "name": "NVIDIA A100-SXM4-40GB", "task": "t7", "group": "physics", "user": "alice"},
        {"index": 2, "node": "/dev/nvidia2", "uuid": None, "name": "", "task": None, "group": None, "user": None},
        {"index": 3, "node": "/dev/nvidia3", "uuid": "MIG-4f0c1234-aaaa-4bbb-8ccc-dddddddddddd",
         "name": "NVIDIA A100 MIG 1g.5gb", "mig_parent": 3, "task": "t8", "group": "ops", "user": "bob"},
    ]
    return gpus
