"""A parsed TOML document with one key changed or removed (:func:`edited`), for the tests that
give a loader (the config's, a scenario's) each bad input as an edit of a good one."""

import copy

DELETE = object()  # as the value: the key is removed


def edited(document: dict, path: tuple, value) -> dict:
    """A deep copy of ``document`` with the key at ``path`` set to ``value`` (or removed when
    value is :data:`DELETE`)."""
    data = copy.deepcopy(document)
    table = data
    for name in path[:-1]:
        table = table[name]
    if value is DELETE:
        del table[path[-1]]
    else:
        table[path[-1]] = value
    return data
