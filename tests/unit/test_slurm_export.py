"""``governor export slurm``: the group tree as sacctmgr commands (governor/config/slurm_export.py)
and the command around it (cli/export.py). tests/system/test_slurm_vm.py loads it into a real
slurmdbd."""

from __future__ import annotations

import shlex

import pytest
from click.testing import CliRunner

from governor.cli.main import main
from governor.config.load import load_config
from governor.config.slurm_export import slurm_accounting
from governor.errors import ConfigError

TREE = {
    "science": {"weight": 2, "limit": {"cpu": 8, "memory": "16G"}, "guarantee": {"cpu": 2}},
    "physics-lab": {"parent": "science", "users": ["alice"], "unix_groups": ["physics"], "weight": 0.5,
                    "user_limit": {"cpu": 2.5, "memory": "4G"}},
    "ops": {"users": ["carol"], "weight": 1.5},
}


def _export(groups: dict, unix_members: dict | None = None, **more):
    return slurm_accounting(load_config({"groups": groups, **more}, "tree.toml"), unix_members or {})


def _words(export) -> list[list[str]]:
    return [shlex.split(command) for command in export.commands]


def test_each_group_is_an_account_under_its_parent_after_it():
    export = _export({"physics-lab": TREE["physics-lab"], **TREE})  # the child first in the file
    adds = [words[4:] for words in _words(export) if words[2:4] == ["add", "account"]]
    assert adds == [["science", "parent=root"], ["ops", "parent=root"], ["physics-lab", "parent=science"]]


def test_fairshare_holds_the_weights_ratios_in_whole_numbers():
    # weights 2, 0.5, 1.5: the least factor making all whole is 2 -> 4, 1, 3
    export = _export(TREE)
    shares = {words[5].removeprefix("name="): words[7] for words in _words(export) if words[2:4] == ["modify", "account"]}
    assert shares == {"science": "fairshare=4", "ops": "fairshare=3", "physics-lab": "fairshare=1"}
    assert export.fairshare_factor == 2


def test_weights_too_fine_for_whole_shares_are_scaled_to_a_million_and_rounded():
    # exactly: 0.0013 and 999.9 times 10,000 are 13 and 9,999,000
    export = _export({"a": {"users": ["a"], "weight": 0.0013}, "b": {"users": ["b"], "weight": 999.9}})
    shares = [words[7] for words in _words(export) if words[2:4] == ["modify", "account"]]
    assert shares == ["fairshare=1", "fairshare=1000000"]
    assert "rounded: fairshare = weight x 1000.1, rounded to whole shares" in export.notes[0]
    exact = _export({"a": {"users": ["a"], "weight": 0.001}, "b": {"users": ["b"], "weight": 999.999}})
    assert [words[7] for words in _words(exact) if words[2:4] == ["modify", "account"]] == [
        "fairshare=1", "fairshare=999999"] and not any("rounded" in note for note in exact.notes)


def test_limits_are_grptres_and_a_limit_left_out_is_cleared():
    modify = {words[5]: words[8] for words in _words(_export(TREE)) if words[2:4] == ["modify", "account"]}
    assert modify == {"name=science": "GrpTRES=cpu=8,mem=16384", "name=ops": "GrpTRES=cpu=-1,mem=-1",
                      "name=physics-lab": "GrpTRES=cpu=-1,mem=-1"}


def test_gpus_are_gres_gpu_where_the_config_governs_them():
    groups = {"render": {"users": ["dana"], "limit": {"gpus": 2}, "user_limit": {"gpus": 0}}}
    export = _export(groups, capacity={"gpus": ["/dev/nvidia0", "/dev/nvidia1"]})
    assert export.commands[1].endswith("GrpTRES=cpu=-1,mem=-1,gres/gpu=2")
    assert export.commands[3] == ("sacctmgr -i modify user where name=dana account=render "
                                  "set GrpTRES=cpu=-1,mem=-1,gres/gpu=0")


