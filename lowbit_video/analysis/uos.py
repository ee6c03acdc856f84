"""Universal Optimal Scaling (UOS) analysis for MXFP4 shared-scale selection.

Reconstruction of the analysis in MXAttention (arXiv 2607.24377, Sections 3 and 4.1, Table 1,
Appendix C).  Everything here is a pure function of numbers; nothing depends on data.

Setting
-------
An MXFP4 block has maximum magnitude ``M`` and a shared power-of-two scale ``2**e``.  The
*normalized maximum* is ``x = M / 2**e``.  The UOS rule with boundary ``q`` is::

    e_q(M) = ceil(log2(M / q))          so that   x in (q/2, q].

Elements are projected onto the E2M1 grid ``G+ = {0, .5, 1, 1.5, 2, 3, 4, 6}`` by
round-to-nearest with saturation at 6 (``project_e2m1``).

Objective
---------
* ``E(x) = int_0^x (t - Pi(t))^2 dt``: exact, piecewise cubic (``projection_error_integral``).
* ``D(x) = E(x) / x^3``: mean squared projection error of a block whose elements are uniform
  on ``[0, x]``, relative to the squared block maximum (``normalized_error``).
* ``J(q) = int_{q/2}^{q} D(x) g(x) dx`` with ``g(x) = H(log2 x) / (x ln 2)``, where ``H`` is the
  1-periodic density of the wrapped phase ``log2 M mod 1``.  ``H == 1`` is the log-uniform
  (uniform wrapped phase) case; in general ``H(t) = 1 + sum_n a_n cos(2 pi n t) + b_n sin(2 pi n t)``
  (``objective``).

Because ``H`` is 1-periodic, ``g(q/2) = 2 g(q)`` and therefore
``J'(q) = g(q) [D(q) - D(q/2)] = g(q) Delta(q) / q^3`` with ``Delta(q) = E(q) - 8 E(q/2)``
(``delta``).  The sign of ``J'`` is the sign of ``Delta`` whatever ``H > 0`` is, so the minimiser
is the sign change of ``Delta``: ``q* = 29/4 = 7.25`` (``stationary_boundary``, ``argmin_q``).

Scale rules compared in the paper's Table 1 (``table1``):

====  ============================  ======================  ========================
rule  exponent                      normalized max x        overflow-rounding (x>7)
====  ============================  ======================  ========================
ocp   floor(log2 M) - 2             [4, 8)                  (7, 8)
tfs   ceil(log2(M / 6))             (3, 6]                  none
uos   ceil(log2(M / 7.25))          (3.625, 7.25]           (7, 7.25]
====  ============================  ======================  ========================

Overflow probabilities use the uniform-wrapped-phase density ``1 / (x ln 2)`` on the rule's
range, e.g. OCP ``Pr(x >= 7) = log2(8/7) ~= 19.27 %`` (``ocp_overflow_probability``).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
from scipy import integrate, optimize

__all__ = [
    "E2M1_POSITIVE_GRID",
    "E2M1_MAX",
    "OVERFLOW_THRESHOLD",
    "UOS_Q",
    "project_e2m1",
    "projection_error_integral",
    "normalized_error",
    "delta",
    "wrapped_phase_density",
    "normalized_max_density",
    "objective",
    "argmin_q",
    "stationary_boundary",
    "normalized_max_range",
    "overflow_interval",
    "ocp_overflow_probability",
    "overflow_probability",
    "table1",
    "summary",
]

#: Non-negative E2M1 magnitudes (OCP MX v1.0 Table 5).
E2M1_POSITIVE_GRID: np.ndarray = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
E2M1_POSITIVE_GRID.setflags(write=False)

#: Largest finite E2M1 magnitude; everything above saturates to it.
E2M1_MAX: float = 6.0

#: Normalized maxima above this round to 8 on an unbounded E2M1 ladder and saturate to 6.
OVERFLOW_THRESHOLD: float = 7.0

#: The paper's closed-form UOS boundary q* = 29/4.
UOS_Q: float = 29.0 / 4.0

# Nearest-point cells of the saturating projection: cell k is [_CELL_LO[k], _CELL_HI[k]) and maps
# to _CELL_CENTER[k].  Cell edges are the midpoints between neighbouring grid points; the last
# cell [5, inf) maps to 6 (saturation).
_MIDPOINTS = 0.5 * (E2M1_POSITIVE_GRID[1:] + E2M1_POSITIVE_GRID[:-1])  # .25 .75 1.25 1.75 2.5 3.5 5
_CELL_LO = np.concatenate(([0.0], _MIDPOINTS))
_CELL_HI = np.concatenate((_MIDPOINTS, [np.inf]))
_CELL_CENTER = E2M1_POSITIVE_GRID.copy()

# Points where the integrand of J may lose smoothness (cell edges); grid points are harmless
# extra splits.  Passed to ``scipy.integrate.quad(points=...)``.
_BREAKPOINTS = np.unique(np.concatenate((_MIDPOINTS, E2M1_POSITIVE_GRID[1:])))

_LN2 = math.log(2.0)

# Exponent formulas and analytic normalized-max ranges of the rules in Table 1.
_RULES = ("ocp", "tfs", "uos")
_EXPONENT_TEXT = {
    "ocp": "floor(log2(M)) - 2",
    "tfs": "ceil(log2(M / 6))",
    "uos": "ceil(log2(M / {q:g}))",
}


def _scalar_or_array(values: np.ndarray, like: Any) -> float | np.ndarray:
    return float(values) if np.ndim(like) == 0 else values


# --------------------------------------------------------------------------------------------
# Projection and error integrals
# --------------------------------------------------------------------------------------------


def project_e2m1(t: Any) -> float | np.ndarray:
    """Nearest point of ``E2M1_POSITIVE_GRID`` to ``t >= 0``, saturating at 6 for ``t > 6``.

    Ties (0.25, 0.75, ..., 5) go to the larger grid point; for the error integrals the tie
    convention is irrelevant (a measure-zero set).  Negative inputs are rejected: the analysis
    works on magnitudes.
    """
    arr = np.asarray(t, dtype=np.float64)
    if np.any(arr < 0) or np.any(np.isnan(arr)):
        raise ValueError("project_e2m1 expects non-negative magnitudes")
    idx = np.searchsorted(_CELL_LO, arr, side="right") - 1
    return _scalar_or_array(_CELL_CENTER[idx], t)


def projection_error_integral(x: Any) -> float | np.ndarray:
    """``E(x) = int_0^x (t - Pi(t))^2 dt``, exact and vectorised over ``x >= 0``.

    Sum over the nearest-point cells ``[lo_k, hi_k)`` with centre ``c_k`` of
    ``int_{lo_k}^{min(x, hi_k)} (t - c_k)^2 dt = [(min(x, hi_k) - c_k)^3 - (lo_k - c_k)^3] / 3``
    (zero when ``x <= lo_k``).  Within one cell ``E`` is a cubic in ``x``; ``E`` is C^1.
    """
    arr = np.asarray(x, dtype=np.float64)
    if np.any(arr < 0) or np.any(np.isnan(arr)):
        raise ValueError("projection_error_integral expects x >= 0")
    xs = arr[..., None]
    upper = np.clip(xs, _CELL_LO, _CELL_HI)  # min(x, hi) but never below lo
    terms = ((upper - _CELL_CENTER) ** 3 - (_CELL_LO - _CELL_CENTER) ** 3) / 3.0
    return _scalar_or_array(terms.sum(axis=-1), x)


def normalized_error(x: Any) -> float | np.ndarray:
    """``D(x) = E(x) / x^3`` for ``x > 0``.

    The mean squared projection error of elements uniform on ``[0, x]`` is ``E(x) / x``; dividing
    by the squared block maximum ``x^2`` gives ``D``.  ``D(x) = 1/3`` for ``x <= 1/4`` (everything
    rounds to zero).
    """
    arr = np.asarray(x, dtype=np.float64)
    if np.any(arr <= 0):
        raise ValueError("normalized_error expects x > 0")
    return _scalar_or_array(np.asarray(projection_error_integral(arr)) / arr**3, x)


def delta(q: Any) -> float | np.ndarray:
    """``Delta(q) = E(q) - 8 E(q/2)``, so that ``D(q) - D(q/2) = Delta(q) / q^3``.

    ``sign(J'(q)) = sign(Delta(q))`` for every positive wrapped-phase density.
    """
    arr = np.asarray(q, dtype=np.float64)
    out = np.asarray(projection_error_integral(arr)) - 8.0 * np.asarray(
        projection_error_integral(arr / 2.0)
    )
    return _scalar_or_array(out, q)


# --------------------------------------------------------------------------------------------
# Densities and the objective J(q)
# --------------------------------------------------------------------------------------------


def _normalize_harmonics(harmonics: Sequence[Sequence[float]]) -> tuple[tuple[float, float], ...]:
    pairs = tuple((float(a), float(b)) for a, b in harmonics)
    if pairs:
        # H must be a density: positive over one period.  Check on a fine grid (trigonometric
        # polynomials of the small orders used here cannot dip between 4096 samples unnoticed
        # by more than a negligible amount).
        t = np.linspace(0.0, 1.0, 4096, endpoint=False)
        if np.min(_h(t, pairs)) <= 0.0:
            raise ValueError(f"wrapped-phase density H is not positive for harmonics {pairs}")
    return pairs


def _h(t: np.ndarray | float, pairs: tuple[tuple[float, float], ...]) -> np.ndarray | float:
    out = 1.0
    for n, (a, b) in enumerate(pairs, start=1):
        out = out + a * np.cos(2.0 * np.pi * n * t) + b * np.sin(2.0 * np.pi * n * t)
    return out


def wrapped_phase_density(t: Any, harmonics: Sequence[Sequence[float]] = ()) -> float | np.ndarray:
    """``H(t) = 1 + sum_{n>=1} a_n cos(2 pi n t) + b_n sin(2 pi n t)``; ``harmonics[n-1] = (a_n, b_n)``.

    ``H`` integrates to 1 over any unit interval; ``()`` gives the uniform wrapped phase.
    """
    pairs = _normalize_harmonics(harmonics)
    arr = np.asarray(t, dtype=np.float64)
    return _scalar_or_array(np.asarray(_h(arr, pairs) * np.ones_like(arr)), t)


def normalized_max_density(x: Any, harmonics: Sequence[Sequence[float]] = ()) -> float | np.ndarray:
    """``g(x) = H(log2 x) / (x ln 2)``: density of the normalized maximum on any ``(q/2, q]``."""
    pairs = _normalize_harmonics(harmonics)
    arr = np.asarray(x, dtype=np.float64)
    return _scalar_or_array(np.asarray(_h(np.log2(arr), pairs) / (arr * _LN2)), x)


def _objective(q: float, pairs: tuple[tuple[float, float], ...]) -> float:
    lo, hi = 0.5 * q, q
    points = [p for p in _BREAKPOINTS if lo < p < hi]

    def integrand(x: float) -> float:
        return projection_error_integral(x) / x**3 * _h(math.log2(x), pairs) / (x * _LN2)

    value, _err = integrate.quad(
        integrand, lo, hi, points=points or None, epsabs=1e-14, epsrel=1e-12, limit=200
    )
    return float(value)


def objective(q: float, harmonics: Sequence[Sequence[float]] = ()) -> float:
    """``J(q) = int_{q/2}^{q} D(x) g(x) dx`` by adaptive quadrature (``scipy.integrate.quad``).

    ``harmonics`` is a sequence of ``(a_n, b_n)`` pairs for the wrapped-phase density ``H``;
    the E2M1 cell edges inside ``(q/2, q)`` are passed to ``quad`` as break points.
    """
    q = float(q)
    if not q > 0:
        raise ValueError("q must be positive")
    return _objective(q, _normalize_harmonics(harmonics))


def argmin_q(
    harmonics: Sequence[Sequence[float]] = (),
    lo: float = 4.0,
    hi: float = 12.0,
    *,
    coarse_step: float = 0.125,
    xatol: float = 1e-6,
) -> float:
    """Minimiser of ``J`` over ``[lo, hi]``.

    A coarse grid (step ``coarse_step``) locates the basin of the global minimum; a bounded
    Brent search (``scipy.optimize.minimize_scalar(method="bounded")``, tolerance ``xatol``)
    then refines it between the neighbouring grid points.
    """
    if not 0 < lo < hi:
        raise ValueError("need 0 < lo < hi")
    pairs = _normalize_harmonics(harmonics)
    n = max(2, int(math.ceil((hi - lo) / coarse_step)) + 1)
    grid = np.linspace(lo, hi, n)
    values = np.array([_objective(float(q), pairs) for q in grid])
    i = int(np.argmin(values))
    a, b = float(grid[max(i - 1, 0)]), float(grid[min(i + 1, n - 1)])
    res = optimize.minimize_scalar(
        _objective, bounds=(a, b), args=(pairs,), method="bounded", options={"xatol": xatol}
    )
    best_q, best_v = float(res.x), float(res.fun)
    # Guard against an end point being the true minimum of a monotone bracket.
    for cand in (a, b):
        v = float(values[np.searchsorted(grid, cand)])
        if v < best_v:
            best_q, best_v = cand, v
    return best_q


def stationary_boundary(lo: float = 6.0, hi: float = 8.0) -> float:
    """Root of ``Delta`` in ``(lo, hi)`` by Brent's method; the paper's closed form is 29/4."""
    return float(optimize.brentq(lambda q: float(delta(q)), lo, hi, xtol=1e-15, rtol=4 * np.finfo(float).eps))


# --------------------------------------------------------------------------------------------
# Scale rules, overflow probabilities, Table 1
# --------------------------------------------------------------------------------------------


def _interval(lo: float, hi: float, lo_closed: bool, hi_closed: bool) -> dict[str, Any]:
    return {"lo": float(lo), "hi": float(hi), "lo_closed": bool(lo_closed), "hi_closed": bool(hi_closed)}


def _check_rule(rule: str) -> str:
    rule = rule.lower()
    if rule not in _RULES:
        raise ValueError(f"unknown scale rule {rule!r}; expected one of {_RULES}")
    return rule


def normalized_max_range(rule: str, q: float = UOS_Q) -> dict[str, Any]:
    """Analytic range of ``x = M / 2**e``: OCP ``[4, 8)``, TFS ``(3, 6]``, UOS ``(q/2, q]``."""
    rule = _check_rule(rule)
    if rule == "ocp":
        return _interval(4.0, 8.0, True, False)
    if rule == "tfs":
        return _interval(3.0, 6.0, False, True)
    return _interval(q / 2.0, q, False, True)


def overflow_interval(rule: str, q: float = UOS_Q) -> dict[str, Any] | None:
    """Part of the normalized-max range above 7 (saturated to 6), or ``None`` if empty.

    OCP ``(7, 8)`` (the paper writes the open interval; the endpoint 7 depends on ties), TFS
    none, UOS ``(7, q]`` for ``q > 7`` (``(q/2, q]`` once ``q/2 >= 7``).
    """
    rng = normalized_max_range(rule, q)
    if rng["hi"] <= OVERFLOW_THRESHOLD:
        return None
    if rng["lo"] >= OVERFLOW_THRESHOLD:
        return dict(rng)
    return _interval(OVERFLOW_THRESHOLD, rng["hi"], False, rng["hi_closed"])


def _log_uniform_mass(a: float, b: float) -> float:
    if b <= a:
        return 0.0
    value, _err = integrate.quad(lambda x: 1.0 / (x * _LN2), a, b, epsabs=1e-15, epsrel=1e-13)
    return float(value)


def ocp_overflow_probability() -> float:
    """``Pr(x >= 7)`` under the OCP rule, ``x`` with density ``1/(x ln 2)`` on ``[4, 8)``.

    Integrated numerically; the closed form is ``log2(8/7) ~= 0.19265``.
    """
    return _log_uniform_mass(OVERFLOW_THRESHOLD, 8.0)


def overflow_probability(rule: str, q: float = UOS_Q) -> float:
    """Probability (fraction) that the normalized maximum lands above 7 and saturates to 6.

    Uniform wrapped phase (density ``1/(x ln 2)`` on the rule's range).  OCP: mass of
    ``[7, 8)``; TFS: 0; UOS with boundary ``q``: mass of ``(7, q]`` within ``(q/2, q]``
    (0 if ``q <= 7``).
    """
    iv = overflow_interval(rule, q)
    if iv is None:
        return 0.0
    return _log_uniform_mass(iv["lo"], iv["hi"])


def _empirical_ranges(
    q: float, n: int, binades: float, seed: int
) -> dict[str, dict[str, float]]:
    """Observed min/max of ``M / 2**e`` per rule, ``e`` from ``formats.mxfp4.shared_exponent``."""
    import torch

    from lowbit_video.formats.mxfp4 import shared_exponent

    rng = np.random.default_rng(seed)
    m32 = np.exp2(rng.uniform(-binades, binades, size=n)).astype(np.float32)
    amax = torch.from_numpy(m32)
    m64 = m32.astype(np.float64)
    out: dict[str, dict[str, float]] = {}
    for rule, rule_q in (("ocp", 8.0), ("tfs", 6.0), ("uos", q)):
        e = shared_exponent(amax, rule=rule, q=rule_q)
        e = np.asarray(e.to(torch.int64).cpu().numpy(), dtype=np.float64)
        x = m64 / np.exp2(e)
        out[rule] = {"min": float(x.min()), "max": float(x.max())}
    return out


def table1(
    q: float = UOS_Q,
    *,
    empirical: bool = True,
    n_samples: int = 200_000,
    binades: float = 20.0,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """The paper's Table 1 (OCP, TFS, UOS), plus analytic overflow probability and an empirical check.

    Each row: ``rule``, ``exponent`` (formula text), ``normalized_max_range`` and
    ``overflow_interval`` (``{"lo", "hi", "lo_closed", "hi_closed"}`` or ``None``),
    ``overflow_probability`` (fraction, uniform wrapped phase) and ``empirical_range``
    (``{"min", "max"}`` of ``M / 2**e`` over ``n_samples`` log-uniform ``M`` spanning
    ``±binades`` binades, seeded, with ``e`` from ``lowbit_video.formats.mxfp4.shared_exponent``;
    ``None`` when ``empirical=False``).
    """
    emp = _empirical_ranges(q, n_samples, binades, seed) if empirical else None
    rows = []
    for rule in _RULES:
        rows.append(
            {
                "rule": rule,
                "exponent": _EXPONENT_TEXT[rule].format(q=q),
                "normalized_max_range": normalized_max_range(rule, q),
                "overflow_interval": overflow_interval(rule, q),
                "overflow_probability": overflow_probability(rule, q),
                "empirical_range": None if emp is None else emp[rule],
            }
        )
    return rows


def summary(*, empirical: bool = True) -> dict[str, Any]:
    """JSON-ready report printed by ``lowbit-video diagnose uos --json``."""
    curve_q = np.linspace(6.0, 8.0, 9)
    return {
        "argmin_q": argmin_q(),
        "stationary_boundary": stationary_boundary(),
        "ocp_overflow_probability": ocp_overflow_probability(),
        "table1": table1(empirical=empirical),
        "objective_curve": [[float(q), objective(float(q))] for q in curve_q],
    }
