"""A device class other than GPUs where sessions start, on this host's real cgroup v1
hierarchies (issue 45, point 3): :func:`guard_scenarios.a_standin_device_class_is_denied_where_sessions_start_and_open_to_tasks`.
Its placement, hand-over and re-adoption run in both kernel suites (``kernel_cases``)."""

import guard_scenarios
import pytest
import session_scenarios

pytestmark = pytest.mark.kernel_v1


def test_a_standin_device_class_is_denied_where_sessions_start_and_open_to_tasks():
    reason = session_scenarios.missing()
    if reason:
        pytest.skip(reason)
    guard_scenarios.a_standin_device_class_is_denied_where_sessions_start_and_open_to_tasks()