def test_members_are_user_associations_with_the_user_limit():
    export = _export(TREE, {"physics": ["bob", "alice"]})
    users = [(words[4], words[5]) for words in _words(export) if words[2:4] == ["add", "user"]]
    assert users == [("carol", "account=ops"), ("alice", "account=physics-lab"), ("bob", "account=physics-lab")]
    limits = [words[5:] for words in _words(export) if words[2:4] == ["modify", "user"]]
    assert limits == [["name=alice", "account=physics-lab", "set", "GrpTRES=cpu=2,mem=4096"],
                      ["name=bob", "account=physics-lab", "set", "GrpTRES=cpu=2,mem=4096"]]


def test_what_slurm_has_no_equivalent_for_is_said():
    export = _export({**TREE, "*": {"weight": 1}}, capacity={"io": [{"device": "/dev/sda", "read": "100M", "write": "100M"}]},
                     enforcement={"memory": "soft"}, fairshare={"half_life": "7d"})
    said = "\n".join(export.notes)
    for what in ("groups.science.guarantee (cpu 2 cores)", '[groups."*"]', "[sessions]", "[[capacity.io]] (sda)",
                 'enforcement.memory = "soft"', "PriorityDecayHalfLife=7-00:00",
                 "groups.physics-lab.user_limit.cpu = 2.5; Slurm counts whole CPUs: cpu=2",
                 "groups.physics-lab.unix_groups names physics, a Unix group unknown here"):
        assert what in said, what
    script = export.script("tree.toml")
    assert script.startswith("#!/bin/sh\n") and all(f"# {note}" in script for note in export.notes)


def test_a_config_of_everyone_alone_exports_no_account_and_says_why():
    export = _export({"*": {"weight": 2}})
    assert export.commands == () and any('[groups."*"]' in note for note in export.notes)


@pytest.mark.parametrize(("name", "reason"), [("Physics", "upper case"), ("root", "Slurm's own top account")])
def test_a_group_name_slurm_would_change_is_refused(name, reason):
    with pytest.raises(ConfigError, match=reason) as caught:
        _export({name: {"users": ["alice"]}})
    assert caught.value.key == f"groups.{name}"


@pytest.mark.parametrize("user", ["alice; reboot", "$(reboot)", "Alice", "a" * 33, "a,b", "9lives"])
def test_a_user_name_slurm_cannot_keep_is_refused_and_never_reaches_the_script(user):
    with pytest.raises(ConfigError, match="Slurm cannot keep as a user name") as caught:
        _export({"lab": {"users": [user]}})
    assert caught.value.key == "groups.lab.users" and "starting with a letter or _" in str(caught.value)
    with pytest.raises(ConfigError) as caught:
        _export({"lab": {"unix_groups": ["physics"]}}, {"physics": [user]})
    assert caught.value.key == "groups.lab.unix_groups"


def test_a_hostile_file_name_stays_inside_its_comment_and_a_hostile_unix_group_never_reaches_it():
    with pytest.raises(ConfigError, match=r"unix_groups\[0\]: must be a name of printable characters"):
        _export({"lab": {"users": ["alice"], "unix_groups": ["x\nreboot"]}})  # the config refuses it now
    export = _export({"lab": {"users": ["alice"], "unix_groups": ["x reboot"]}})
    script = export.script("evil\nrm -rf /.toml")
    assert all(line.startswith(("#", "sacctmgr ")) for line in script.splitlines())


def test_governor_export_slurm_prints_the_script(tmp_path):
    config = tmp_path / "governor.toml"
    config.write_text('[groups.lab]\nusers = ["alice"]\nweight = 3\n')
    result = CliRunner().invoke(main, ["export", "slurm", str(config)])
    assert result.exit_code == 0, result.output
    assert "sacctmgr -i add account lab parent=root\n" in result.output
    assert "set fairshare=1 GrpTRES=cpu=-1,mem=-1\n" in result.output


def test_a_config_slurm_cannot_take_is_one_line(tmp_path):
    config = tmp_path / "governor.toml"
    config.write_text('[groups.Lab]\nusers = ["alice"]\n')
    result = CliRunner().invoke(main, ["export", "slurm", str(config)])
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert result.output.startswith(f"governor: error: {config}: groups.Lab: has upper case"), result.output
