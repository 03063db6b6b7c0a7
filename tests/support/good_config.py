"""A good config as tomllib returns it (:data:`GOOD`), for the config loader's tests: every
section given, two I/O devices, three groups; each bad input is a change to it."""

G = 1024**3
M = 1024**2


# As tomllib returns it: [[capacity.io]] is a list of tables.
GOOD = {
    "capacity": {
        "reserve": {"cpu": 0.5, "memory": "1G"},
        "io": [
            {"device": "/dev/nvme0n1", "read": "2G", "write": "1G"},
            {"device": "/dev/sda", "read": "200M", "write": 100 * M},
        ],
    },
    "defaults": {"task": {"cpu": 1, "memory": "1.5G", "io_read": "10M"}},
    "enforcement": {"cpu": "cores", "memory": "hard", "memory_protection": False},
    "groups": {
        "physics": {"weight": 2, "unix_groups": ["physics"], "users": ["alice"]},
        "ops": {"users": ["bob", "alice"]},
        "*": {"weight": 0.5},
    },
    "sessions": {"cpu": 0.5, "memory": "1G", "io_write": "5M", "exempt": ["backup"]},
    "daemon": {"admin_group": "wheel", "sample_interval": 0.5, "reconcile_interval": 10,
               "state_dir": "/var/lib/governor", "max_tasks_per_user": 10, "max_connections_per_user": 4},
}
