"""A2A-Version negotiation and A2A-Extensions parsing."""

from __future__ import annotations

import pytest

from a2a_gateway.protocol import versioning
from a2a_gateway.protocol.errors import VersionNotSupportedError


@pytest.mark.parametrize("value", [None, "", "   "])
def test_absent_version_is_served_as_1_0(value: str | None) -> None:
    assert versioning.negotiate_version(value) == "1.0"


@pytest.mark.parametrize("value", ["1.0", " 1.0 ", "1.0.0", "1.0.9", "01.00"])
def test_supported_versions(value: str) -> None:
    assert versioning.negotiate_version(value) == "1.0"


@pytest.mark.parametrize(
    "value",
    [
        *("0.3", "0.3.0", "1.1", "2.0", "1", "1.0.0.0", "v1.0", "1.x", "banana", "-1.0"),
        *("1.0-rc", "1.\u00b2", "1.0.\u00b2"),  # "²" is a digit to str.isdigit(), not to int()
    ],
)
def test_unsupported_versions(value: str) -> None:
    with pytest.raises(VersionNotSupportedError) as caught:
        versioning.negotiate_version(value)
    assert caught.value.metadata["supportedVersions"] == "1.0, 0.3"  # every version served
    assert "(served: 1.0, 0.3)" in caught.value.message


def test_long_version_values_are_truncated_in_the_message() -> None:
    with pytest.raises(VersionNotSupportedError) as caught:
        versioning.negotiate_version("9" * 500)
    assert len(caught.value.message) < 120


def test_parse_extensions() -> None:
    values = ["urn:a, urn:b", " urn:c ,, ", "", "urn:a"]
    assert versioning.parse_extensions(values) == {"urn:a", "urn:b", "urn:c"}
    assert versioning.parse_extensions([]) == frozenset()


def test_format_extensions_is_sorted_and_stable() -> None:
    assert versioning.format_extensions({"urn:b", "urn:a"}) == "urn:a, urn:b"
    assert versioning.parse_extensions([versioning.format_extensions({"urn:x", "urn:y"})]) == {
        "urn:x",
        "urn:y",
    }


def test_header_names() -> None:
    assert versioning.VERSION_HEADER == "A2A-Version"
    assert versioning.EXTENSIONS_HEADER == "A2A-Extensions"
    assert versioning.LEGACY_EXTENSIONS_HEADER == "X-A2A-Extensions"
