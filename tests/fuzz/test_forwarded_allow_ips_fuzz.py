"""Fuzzing ``computewatch server --forwarded-allow-ips`` (computewatch.server.serve's
``parse_forwarded_allow_ips``): any text gives a list of addresses and networks that Python's
``ipaddress`` reads, or a :class:`UsageError` (one line, exit status 2), nothing else; a list
never holds ``*`` or a name, which would widen whom the server believes."""

from __future__ import annotations

import ipaddress

from hypothesis import given, settings
from hypothesis import strategies as st

from computewatch.errors import UsageError
from computewatch.server.serve import DEFAULT_FORWARDED_ALLOW_IPS, parse_forwarded_allow_ips

BASE = settings.get_profile("computewatch-fuzz")  # tests/fuzz/conftest.py

_item = st.one_of(
    st.ip_addresses().map(str),
    st.ip_addresses(v=4).map(lambda a: f"{a}/{a.max_prefixlen // 2}"),
    st.ip_addresses(v=6).map(lambda a: f"{a}/64"),
    st.sampled_from(["*", "localhost", "127.0.0.1/33", "::1/129", "10.0.0.0/8", "", " ",
                     "127.1", "0x7f.0.0.1", "fe80::1%eth0", "[::1]", "1.2.3.4:80"]),
    st.text(max_size=20),
)  # fmt: skip


@settings(BASE, max_examples=300 * BASE.max_examples)
@given(st.lists(_item, max_size=6), st.sampled_from([",", ", ", ";", " "]))
def test_a_list_is_read_or_refused_in_one_line(items: list[str], sep: str) -> None:
    text = sep.join(items)
    try:
        got = parse_forwarded_allow_ips(text)
    except UsageError as e:
        assert str(e).startswith("--forwarded-allow-ips: ")
        assert "\n" not in str(e)
        return
    for item in got:
        assert item == item.strip() and item
        # as Uvicorn reads them: a network strictly, without host bits
        if "/" in item:
            assert str(ipaddress.ip_network(item)) == item
        else:
            assert str(ipaddress.ip_address(item)) == item


def test_the_default_and_the_empty_list() -> None:
    assert parse_forwarded_allow_ips(DEFAULT_FORWARDED_ALLOW_IPS) == ["127.0.0.1", "::1"]
    assert parse_forwarded_allow_ips("") == []
    assert parse_forwarded_allow_ips(" 10.0.0.0/24 , 10.1.2.3 ") == ["10.0.0.0/24", "10.1.2.3"]
    assert parse_forwarded_allow_ips("10.0.0.1/24,::0001") == ["10.0.0.0/24", "::1"]
