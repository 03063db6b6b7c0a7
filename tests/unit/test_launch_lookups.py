"""What the launch path keeps of its lookups (issue 37), and when it looks again: a caller in
the user database (until the database changes, or the periodic rescan), the groups a caller
may use and the guarantees kept as headroom (until another config is in force)."""

from __future__ import annotations

import asyncio
import pwd

import pytest

from support.daemons import CONFIG, GIB, launch, make_daemon

from governor.config.load import parse_config
from governor.errors import RequestError
from governor.host import access


def _refusing(monkeypatch):
    """The user database knows no one from now on."""
    monkeypatch.setattr(pwd, "getpwuid", lambda uid: (_ for _ in ()).throw(KeyError(uid)))


def _files(tmp_path):
    passwd, group = tmp_path / "passwd", tmp_path / "group"
    passwd.write_text("root:x:0:0::/root:/bin/sh\n")
    group.write_text("root:x:0:\n")
    return passwd, group


def test_a_caller_is_kept_until_the_user_database_changes(tmp_path, monkeypatch):
    passwd, group = _files(tmp_path)
    identities = access.Identities((passwd, group))
    assert identities.identify(0, 0) == access.identify(0, 0)
    _refusing(monkeypatch)
    assert identities.identify(0, 0).user == "root"  # kept: not looked up again
    group.write_text("root:x:0:\nwheel:x:10:root\n")  # a group added
    assert identities.identify(0, 0).user == "0"  # looked up again (and now unknown)


def test_a_file_that_appears_or_goes_counts_as_a_change(tmp_path, monkeypatch):
    passwd, group = _files(tmp_path)
    identities = access.Identities((passwd, group, tmp_path / "absent"))
    identities.identify(0, 0)
    _refusing(monkeypatch)
    (tmp_path / "absent").write_text("")
    assert identities.identify(0, 0).user == "0"


def test_forget_looks_every_caller_up_again_and_an_unknown_uid_is_never_kept(tmp_path, monkeypatch):
    identities = access.Identities(_files(tmp_path))
    identities.identify(0, 0)
    with monkeypatch.context() as patched:
        _refusing(patched)
        identities.forget()
        assert identities.identify(0, 0).user == "0"
    assert identities.identify(0, 0).user == "root"  # the unknown answer was not kept


def test_the_daemons_periodic_rescan_forgets_its_callers(tmp_path, monkeypatch):
    daemon = make_daemon(tmp_path)
    assert daemon.policy.identities.identify(0, 0).user == "root"
    _refusing(monkeypatch)
    assert daemon.policy.identities.identify(0, 0).user == "root"
    asyncio.run(daemon._rescan_all())
    assert daemon.policy.identities.identify(0, 0).user == "0"


def test_a_launch_goes_to_the_default_group_of_the_config_in_force(tmp_path):
    daemon = make_daemon(tmp_path)  # root in A, then B: A is its default
    assert launch(daemon, 4242, memory=GIB)["group"] == "A"
    moved = CONFIG.replace('[groups.A]\nusers = ["root"]', '[groups.A]\nusers = ["nobody"]')
    daemon.reloads.use(parse_config(moved, "test.toml"), {})  # root in B alone now
    assert launch(daemon, 4243, memory=GIB)["group"] == "B"


def test_the_guarantees_kept_as_headroom_are_those_of_the_config_in_force(tmp_path):
    guaranteed = CONFIG.replace('[groups.B]\nusers = ["root"]', '[groups.B]\nusers = ["root"]\nguarantee = { memory = "1G" }')
    daemon = make_daemon(tmp_path, guaranteed)
    with pytest.raises(RequestError, match="headroom"):  # 3.5G of 4G beside B's 1G: never
        launch(daemon, 4242, group="A", memory=3.5 * GIB)
    daemon.reloads.use(parse_config(CONFIG, "test.toml"), {})  # B guarantees nothing now
    assert launch(daemon, 4243, group="A", memory=3.5 * GIB)["group"] == "A"
