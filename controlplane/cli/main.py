"""The ``fleetplane`` console script: one entry point for every subcommand of SPEC §1.

Control-plane commands run in this process. ``router`` and ``engine-sim`` belong to the
data plane, which the control plane never imports (ARCHITECTURE.md): they replace this
process with ``python -m dataplane`` / ``python -m dataplane.engine.sim`` (same PID, so
signals and exit codes are theirs).
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence

import shtab

from controlplane.envflags import EnvArgumentParser, die_with_parent

# Subcommand -> module with ``add_arguments(parser)`` and ``run(args) -> int``.
LOCAL_COMMANDS: dict[str, tuple[str, str]] = {
    "up": ("controlplane.cli.up", "run the whole fleet on its embedded default"),
    "control": ("controlplane.cli.control", "run the control plane (gRPC)"),
    "contract": ("controlplane.cli.contract", "list, get, set, delete, history, rollback, diff contracts"),
    "workers": ("controlplane.cli.workers", "list, add, remove workers"),
    "loads": ("controlplane.cli.loads", "show worker load views"),
    "routers": ("controlplane.cli.routers", "show routers and their applied revision"),
    "stats": ("controlplane.cli.stats", "show sampling-contract rejection totals"),
}
# Subcommand -> data-plane module run as ``python -m MODULE``.
DATAPLANE_COMMANDS: dict[str, tuple[str, str]] = {
    "router": ("dataplane", "run the router (HTTP/1.1 + h2c front door)"),
    "engine-sim": ("dataplane.engine.sim", "run a simulated SGLang-compatible engine"),
}
NOT_BUILT_EXIT = 2
INTERRUPTED_EXIT = 130  # 128 + SIGINT, as a shell reports it


def main(argv: Sequence[str] | None = None) -> int:
    die_with_parent()
    # Ctrl-C must stop `loads --watch` and a waiting `workers add` however we were started: a
    # shell starts background jobs (`cmd &`, and what they start) with SIGINT ignored, which a
    # child inherits, and Python then leaves it ignored instead of raising KeyboardInterrupt.
    # Set here, before exec, so `router` and `engine-sim` start with the default disposition too.
    if threading.current_thread() is threading.main_thread():  # tests also call main() in threads
        signal.signal(signal.SIGINT, signal.default_int_handler)
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in DATAPLANE_COMMANDS:
        target = DATAPLANE_COMMANDS[args[0]][0]
        os.execv(sys.executable, [sys.executable, "-m", target, *args[1:]])
    return _run(build_parser(), args)


def build_parser() -> argparse.ArgumentParser:
    """Every local command's parser (``router`` and ``engine-sim`` as names only: they are
    parsed by the data plane's own process)."""
    parser = EnvArgumentParser(
        prog="fleetplane", description="fleetplane: sampling contracts + real-load routing"
    )
    parser.add_argument("--version", action="version", version=f"fleetplane {_version()}")
    # Completion scripts generated from these parsers, so they follow every flag (shtab).
    shtab.add_argument_to(parser, ["--print-completion"])
    # It acts only when given (no environment variable reads it): its help says what it does.
    completion = next(a for a in parser._actions if "--print-completion" in a.option_strings)
    completion.help = "print a completion script for this shell and exit (e.g. source <(fleetplane --print-completion bash))"
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (_, help_text) in DATAPLANE_COMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    for name, (module_name, help_text) in LOCAL_COMMANDS.items():
        cmd = sub.add_parser(name, help=help_text, description=help_text)
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            cmd.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
            cmd.set_defaults(_run=_not_built(name))
            continue
        module.add_arguments(cmd)
        cmd.set_defaults(_run=module.run)
    return parser


def _run(parser: argparse.ArgumentParser, args: list[str]) -> int:
    ns = argparse.Namespace(command="")
    try:
        # Parsing runs actions too (--print-completion prints from there).
        ns = parser.parse_args(args)
        return int(ns._run(ns))
    except KeyboardInterrupt:
        # Ctrl-C while a call waits (``workers add`` waits for discovery): one line, the
        # shell's exit code for SIGINT, no traceback.
        print(f"fleetplane {ns.command}: interrupted", file=sys.stderr)
        return INTERRUPTED_EXIT
    except BrokenPipeError:
        # The reader went away (``fleetplane contract list | head -1``): no traceback, and no
        # second error when the interpreter flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def _version() -> str:
    """From the package metadata (as ``fleetplane_build_info`` reports it)."""
    import importlib.metadata

    try:
        return importlib.metadata.version("fleetplane")
    except importlib.metadata.PackageNotFoundError:  # run from a tree that was never installed
        return "unknown"


def _not_built(name: str) -> Callable[[argparse.Namespace], int]:
    def run(_ns: argparse.Namespace) -> int:
        print(f"fleetplane {name}: not built yet", file=sys.stderr)
        return NOT_BUILT_EXIT

    return run


if __name__ == "__main__":
    raise SystemExit(main())
