"""GPU quotas (issue 32, break 7): a group's ``limit.gpus`` and a member's ``user_limit.gpus``
held at admission on the daemon (in-memory driver, fake inventory of two GPUs): a task past one
waits with a reason naming the quota, the amount and the limit; a task no quota could ever
admit is refused at once; a guarantee of GPUs is exposed as memory's is."""

import asyncio

import pytest
from support.daemons import GIB, launch, make_daemon
from support.gpus import CONFIG, INVENTORY, DeviceDriver

from governor.config.load import parse_config
from governor.errors import ConfigError, RequestError
from governor.wire.protocol import LaunchRequest, Peer

QUOTAS = CONFIG.replace('[groups.A]\nusers = ["root"]\n', '[groups.A]\nusers = ["root"]\nlimit = { gpus = 1 }\n'
                        ).replace('[groups.B]\nusers = ["root"]\n',
                                  '[groups.B]\nusers = ["root"]\nuser_limit = { gpus = 1 }\nguarantee = { gpus = 1 }\n')


pytestmark = pytest.mark.daemon(  # the `daemon` fixture: two GPUs under quotas
    make=lambda tmp_path: make_daemon(tmp_path, QUOTAS, driver=DeviceDriver(), find_gpus=lambda spec, control: INVENTORY))


def test_the_quotas_take_gpus_as_whole_devices(daemon):
    a, b = daemon.policy.config.rule("A"), daemon.policy.config.rule("B")
    assert (a.limit, b.user_limit, b.guarantee) == ({"gpu": 1.0}, {"gpu": 1.0}, {"gpu": 1.0})


@pytest.mark.parametrize("group, words", [("A", "group A's limit: gpu 1 of 1"),
                                          ("B", "root's user_limit in group B: gpu 1 of 1")])
def test_a_task_past_a_gpu_quota_waits_naming_it_though_a_gpu_is_free(daemon, group, words):
    launch(daemon, 100, group=group, cpu=0.1, memory=GIB // 8, gpu=1)

    async def scenario():
        second = daemon.requests.stream(LaunchRequest(pid=101, group=group, demand={"cpu": 0.1, "memory": GIB // 8, "gpu": 1},
                                             command=("w",)), Peer(pid=101, uid=0, gid=0))
        assert "queued" in await second.__anext__()
        [waiting] = daemon.observation.status()["queue"]
        assert words in waiting["reason"] and len(daemon.tasks.free("gpu", 2)) == 1
        await second.aclose()
        await daemon.settled()

    asyncio.run(scenario())
    assert launch(daemon, 102, group="A" if group == "B" else "B", cpu=0.1, memory=GIB // 8, gpu=1)["gpus"]


def test_a_task_asking_more_gpus_than_its_quota_is_refused_at_once(daemon):
    for group, words in (("A", "demand gpu = 2 exceeds group A's limit of 1"),
                         ("B", "demand gpu = 2 exceeds B's user_limit of 1")):
        with pytest.raises(RequestError) as refused:
            launch(daemon, 100, group=group, cpu=0.1, memory=GIB // 8, gpu=2)
        assert refused.value.code == "exceeds_capacity" and words in refused.value.message


@pytest.mark.parametrize("quota, words", [
    ("limit = { gpus = 1.5 }", "groups.A.limit.gpus: must be a whole number of GPUs, got 1.5"),
    ("limit = { gpus = -1 }", "groups.A.limit.gpus"),
    ('user_limit = { gpus = "2" }', "groups.A.user_limit.gpus"),
    ("guarantee = { gpus = 3 }", "groups.A.guarantee.gpus: must be at most the 2 GPUs capacity.gpus lists, got 3"),
    ("limit = { gpu = 1 }", "groups.A.limit"),
])
def test_bad_gpu_quotas_are_refused_naming_the_key(quota, words):
    text = CONFIG.replace('[groups.A]\nusers = ["root"]\n', f'[groups.A]\nusers = ["root"]\n{quota}\n')
    with pytest.raises(ConfigError) as refused:
        parse_config(text, "t.toml")
    assert words in str(refused.value)


def test_gpu_quotas_need_governed_gpus():
    text = CONFIG.replace('gpus = ["/dev/nvidia0", "/dev/nvidia1"]\n', "").replace(
        '[groups.A]\nusers = ["root"]\n', '[groups.A]\nusers = ["root"]\nlimit = { gpus = 1 }\n')
    with pytest.raises(ConfigError) as refused:
        parse_config(text, "t.toml")
    assert "groups.A.limit.gpus: names GPUs, but no GPU is governed" in str(refused.value)


def test_check_config_shows_gpu_quotas_by_their_key():
    from governor.cli.check_config import summary

    lines = summary(parse_config(QUOTAS, "t.toml"))
    assert "  A: weight 1, floor 50.0%; users root; limit gpus 1" in lines
    assert "  B: weight 1, floor 50.0%; users root; guarantee gpus 1; each user at most gpus 1" in lines


def test_gpu_guarantees_past_the_gpus_found_are_refused_at_start():
    config = parse_config(QUOTAS.replace('gpus = ["/dev/nvidia0", "/dev/nvidia1"]', 'gpus = "auto"'), "t.toml")
    assert config.capacity(2, 4 * GIB, gpus=1)["gpu"] == 1
    with pytest.raises(ConfigError) as refused:
        config.capacity(2, 4 * GIB, gpus=0)  # "auto" found none
    assert "groups.B.guarantee.gpus: the top-level groups' guarantees add up to 1, more than the capacity here, 0" \
        in str(refused.value)
