"""Flags that also read ``FLEETPLANE_<FLAG_IN_UPPER_SNAKE>`` environment variables (SPEC §1).

A stdlib-only leaf shared by both planes (like ``controlplane.load.wire``): the router
and engine-sim parse their flags with it too, so the rule lives in one place.
Precedence: a flag on the command line wins over the environment, which wins over the
flag's default. Repeatable flags (``action="append"``) read a comma-separated list.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from typing import Any

ENV_PREFIX = "FLEETPLANE_"


def env_name(option: str) -> str:
    """``--max-body-bytes`` -> ``FLEETPLANE_MAX_BODY_BYTES``."""
    return ENV_PREFIX + option.lstrip("-").replace("-", "_").upper()


class EnvArgumentParser(argparse.ArgumentParser):
    """An ArgumentParser whose long options take their default from the environment."""

    def __init__(self, *args: Any, environ: Mapping[str, str] | None = None, **kwargs: Any) -> None:
        self._environ = os.environ if environ is None else environ
        kwargs.setdefault("formatter_class", argparse.ArgumentDefaultsHelpFormatter)
        super().__init__(*args, **kwargs)

    def add_argument(self, *names: Any, **kwargs: Any) -> argparse.Action:
        action = super().add_argument(*names, **kwargs)
        longs = [n for n in action.option_strings if n.startswith("--")]
        if not longs or action.dest == "help":
            return action
        raw = self._environ.get(env_name(longs[0]))
        if raw is None:
            return action
        if isinstance(action, argparse._AppendAction):
            action.default = [self._convert(action, v.strip()) for v in raw.split(",") if v.strip()]
        elif isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
            truthy = raw.strip().lower() in {"1", "true", "yes", "on"}
            action.default = truthy if isinstance(action, argparse._StoreTrueAction) else not truthy
        else:
            action.default = self._convert(action, raw)
        action.required = False
        return action

    def _convert(self, action: argparse.Action, raw: str) -> Any:
        value: Any = raw
        if action.type is not None and callable(action.type):
            try:
                value = action.type(raw)
            except (TypeError, ValueError, argparse.ArgumentTypeError) as exc:
                self.error(f"{env_name(action.option_strings[-1])}={raw!r}: {exc}")
        if action.choices is not None and value not in action.choices:
            allowed = ", ".join(map(str, action.choices))
            self.error(f"{env_name(action.option_strings[-1])}={raw!r}: must be one of {allowed}")
        return value
