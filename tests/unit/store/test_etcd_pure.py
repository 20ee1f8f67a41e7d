"""The etcd store's pure parts: --store etcd:// parsing, key ranges, record encoding (no sockets)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controlplane.contracts import parse_contract_json
from controlplane.errors import SettingsError
from controlplane.settings import Address, EtcdLocation, parse_store
from controlplane.store.etcd import decode_version, encode_version
from controlplane.store.etcd_client import prefix_end
from controlplane.store.model import ChangeKind, ContractVersion


def test_etcd_urls_give_endpoints_and_a_prefix():
    """One or several HOST:PORT, IPv6 in brackets, an optional /PREFIX (default "fleetplane")."""
    assert parse_store("etcd://127.0.0.1:2379") == EtcdLocation((Address("127.0.0.1", 2379),), "fleetplane")
    assert parse_store("etcd://a:1,[::1]:2/team/prod/") == EtcdLocation(
        (Address("a", 1), Address("::1", 2)), "team/prod"
    )
    assert str(parse_store("etcd://a:1,b:2/p")) == "etcd://a:1,b:2/p"


@pytest.mark.parametrize("bad", ["etcd://", "etcd://host", "etcd://h:1,", "etcd://h:0/p", "etcd://h:1/a b"])
def test_malformed_etcd_urls_are_refused_naming_the_flag_and_value(bad: str):
    """A missing port, an empty endpoint, port 0 or a prefix with whitespace is a startup error."""
    with pytest.raises(SettingsError, match="--store") as info:
        parse_store(bad)
    assert repr(bad) in str(info.value)


@given(st.binary(min_size=1, max_size=8), st.binary(max_size=4))
def test_prefix_end_bounds_exactly_the_keys_with_the_prefix(prefix: bytes, suffix: bytes):
    """Every key starting with the prefix sorts below prefix_end; the prefix itself is not above it."""
    end = prefix_end(prefix)
    assert prefix + suffix < end or end == b"\0"


@given(
    scope=st.text(min_size=1, max_size=20),
    comment=st.text(max_size=40),
    deleted=st.booleans(),
    version=st.integers(1, 2**40),
)
def test_versions_round_trip_through_their_json_record(scope: str, comment: str, deleted: bool, version: int):
    """What a control plane writes to etcd is read back identical by every other one."""
    contract = (
        None if deleted else parse_contract_json('{"top_k": {"min": 1, "max": 8, "default": 4}, "n": 2}')
    )
    v = ContractVersion(
        scope,
        version,
        version + 7,
        ChangeKind.DELETE if deleted else ChangeKind.ROLLBACK,
        contract,
        "author",
        1_700_000_000_000_000,
        comment,
        0 if deleted else 1,
    )
    assert decode_version(encode_version(v)) == v
