"""Kubernetes quantity parsing: suffixes, exponents, rounding up to milli-units, and rejected input."""

import pytest

from hetsched.api.quantity import QuantityError, format_quantity, parse_quantity


@pytest.mark.parametrize(("text", "milli"), [
    ("100m", 100), ("1", 1000), (2, 2000), ("1.5", 1500), ("2e3", 2_000_000), ("8Gi", 8 * 2**30 * 1000),
    ("512Mi", 512 * 2**20 * 1000), ("1k", 1_000_000), ("1M", 10**9), ("0.1", 100), ("1n", 1), ("1u", 1),
    ("1P", 10**18), (".5", 500), ("1.0005", 1001), ("0", 0), ("+3", 3000), ("1e-3", 1),
])
def test_parses_kubernetes_quantities(text: object, milli: int) -> None:
    assert parse_quantity(text) == milli


@pytest.mark.parametrize("bad", ["", "abc", "1.2.3", "10 Gi", "1Gb", "-1", "-100m", "1e", True, None, [1]])
def test_rejects_invalid_quantities(bad: object) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(bad)


def test_formats_back_readably() -> None:
    assert format_quantity(1500) == "1.5"
    assert format_quantity(250) == "250m"
    assert format_quantity(8 * 2**30 * 1000, "memory") == "8Gi"
