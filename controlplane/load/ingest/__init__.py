"""The load ingest (adapter, SPEC §7): one ZMTP SUB connection per (worker, dp rank) of our own.

``zmtp`` speaks the protocol (pure), ``dialer`` connects, ``batches`` reads every ready socket
in one batch, ``subscriber`` owns the connections and feeds decoded frames into the pure
``load.table``; ``OSError`` from a dial stops at ``subscriber``, never reaching ``load/``.
"""
