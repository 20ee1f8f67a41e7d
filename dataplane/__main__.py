"""``python -m dataplane`` is ``fleetplane router`` (SPEC §1)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    from controlplane.envflags import die_with_parent

    die_with_parent()
    from dataplane.errors import SettingsError
    from dataplane.router.logs import configure_logging
    from dataplane.router.settings import build_parser, settings_from_args

    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    try:
        settings = settings_from_args(args)
    except SettingsError as exc:
        print(f"fleetplane router: {exc}", file=sys.stderr, flush=True)
        return 2
    from controlplane.envflags import LOG_LEVELS

    configure_logging(LOG_LEVELS[args.log_level])
    if settings.processes > 1:
        from dataplane.router.process.supervisor import run_supervised

        return run_supervised(
            argv,
            settings.processes,
            settings.listen_host,
            settings.listen_port,
            settings.drain_grace_s,
            settings.router_id,
            # A given --router-id is stable across restarts: each child keeps its own counts file.
            journals="off" if args.counts_journal == "off" else "own" if args.router_id else "slot",
        )
    from dataplane.router.app import serve

    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        return asyncio.run(serve(settings))
    return uvloop.run(serve(settings))


if __name__ == "__main__":
    raise SystemExit(main())
