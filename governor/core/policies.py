"""The alternatives to DRF from the paper's §5, so an operator can see on their own workload why
governor uses DRF. The daemon never uses them.

* **Asset fairness** (§5.1): equalise each group's *aggregate* share ``Σ_j A_gj / R_j`` (weighted)
  by progressive filling. It violates sharing incentive and bottleneck fairness (§6.1.1).
* **CEEI** (§5.2): Competitive Equilibrium from Equal Incomes, computed as the Nash bargaining
  solution with dominant shares as utilities: maximise ``Σ_g w_g log x_g`` subject to
  ``Σ_g x_g d_gj ≤ R_j`` and ``0 ≤ x_g ≤ n_g``. It is envy-free and Pareto-efficient but not
  strategy-proof (§6.1.2). Continuous only; solved with SciPy's SLSQP in floats (≈1e-9 relative).

Every policy takes ``(capacity, groups, *, mode, trace)`` and returns an
:class:`~governor.core.model.Allocation`, like :mod:`governor.core.drf`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from governor.core import drf
from governor.errors import AllocationInputError, GovernorError
from governor.core.model import Allocation, GroupDemand, Mode, Stop, Vector, assemble, normalize

# A resource is reported as the one that stopped a CEEI group when it is this full.
_SATURATED = 1 - 1e-6


def drf_policy(capacity: Vector, groups: Sequence[GroupDemand], *, mode: Mode = "continuous",
               trace: bool = False) -> Allocation:
    """Weighted DRF: :func:`governor.core.drf.progressive_filling` or :func:`~governor.core.drf.discrete_filling`."""
    fill = drf.progressive_filling if mode == "continuous" else drf.discrete_filling
    return fill(capacity, groups, trace=trace)


def asset_fairness(capacity: Vector, groups: Sequence[GroupDemand], *, mode: Mode = "continuous",
                   trace: bool = False) -> Allocation:
    """Asset fairness (paper §5.1): progressive filling on aggregate shares ``Σ_j d_gj / R_j``.

    Paper §5.1: 9 CPUs, 18 GB, A ⟨1, 4⟩, B ⟨3, 1⟩ gives A 2.52 and B 2.16 tasks.

    Raises:
        AllocationInputError: bad input, as for DRF.
    """
    fill = drf.progressive_filling if mode == "continuous" else drf.discrete_filling
    return fill(capacity, groups, trace=trace, measure="aggregate")


def ceei(capacity: Vector, groups: Sequence[GroupDemand], *, mode: Mode = "continuous",
         trace: bool = False) -> Allocation:
    """CEEI as the weighted Nash bargaining solution (paper §5.2), in floats.

    Paper §5.2: 9 CPUs, 18 GB, A ⟨1, 4⟩, B ⟨3, 1⟩ gives A 45/11 and B 18/11 tasks.

    Returns:
        a continuous :class:`Allocation` with float ``tasks`` and an empty trace (a convex
        solver has no events to show).

    Raises:
        AllocationInputError: bad input, or ``mode="discrete"``.
        GovernorError: SciPy is not installed (the ``ceei`` extra), or the solver did not
            converge.
    """
    if mode != "continuous":
        raise AllocationInputError("CEEI is defined for divisible tasks only: use mode 'continuous'")
    try:
        import numpy as np
        from scipy.optimize import minimize
    except ImportError:
        raise GovernorError("the CEEI policy needs SciPy, which is not installed here: install governor's "
                            "'ceei' extra, or scipy, into its environment (e.g. pip install scipy)") from None

    problem = normalize(capacity, groups)
    resources = range(len(problem.resources))
    capacity_f = [float(r) for r in problem.capacity]
    demands = [[float(d) for d in demand] for demand in problem.demands]
    # Each group's most tasks on its own: its demand cap, or what the host holds of its tasks.
    caps = []
    for g, demand in enumerate(demands):
        fit = min(capacity_f[j] / d for j, d in enumerate(demand) if d > 0)
        caps.append(fit if problem.tasks[g] is None else min(fit, float(problem.tasks[g])))
    live = [g for g, cap in enumerate(caps) if cap > 0]
    tasks = [0.0] * len(caps)
    if live:
        # Solve in y_g = x_g / cap_g ∈ (0, 1] and shares of capacity, so bytes and cores
        # are on one scale and the problem stays well conditioned.
        weights = np.array([float(problem.weights[g]) for g in live])
        usage = np.array([[caps[g] * demands[g][j] / capacity_f[j] for g in live] for j in resources])
        start = np.full(len(live), 1.0 / (len(live) * max(1.0, usage.sum(axis=1).max())))
        result = minimize(
            lambda y: -float(weights @ np.log(y)),
            start,
            jac=lambda y: -weights / y,
            bounds=[(1e-12, 1.0)] * len(live),
            constraints=[{"type": "ineq", "fun": lambda y: 1.0 - usage @ y, "jac": lambda y: -usage}],
            method="SLSQP",
            options={"ftol": 1e-15, "maxiter": 1000},
        )
        if not result.success:
            raise GovernorError(f"CEEI solver did not converge: {result.message}")
        for g, y in zip(live, result.x):
            tasks[g] = caps[g] * min(1.0, float(y))

    stops = {}
    for g, x in enumerate(tasks):
        if problem.tasks[g] is not None and math.isclose(x, problem.tasks[g], rel_tol=1e-6):
            stops[g] = Stop("demand_met")
            continue
        full = tuple(
            problem.resources[j] for j in resources
            if demands[g][j] > 0 and sum(tasks[h] * demands[h][j] for h in range(len(tasks))) >= capacity_f[j] * _SATURATED
        )
        stops[g] = Stop("saturated", full)
    return assemble(problem, "continuous", "ceei", tasks, stops)


Policy = Callable[..., Allocation]
POLICIES: dict[str, Policy] = {"drf": drf_policy, "asset": asset_fairness, "ceei": ceei}


def allocate(policy: str, capacity: Vector, groups: Sequence[GroupDemand], *, mode: Mode = "continuous",
             trace: bool = False) -> Allocation:
    """Run the named policy (``"drf"``, ``"asset"`` or ``"ceei"``).

    Raises:
        AllocationInputError: an unknown policy name, or what the policy raises.
    """
    try:
        chosen = POLICIES[policy]
    except KeyError:
        raise AllocationInputError(f"unknown policy {policy!r}; choose one of {', '.join(POLICIES)}") from None
    return chosen(capacity, groups, mode=mode, trace=trace)
