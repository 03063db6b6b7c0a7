"""Facts of the host and its files: process events, exits, GPUs through NVML, login
sessions' rules, who may do what, the state directory's records and the daemons' registry."""
