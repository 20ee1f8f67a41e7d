"""The worker registry in etcd (SPEC §6: RegisterWorker survives restarts; shared by every replica).

One key per worker, ``/PREFIX/workers/URL`` (URL percent-encoded), holding the record as JSON.
Each change is one etcd transaction, acknowledged once a quorum has it (SPEC §6 "Durability").
Control planes on one prefix see the same registry: each reads it when it starts and again
whenever the watch on ``/PREFIX/workers/`` reports a change (``changes``).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from urllib.parse import quote

from controlplane.store.etcd_client import MAX_TXN_OPS, EtcdClient, delete, prefix_end, put
from controlplane.store.workers import Protocol, WorkerRecord


def encode_worker(record: WorkerRecord) -> bytes:
    return json.dumps(
        {
            "url": record.url,
            "protocol": int(record.protocol),
            "resolved_protocol": int(record.resolved_protocol),
            "models": list(record.models),
            "load_endpoints": list(record.load_endpoints),
            "load_topic": record.load_topic,
            "discovered": record.discovered,
            "register_time_unix_s": record.register_time_unix_s,
            "discovery_error": record.discovery_error,
        },
        separators=(",", ":"),
    ).encode()


def decode_worker(raw: bytes) -> WorkerRecord:
    doc = json.loads(raw)
    return WorkerRecord(
        url=str(doc["url"]),
        protocol=Protocol(int(doc["protocol"])),
        resolved_protocol=Protocol(int(doc["resolved_protocol"])),
        models=tuple(str(m) for m in doc["models"]),
        load_endpoints=tuple(str(e) for e in doc["load_endpoints"]),
        load_topic=str(doc["load_topic"]),
        discovered=bool(doc["discovered"]),
        register_time_unix_s=float(doc["register_time_unix_s"]),
        discovery_error=str(doc["discovery_error"]),
    )


class EtcdWorkerRegistry:
    """``WorkerRegistry`` under ``/PREFIX/workers/`` of the store's etcd client."""

    def __init__(self, client: EtcdClient) -> None:
        self._client = client
        self._prefix = client.key("workers", "")

    def _key(self, url: str) -> bytes:
        return self._prefix + quote(url, safe="").encode()

    async def list(self) -> list[WorkerRecord]:
        (kvs,), _ = await self._client.read_all((self._prefix, prefix_end(self._prefix)))
        return sorted((decode_worker(kv.value) for kv in kvs), key=lambda r: r.url)

    async def put(self, record: WorkerRecord, *, replaces: Sequence[str] = ()) -> None:
        # One transaction: a re-registration under a new URL never leaves both, or neither.
        ops = [delete(self._key(url)) for url in replaces if url != record.url]
        ops.append(put(self._key(record.url), encode_worker(record)))
        await self._client.txn((), ops)

    async def put_many(self, records: Sequence[WorkerRecord]) -> None:
        # etcd caps the operations of one transaction (--max-txn-ops, 128 by default): a bulk
        # registration past that is written in several transactions, each durable on return.
        latest = {r.url: r for r in records}
        ops = [put(self._key(url), encode_worker(r)) for url, r in latest.items()]
        for start in range(0, len(ops), MAX_TXN_OPS):
            await self._client.txn((), ops[start : start + MAX_TXN_OPS])

    async def delete(self, url: str) -> bool:
        response = await self._client.txn((), [delete(self._key(url))])
        return int(response.responses[0].response_delete_range.deleted) > 0

    def changes(self) -> AsyncIterator[None]:
        """Yields after every change to the registry, by any control plane (see ``EtcdClient.changes``)."""
        return self._client.changes(self._prefix)
