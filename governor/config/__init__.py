"""The config: the resource registry, units, the TOML checks and the typed settings a
governor.toml parses into. Pure: the caller reads the file."""
