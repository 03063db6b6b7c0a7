"""The real-kernel tests skip, saying why, where this host cannot run them."""

import pytest

from support.kernel import v1_skip_reason, v2_skip_reason

_NEEDS = {"kernel_v1": v1_skip_reason, "kernel_v2": v2_skip_reason}


@pytest.fixture(autouse=True)
def _needs_kernel(request):
    for mark, skip_reason in _NEEDS.items():
        if request.node.get_closest_marker(mark) is not None and (reason := skip_reason()):
            pytest.skip(reason)
