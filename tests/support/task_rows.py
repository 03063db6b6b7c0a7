"""``ps`` rows and ended-task records as the daemon sends them, for the views' and the CLI's
tests: one running task with a process tree and one queued (:data:`ROWS`), one ended
(:data:`ENDED`)."""

M = 1024**2
G = 1024**3
ROWS = [
    {"id": "7", "name": "build", "group": "physics", "user": "alice", "uid": 1000, "session": False, "pid": 4100,
     "command": ["make", "-j4"], "started": 1000.0, "time_limit": 5400.0, "state": "running",
     "demand": {"cpu": 2.0, "memory": 4 * G}, "guarantee": {"cpu": 1.5}, "reserved": {"memory": 4 * G},
     "usage": {"cpu": 1.98, "memory": 812 * M},
     "processes": [{"pid": 4100, "ppid": 1, "name": "make"}, {"pid": 4102, "ppid": 4100, "name": "cc1"},
                   {"pid": 4101, "ppid": 4100, "name": "sh"}, {"pid": 4103, "ppid": 4101, "name": "ld"}],
     "processes_total": 4},
    {"id": "8", "name": "simulation-with-a-rather-long-name", "group": "physics", "user": "alice", "uid": 1000,
     "session": False, "pid": 4200, "command": ["sim"], "started": None, "queued_at": 1090.0, "time_limit": None,
     "state": "queued", "position": 1, "demand": {"cpu": 1.0, "memory": 16 * G}, "guarantee": {}, "reserved": {},
     "reason": "memory: waits for 12.0G to free (held by physics 16.0G, ops 12.0G)", "usage": {},
     "processes": [], "processes_total": 0},
]
ENDED = [{"id": "5", "name": "sleep", "group": "physics", "user": "alice", "uid": 1000, "pid": 4000,
          "command": ["sleep", "100"], "session": False, "demand": {"cpu": 1.0, "memory": G}, "time_limit": 2.0,
          "started": 900.0, "ended": 902.01, "wall_s": 2.01, "reason": "time_limit", "stopped_by": None,
          "exit_status": None, "cpu_s": 1.996, "throttled_s": 0.25, "memory_peak": 1258291, "oom_kills": 0}]
