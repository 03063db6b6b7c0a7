"""A status snapshot shaped like the daemon's (schema in cli/status_view.py), for view and CLI tests.

Host: 16 cores, 64G, one disk. physics (weight 2) and ops (weight 1); both dominated by CPU,
physics at twice ops's share (8/16 = 50%, 4/16 = 25%) as weighted DRF equalises s/w.
"""

G = 1024**3
M = 1024**2
NOW = 1_700_000_100.0

STATUS = {
    "daemon": {"pid": 812, "started": NOW - 7380, "cgroup_mode": "v2",
               "cgroup_root": "/sys/fs/cgroup/governor.slice", "config": "/etc/governor/governor.toml",
               "version": "a key this CLI does not know"},
    "capacity": {"cpu": 16, "memory": 64 * G, "io.nvme0n1.read": 2 * G, "io.nvme0n1.write": 1 * G},
    "allocated": {"cpu": 12, "memory": 24 * G, "io.nvme0n1.read": 200 * M, "io.nvme0n1.write": 0},
    "used": {"cpu": 9.5, "memory": 20 * G, "io.nvme0n1.read": 150 * M, "io.nvme0n1.write": 5 * M},
    "filling": {"at": NOW - 3, "trigger": "launch", "duration_ms": 1.25},
    "groups": {
        "physics": {
            "weight": 2.0, "demand": {"cpu": 10, "memory": 16 * G}, "allocation": {"cpu": 8, "memory": 12.8 * G},
            "lambda": 0.8, "dominant_resources": ["cpu"], "dominant_share": 0.5, "stop": "cpu saturated",
            "usage": {"cpu": 7.25, "memory": 11 * G},
            "tasks": [
                {"id": "t7", "pid": 4242, "uid": 1001, "user": "alice",
                 "command": ["python", "train.py", "--epochs", "100", "--data", "/scratch/alice/imagenet"],
                 "started": NOW - 600, "demand": {"cpu": 10, "memory": 16 * G},
                 "limits": {"cpu.max": "800000 100000", "memory.high": 13743895347},
                 "usage": {"cpu": 7.25, "memory": 11 * G}},
            ],
        },
        "ops": {
            "weight": 1.0, "demand": {"cpu": 4, "memory": 12 * G, "io.nvme0n1.read": 200 * M},
            "allocation": {"cpu": 4, "memory": 12 * G, "io.nvme0n1.read": 200 * M},
            "lambda": 1.0, "dominant_resources": ["cpu"], "dominant_share": 0.25, "stop": "demand met",
            "usage": {"cpu": 2.25, "memory": 9 * G, "io.nvme0n1.read": 150 * M},
            "tasks": [
                {"id": "t8", "pid": 5001, "uid": 1002, "user": "bob", "command": ["backup.sh"],
                 "started": NOW - 60, "demand": {"cpu": 4, "memory": 12 * G, "io.nvme0n1.read": 200 * M},
                 "limits": {"cpu.max": "400000 100000", "memory.high": 12 * G,
                            "io.max": "259:0 rbps=209715200 wbps=max"},
                 "usage": {"cpu": 2.25, "memory": 9 * G, "io.nvme0n1.read": 150 * M}},
            ],
        },
        "idle": {"weight": 1.0, "demand": {}, "allocation": {}, "lambda": 0.0, "dominant_resources": [],
                 "dominant_share": 0.0, "stop": "no demand", "usage": {}, "tasks": []},
    },
}
