"""Fleet monitoring with real parts: configs/prometheus-alerts.yml and configs/grafana-dashboard.json
against a real Prometheus (Debian's ``prometheus`` package) scraping a real daemon on this
host's cgroup v1 hierarchies."""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.error import URLError
from urllib.parse import urlencode
from urllib.request import urlopen

import pytest
from daemon_harness import Governor
from support.device_nodes import stand_in_nodes
from support.waits import wait_until, within
from scenarios import GROUPS, SLEEPER

pytestmark = pytest.mark.kernel_v1

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
RULES = CONFIGS / "prometheus-alerts.yml"
DASHBOARD = CONFIGS / "grafana-dashboard.json"
# What Grafana puts in place of the dashboard's variables: every host and resource, and its
# built-in intervals as they come out at a 1 s scrape interval.
GRAFANA = {"instance": ".*", "resource": ".*", "__rate_interval": "1m", "__interval": "15s", "__range": "5m"}
BUILT_IN = {"__rate_interval", "__interval", "__range"}
# A vector selector of the daemon's metrics or ``up`` (not a function, nor a label in by/on (…)).
SELECTOR = re.compile(r"(?<![\w:$])(governor_\w+|up)\b(?!\s*\()(\{[^}]*\})?")
SCRAPES = 5  # scrapes of the daemon every expression is evaluated over (1 s apart)
# Families only NVML fills (no GPU driver here: the GPUs are stand-in device nodes): a target
# on them must be a valid query, and may return nothing.
NVML_ONLY = re.compile(r"governor_(gpu_utilization_ratio|gpu_memory_used_bytes|task_gpu_memory_bytes)\b")
# Families only a host with pressure stall information fills (cgroup v2; this host is v1): an
# expression on them must be a valid query, and may return nothing.
PSI_ONLY = re.compile(r"governor_group_pressure_seconds_total\b")


@pytest.fixture(autouse=True)
def _needs_prometheus():
    missing = [tool for tool in ("prometheus", "promtool") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"{' and '.join(missing)} not installed (apt-get install -y prometheus)")


def test_a_real_prometheus_loads_the_rules_and_every_dashboard_and_rule_expression_returns_series(tmp_path):
    """A daemon governing two stand-in GPUs (:func:`device_nodes.stand_in_nodes`) runs a task in A
    holding one, and queues one of B (its memory does not fit), with fair share on, so every
    family it serves has series (the queue-wait and refill histograms, the ``queued`` and
    ``task_started`` events, the fair-share and GPU gauges; not NVML's, see :data:`NVML_ONLY`).
    ``promtool check rules`` passes on the rule file; a real Prometheus scrapes the daemon every
    second with the rule file loaded, every rule is evaluated without error, and after 5 scrapes:

    - every dashboard target returns at least one series, its variables put in as Grafana would
      (``$instance`` and ``$resource``: all, ``.*``; ``$__rate_interval`` 1m, ``$__range`` 5m),
      and the ``instance`` and ``resource`` variables' own queries list this daemon and its
      resources;
    - every alert expression is evaluated as Prometheus loaded it (from /api/v1/rules) and must
      succeed, and each metric selector in it must return series. The alerts themselves must
      return nothing on a healthy host (the daemon is up, no write error, its queued task has
      waited seconds, A is not starved), so "returns series" cannot be asked of them, and
      cutting off a final comparison does not generalise: GovernorGroupBelowFloor is a chain of
      comparisons joined by ``and``. The selectors returning series shows the names and labels
      the rules join on (``instance``, ``job``, ``group``, ``resource``) are the ones served.
    """
    promtool = subprocess.run(["promtool", "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert promtool.returncode == 0, promtool.stdout + promtool.stderr
    checked = int(re.search(r"SUCCESS: (\d+) rules found", promtool.stdout).group(1))
    dashboard = json.loads(DASHBOARD.read_text())
    targets = _dashboard_targets(dashboard)
    assert targets, "the dashboard has no target"

    started = time.monotonic()
    port = _free_port()
    with stand_in_nodes(tmp_path) as (_, nodes):
        config = (f'[capacity]\ncpu = 1.0\nmemory = "1G"\ngpus = {json.dumps(nodes)}\ngpu_control = []\n'
                  f'[enforcement]\nmemory = "soft"\n[fairshare]\nhalf_life = "1h"\n{GROUPS}')
        gov = Governor(tmp_path, config, "--metrics", f"127.0.0.1:{port}")
        try:
            gov.run("A", SLEEPER, gpus=1, cpus=0.5, memory="700M")
            gov.run_queued("B", SLEEPER, cpus=0.5, memory="700M")
            with _prometheus(tmp_path, f"127.0.0.1:{port}") as api:
                rules = [rule for group in api.get("/api/v1/rules")["groups"] for rule in group["rules"]]
                assert len(rules) == checked, f"Prometheus loaded {len(rules)} rules, promtool found {checked}"
                failures = _rule_failures(api, rules) + _dashboard_failures(api, dashboard, targets)
                instances = api.get("/api/v1/label/instance/values?" + urlencode({"match[]": 'up{job=~"governor.*"}'}))
        finally:
            gov.close()
    print(f"\n{len(rules)} rules and {len(targets)} dashboard targets evaluated against {SCRAPES}+ scrapes of a "
          f"real daemon in {time.monotonic() - started:.1f} s")
    assert instances == [f"127.0.0.1:{port}"], instances
    assert not failures, "\n".join(failures)


def _rule_failures(api: _Api, rules: list[dict]) -> list[str]:
    """Each rule evaluated by Prometheus without error; its expression a query that succeeds
    and each selector in it one that returns series."""
    failures = []
    for rule in rules:
        if rule["health"] != "ok":
            failures.append(f"rule {rule['name']}: {rule['health']} {rule.get('lastError', '')}")
        api.query(rule["query"])  # succeeds, empty or not
        for selector in sorted({m.group(0) for m in SELECTOR.finditer(rule["query"])}):
            if not api.series(selector) and not PSI_ONLY.search(selector):
                failures.append(f"rule {rule['name']}: {selector} returns no series")
    return failures


def _dashboard_failures(api: _Api, dashboard: dict, targets: list[tuple[str, str]]) -> list[str]:
    """Each target's variables defined and its query returning series; each query variable's
    ``label_values()`` listing something."""
    defined = {variable["name"] for variable in dashboard["templating"]["list"]}
    failures = []
    for title, expr in targets:
        undefined = set(re.findall(r"\$\{?(\w+)", expr)) - defined - BUILT_IN
        if undefined:
            failures.append(f"panel {title!r}: undefined variables {sorted(undefined)}")
        elif not api.series(_as_grafana(expr)) and not NVML_ONLY.search(expr) and not PSI_ONLY.search(expr):
            failures.append(f"panel {title!r}: {expr} returns no series")
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            label, match = _label_values(_as_grafana(variable["query"]["query"]))
            if not api.get(f"/api/v1/label/{label}/values?" + urlencode({"match[]": match})):
                failures.append(f"variable {variable['name']}: {variable['query']['query']} lists nothing")
    return failures


@contextlib.contextmanager
def _prometheus(tmp_path: Path, target: str) -> Iterator[_Api]:
    """A Prometheus scraping ``target`` every second (job "governor") with the rule file loaded,
    once it has scraped it :data:`SCRAPES` times and evaluated every rule; stopped on leaving."""
    (tmp_path / "prometheus.yml").write_text(json.dumps({  # JSON is YAML
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RULES)],
        "scrape_configs": [{"job_name": "governor", "static_configs": [{"targets": [target]}]}],
    }))
    web = _free_port()
    with open(tmp_path / "prometheus.log", "w") as log:
        process = subprocess.Popen(
            ["prometheus", f"--config.file={tmp_path / 'prometheus.yml'}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{web}", "--log.level=warn"], stdout=log, stderr=subprocess.STDOUT)
    try:
        api = _Api(web, process, tmp_path / "prometheus.log")
        api.until(lambda: any(t["health"] == "up" for t in api.get("/api/v1/targets")["activeTargets"]),
                  "the daemon's target to be up")
        api.until(lambda: api.query(f'count_over_time(up{{job="governor"}}[1m]) >= {SCRAPES}'),
                  f"{SCRAPES} scrapes of the daemon")
        api.until(lambda: all(rule["lastEvaluation"] > "1970" for group in api.get("/api/v1/rules")["groups"]
                              for rule in group["rules"]), "every rule to be evaluated")
        yield api
    finally:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _dashboard_targets(dashboard: dict) -> list[tuple[str, str]]:
    """(panel title, expr) of every target of every panel, rows' collapsed panels included."""
    found = []
    for panel in dashboard["panels"]:
        for inner in [panel, *panel.get("panels", [])]:
            found += [(inner["title"], target["expr"]) for target in inner.get("targets", [])]
    return found


