"""100,000 steps from Python keep the process's memory flat: nothing is
allocated per step but the output array, which Python frees (none with out=)."""

import numpy as np

from conftest import FIXTURES, quiet_convert
import ferry


def rss_kib():
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    import resource

    return pages * resource.getpagesize() // 1024


def test_100000_steps_keep_memory_flat():
    m = ferry.Model(quiet_convert(FIXTURES / "models" / "lstm_2l_tm.pt", graph="lstm > last > fc").model)
    s = m.session()
    x = np.random.default_rng(0).standard_normal((1, 7)).astype(np.float32)
    out = np.empty((1, 2), np.float32)
    for _ in range(10_000):  # warm: the allocator's pools, numpy's caches
        s.step(x)
        s.step(x, out=out)
    before = rss_kib()
    for _ in range(100_000):
        y = s.step(x)
    for _ in range(100_000):
        s.step(x, out=out)
    grown = rss_kib() - before
    assert np.isfinite(y).all() and np.isfinite(out).all()
    assert grown < 1024, f"resident memory grew by {grown} KiB over 200,000 steps"
