"""What a worker registration is and how a worker is asked about itself (SPEC §1, §6, §7).

``url`` is the one spelling of a worker URL (a shared leaf: the router uses it too);
``registration`` validates RegisterWorker's fields (pure); ``discovery`` reads a worker's
``/server_info`` and ``/v1/models`` over ``httpget``. Above the store (the record it validates
into is ``store.workers.WorkerRecord``), below ``load/``, whose load plane keeps the registry.
"""
