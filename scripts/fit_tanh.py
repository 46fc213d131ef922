#!/usr/bin/python3
"""Fits the rational tanh of the SIMD kernels (runtime/src/kernels/simd/math.inl).

    tanh(x) ~ x P(y) / Q(y),  y = x^2,  |x| clamped to C,
    P of degree 6 (7 coefficients), Q of degree 3 with Q(0) = 1,

minimax in absolute error on [0, C] (tanh is odd), by differential
correction: each pass solves the linear program
    min t  subject to  |tanh(x_i) Q(y_i) - x_i P(y_i)| <= t Q_prev(y_i)
over a dense grid, Q_prev being the previous pass's denominator, until t
stops falling. The fit is done in u = y / C^2 (coefficients of similar size)
and converted to y; the coefficients are then rounded to float and the
error of the float evaluation the kernels do (Estrin, one rounding per
operation, a division) is reported. The kernels' own error, with their
reciprocal estimate and Newton step, is checked by tests/unit/test_backends
(NonlinearitiesAreAccurate) and the kernel-set tests.

    /usr/bin/python3 scripts/fit_tanh.py        (numpy, scipy: Debian python3-scipy)
"""
import numpy as np
from scipy.optimize import linprog

C = 9.0                 # tanh(9) = 1 - 3.0e-8: 1.0f to float precision
NP, NQ = 7, 4           # coefficients of P (degree 6) and Q (degree 3, Q(0) = 1)


def fit(grid=20000, passes=30):
    x = np.concatenate([np.linspace(0.0, C, grid), C * (1 - np.cos(np.linspace(0, np.pi / 2, grid)))])
    x = np.unique(x)
    u = (x / C) ** 2
    f = np.tanh(x)
    Vp = np.stack([x * u ** k for k in range(NP)], axis=1)       # x P(u)
    Vq = np.stack([u ** k for k in range(1, NQ)], axis=1)         # Q(u) - 1
    q_prev = np.ones_like(x)
    best = None
    for _ in range(passes):
        # variables: P (NP), Q without its constant (NQ - 1), t
        n = NP + NQ - 1 + 1
        cost = np.zeros(n)
        cost[-1] = 1.0
        # r = f Q - x P = f + f Vq b - Vp a;  r <= t q_prev  and  -r <= t q_prev
        A1 = np.hstack([-Vp, f[:, None] * Vq, -q_prev[:, None]])
        b1 = -f
        A2 = np.hstack([Vp, -f[:, None] * Vq, -q_prev[:, None]])
        b2 = f
        # Q > 0 on the grid (Q = 1 + Vq b >= 1e-3)
        A3 = np.hstack([np.zeros((len(x), NP)), -Vq, np.zeros((len(x), 1))])
        b3 = np.full(len(x), 1.0 - 1e-3)
        res = linprog(cost, A_ub=np.vstack([A1, A2, A3]), b_ub=np.concatenate([b1, b2, b3]),
                      bounds=[(None, None)] * n, method="highs")
        if res.status != 0:
            raise SystemExit("linear program failed: " + res.message)
        a, b = res.x[:NP], res.x[NP:NP + NQ - 1]
        q = 1 + Vq @ b
        err = np.max(np.abs(Vp @ a / q - f))
        if best is not None and err >= best[0] * (1 - 1e-4):
            break
        best = (err, a, b)
        q_prev = q
    return best


def to_y(a, b):
    """Coefficients in u = y / C^2 -> in y, in double."""
    pa = [a[k] / C ** (2 * k) for k in range(NP)]
    qb = [1.0] + [b[k - 1] / C ** (2 * k) for k in range(1, NQ)]
    return pa, qb


def f32(v):
    return np.float32(v)


def fma32(a, b, c):  # one rounding: exact in double for these magnitudes, then to float
    return np.float32(np.float64(a) * np.float64(b) + np.float64(c))


def tanh32(xv, pa, qb):
    """The kernels' evaluation order in float32 (Estrin), with an exact division."""
    t = np.clip(xv.astype(np.float32), -np.float32(C), np.float32(C))
    y = f32(t * t)
    y2 = f32(y * y)
    y4 = f32(y2 * y2)
    p = [f32(c) for c in pa]
    q = [f32(c) for c in qb]
    e0 = fma32(p[1], y, p[0])
    e1 = fma32(p[3], y, p[2])
    e2 = fma32(p[5], y, p[4])
    f0 = fma32(e1, y2, e0)
    f1 = fma32(p[6], y2, e2)
    num = f32(fma32(f1, y4, f0) * t)
    q0 = fma32(q[1], y, q[0])
    q1 = fma32(q[3], y, q[2])
    den = fma32(q1, y2, q0)
    return f32(num / den)


def main():
    err, a, b = fit()
    pa, qb = to_y(a, b)
    xs = np.linspace(-20, 20, 4000001)
    got = tanh32(xs, pa, qb).astype(np.float64)
    e32 = np.max(np.abs(got - np.tanh(xs.astype(np.float32).astype(np.float64))))
    print("minimax absolute error of the fit (double): %.3g" % err)
    print("float evaluation, [-20, 20]: max |error| %.3g, max |tanh| %.9g" % (e32, np.max(np.abs(got))))
    print("P (y^0 .. y^6):")
    for c in pa:
        print("  %.9gf" % np.float32(c))
    print("Q (y^0 .. y^3):")
    for c in qb:
        print("  %.9gf" % np.float32(c))


if __name__ == "__main__":
    main()