def _as_grafana(expr: str) -> str:
    return re.sub(r"\$\{?(\w+)\}?", lambda m: GRAFANA[m.group(1)], expr)


def _label_values(query: str) -> tuple[str, str]:
    """``label_values(SELECTOR, LABEL)`` → (label, selector)."""
    match = re.fullmatch(r"\s*label_values\((.*),\s*(\w+)\s*\)\s*", query)
    assert match, f"not a label_values() query: {query}"
    return match.group(2), match.group(1)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class _Api:
    """Prometheus's HTTP API on 127.0.0.1:``port``."""

    def __init__(self, port: int, process: subprocess.Popen, log: Path):
        self.base, self.process, self.log = f"http://127.0.0.1:{port}", process, log

    def get(self, path: str):
        with urlopen(self.base + path, timeout=10) as response:
            answer = json.loads(response.read())
        assert answer["status"] == "success", answer
        return answer["data"]

    def query(self, expr: str) -> list[dict]:
        """The series ``expr`` returns now (an error fails the test with Prometheus's own words)."""
        try:
            data = self.get("/api/v1/query?" + urlencode({"query": expr}))
        except URLError as error:  # HTTPError: a 400 for a bad expression, with the reason in its body
            body = error.read().decode() if hasattr(error, "read") else str(error)
            raise AssertionError(f"query {expr!r} failed: {body}") from None
        return data["result"]

    def series(self, expr: str) -> list[dict]:
        """Like :meth:`query`, asked again for a moment while empty: on a loaded host one scrape
        can time out, and the series it marks stale are absent until the next one."""
        found: list[dict] = []

        def answered() -> bool:
            found[:] = self.query(expr)
            return bool(found)
        within(answered, 2, every=0.25)
        return found

    def until(self, condition, what: str, timeout: float = 45) -> None:
        def holds() -> bool:
            assert self.process.poll() is None, f"prometheus exited with {self.process.returncode}:\n{self.log.read_text()}"
            try:
                return bool(condition())
            except (URLError, ConnectionError):
                return False  # not listening yet
        wait_until(holds, what, timeout=timeout, every=0.25, detail=self.log.read_text)
