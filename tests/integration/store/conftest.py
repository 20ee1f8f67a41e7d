"""Fixtures: a fresh key prefix per test on the session's etcd, and control planes on it."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest

from controlplane.app import ControlPlane
from tests.fakes.etcd import EtcdServer
from tests.fakes.inproc_control_plane import running_control_plane


@pytest.fixture
def store_url(etcd: EtcdServer) -> str:
    """``--store`` for this test: the shared etcd under a prefix no other test uses."""
    return etcd.url(f"t-{uuid.uuid4().hex[:12]}")


@pytest.fixture
def control_plane_factory(
    tmp_path: Path, store_url: str
) -> Callable[..., AbstractAsyncContextManager[ControlPlane]]:
    """``async with control_plane_factory(**settings) as plane``: every plane on the test's prefix."""

    def factory(**settings: Any) -> AbstractAsyncContextManager[ControlPlane]:
        settings.setdefault("store", store_url)
        return running_control_plane(tmp_path, **settings)

    return factory
