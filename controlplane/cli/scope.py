"""``--scope SCOPE`` / ``--fleet`` of the ``contract`` commands, and the checks on a scope name.

The fleet-wide scope is ``*`` (SPEC §3.2), which a shell expands into the file names of the
current directory when it is not quoted: ``contract set --scope * ...`` in a directory holding one
file would write a contract for a model named after that file. So the fleet-wide scope has names
that need no quoting (``--fleet``, ``--scope default``), and a scope that names a file here and no
served model is refused as what it most likely is: a shell expansion. A scope that no registered
worker serves is only warned about: a contract may be written before its model is deployed.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

import grpc

from controlplane.cli.client import USAGE_ERROR_EXIT, CommandError, ControlPlaneClient, describe_rpc_error
from controlplane.v1 import load_pb2, load_pb2_grpc

FLEET_SCOPE = "*"
# Spellings of the fleet-wide scope that a shell leaves alone.
FLEET_ALIASES = frozenset({"default"})
SCOPE_HELP = (
    'a model name, or the fleet-wide scope: "*" (quoted: the shell expands a bare *), "default" or --fleet'
)


def add_scope_arguments(parser: argparse.ArgumentParser) -> None:
    """``--scope SCOPE`` and ``--fleet`` (one of them is required; ``resolve_scope`` checks)."""
    parser.add_argument("--scope", default=None, help=SCOPE_HELP)
    parser.add_argument("--fleet", action="store_true", help="the fleet-wide scope (same as --scope '*')")


def requested_scope(args: argparse.Namespace) -> str:
    """The scope the flags name (``*`` for ``--fleet`` and ``--scope default``), before any check."""
    if args.fleet and args.scope is not None:
        raise CommandError("--scope and --fleet: give one of them", USAGE_ERROR_EXIT)
    if args.fleet:
        return FLEET_SCOPE
    if args.scope is None:
        raise CommandError(
            "give --scope SCOPE (a model name) or --fleet (the fleet-wide scope)", USAGE_ERROR_EXIT
        )
    if args.scope in FLEET_ALIASES:
        return FLEET_SCOPE
    if not args.scope:
        raise CommandError(
            "--scope '': give a model name, or --fleet for the fleet-wide scope", USAGE_ERROR_EXIT
        )
    return str(args.scope)


def served_models(client: ControlPlaneClient) -> set[str] | None:
    """The models of the registered workers, or None when the registry cannot be read."""
    stub = load_pb2_grpc.LoadServiceStub(client.channel)
    try:
        listed = stub.ListWorkers(
            load_pb2.ListWorkersRequest(), metadata=client.metadata, timeout=client.timeout_s
        )
    except grpc.RpcError as exc:
        if isinstance(exc, grpc.Call) and exc.code() is grpc.StatusCode.PERMISSION_DENIED:
            return None  # a token without access to the registry: the command's own call decides
        raise CommandError(describe_rpc_error(exc, client.target)) from None
    return {model for worker in listed.workers for model in worker.models}


def check_scope(
    scope: str,
    models: set[str] | None,
    *,
    warn_unserved: bool,
    exists: Callable[[str], bool] = os.path.lexists,
) -> None:
    """Refuse what looks like a shell expansion; warn (stderr) when no served model matches.

    ``models`` None (unknown): a file name is refused all the same, no warning is printed.
    """
    if scope == FLEET_SCOPE or (models is not None and scope in models):
        return
    if exists(scope):
        raise CommandError(
            f"--scope {scope}: this is the name of a file here and of no served model; an unquoted * was "
            "probably expanded by the shell: write --scope '*' (quoted) or --fleet for the fleet-wide scope",
            USAGE_ERROR_EXIT,
        )
    if warn_unserved and models is not None:
        served = ", ".join(sorted(models)) or "none"
        print(
            f"warning: no registered worker serves model {scope!r} (served: {served}); this contract "
            "judges no request until a worker serving it is registered",
            file=sys.stderr,
            flush=True,
        )
