"""The ContractService and WatchContracts tests written for SQLite, run against the etcd store.

The test functions are imported unchanged; this directory's conftest gives them a control plane
whose ``--store`` is a fresh prefix on a real etcd (SPEC §3.2, §6: both backends, one behaviour).
"""

from __future__ import annotations

from tests.integration.controlplane.test_contract_service import *  # noqa: F403
from tests.integration.controlplane.test_watch import *  # noqa: F403
