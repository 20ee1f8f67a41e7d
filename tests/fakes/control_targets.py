"""What the router's control-plane client drives (a ``ControlTarget``), played by recorders."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from controlplane.contracts import SamplingContract
from dataplane.router.control.convert import EngineLoad
from dataplane.router.fleet.workers import WorkerSpec


class FakeRouter:
    """Records what the client applies; ``refuse`` makes the next contract sets fail to compile."""

    def __init__(self) -> None:
        self.contracts: list[tuple[int, dict[str, SamplingContract]]] = []
        self.workers: list[Sequence[WorkerSpec]] = []
        self.loads: Mapping[str, EngineLoad] = {}
        self.rejections: dict[tuple[str, str, str], int] = {}
        self.connected = False
        self.replica = ""
        self.refuse = False
        self.ejected: list[str] = []

    def apply_contracts(self, revision: int, contracts: Mapping[str, SamplingContract], /) -> None:
        if self.refuse:
            raise ValueError("top_p: cannot compile")
        self.contracts.append((revision, dict(contracts)))

    def apply_workers(self, specs: Sequence[WorkerSpec], /) -> None:
        self.workers.append(specs)

    def apply_loads(self, loads: Mapping[str, EngineLoad], /) -> None:
        self.loads = loads

    def rejection_counts(self) -> Mapping[tuple[str, str, str], int]:
        return dict(self.rejections)

    def ejected_workers(self) -> Sequence[str]:
        return self.ejected

    def set_control_plane_connected(self, connected: bool, /) -> None:
        self.connected = connected

    def set_control_plane_replica(self, address: str, /) -> None:
        self.replica = address


class Recorder:
    """A ControlTarget that records what it is given."""

    def __init__(self) -> None:
        self.contracts: list[int] = []
        self.workers: list[Sequence[WorkerSpec]] = []
        self.loads: Mapping[str, EngineLoad] = {}
        self.counts: dict[tuple[str, str, str], int] = {}
        self.ejected: list[str] = []

    def apply_contracts(self, revision: int, contracts: Mapping[str, SamplingContract], /) -> None:
        self.contracts.append(revision)

    def apply_workers(self, specs: Sequence[WorkerSpec], /) -> None:
        self.workers.append(specs)

    def apply_loads(self, loads: Mapping[str, EngineLoad], /) -> None:
        self.loads = loads

    def rejection_counts(self) -> Mapping[tuple[str, str, str], int]:
        return self.counts

    def ejected_workers(self) -> Sequence[str]:
        return self.ejected

    def set_control_plane_connected(self, connected: bool, /) -> None:
        pass

    def set_control_plane_replica(self, address: str, /) -> None:
        pass
