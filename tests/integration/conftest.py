"""Integration tests: product modules wired to real parts (sockets on 127.0.0.1:0, real gRPC, ZMQ,
SQLite files, etcd, engine-sim processes), the package tree mirrored below.

Shared by the areas: one real etcd for the whole session (the store and server tests use it).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakes.etcd import EtcdServer


@pytest.fixture(scope="session")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    """A single-member etcd on free loopback ports for the whole session (skips without etcd)."""
    with EtcdServer(tmp_path_factory.mktemp("etcd")) as server:
        yield server
