"""The fakes' shared helpers (computewatch.testing._script)."""

from __future__ import annotations

from computewatch.testing._script import mix, unit


def test_unit_noise_is_kept_and_unchanged_by_it() -> None:
    """A preset's scripts ask for one noise step many times a tick: it is hashed once."""
    args = (0x1234_5678_9ABC, 3, 987_654)
    unit.cache_clear()
    first = unit(*args)
    for _ in range(10):
        assert unit(*args) == first
    info = unit.cache_info()
    assert (info.misses, info.hits) == (1, 10)
    assert first == mix(*args) / 2**63 - 1.0 == unit.__wrapped__(*args)
    assert -1.0 <= first < 1.0
