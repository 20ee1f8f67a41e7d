"""Flags that also read ``FLEETPLANE_<FLAG_IN_UPPER_SNAKE>`` environment variables (SPEC §1).

A stdlib-only leaf shared by both planes (like ``controlplane.load.wire``): the router
and engine-sim parse their flags with it too, so the rule lives in one place.
Precedence: a flag on the command line wins over the environment, which wins over the
flag's default (so a bad environment value is an error only when the flag is not given).
Repeatable flags (``action="append"``) read a comma-separated list. A parse error is one line
on stderr, ``PROG: MESSAGE``, and exit code 2 (SPEC §1: startup errors are one line naming the
flag, the value and what is allowed), not argparse's usage block.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import sys
import weakref
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

ENV_PREFIX = "FLEETPLANE_"
# Flags whose value is a secret: --help says a value is set, never which.
SECRET_OPTIONS = frozenset({"--token", "--worker-api-key", "--api-key"})
# ``--log-level`` of every process (router, control plane, engine-sim, up): names -> logging levels.
LOG_LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40}
# A parent that must outlive its children names itself here (``die_with_parent``).
PARENT_PID_ENV = ENV_PREFIX + "PARENT_PID"
_PR_SET_PDEATHSIG = 1  # linux/prctl.h
# Actions whose default came from the environment, and actions whose help is already final (an
# action's parser copies it onto a subcommand's parser with the default shown, see ``help_text``).
_FROM_ENV: weakref.WeakSet[argparse.Action] = weakref.WeakSet()
_FINAL_HELP: weakref.WeakSet[argparse.Action] = weakref.WeakSet()


def read_key(flag: str, key: str | None, file_flag: str, key_file: str | None) -> str | None:
    """A secret given as ``flag`` or as the contents of ``file_flag`` (one trailing newline is not
    part of it), checked to be one header-safe token: it goes into an ``Authorization`` line as is.

    Raises ``ValueError`` naming the flag (never the key); each plane turns it into its own
    startup error.
    """
    if key_file is not None:
        if key is not None:
            raise ValueError(f"{flag}/{file_flag}: give one of them, not both")
        try:
            with open(key_file, encoding="utf-8") as f:
                key = f.read().removesuffix("\n").removesuffix("\r")
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
            raise ValueError(f"{file_flag} {key_file!r}: cannot read ({reason})") from None
    if key is None:
        return None
    if not key or not key.isascii() or not key.isprintable() or " " in key:
        source = f"{file_flag} {key_file!r}" if key_file is not None else flag
        raise ValueError(f"{source}: must be one key, printable ASCII without spaces")
    return key


def die_with_parent() -> None:
    """SIGTERM this process when the parent named in ``FLEETPLANE_PARENT_PID`` dies, even by
    SIGKILL (Linux's ``PR_SET_PDEATHSIG``): ``fleetplane up`` and the router's supervisor start
    their children so (SPEC §1: no orphan process). Each process's ``main`` calls it first.

    Armed here, after exec, not by a ``preexec_fn`` between fork and exec: a ``preexec_fn``
    makes ``subprocess`` fork() a parent that runs gRPC, and gRPC's fork handlers can abort the
    child before it runs a line (SIGABRT, "epoll_wait error: Bad file descriptor",
    grpc/grpc#43055). Without one, ``subprocess`` uses vfork and exec: no fork handler runs.
    The variable is removed, so the processes this one starts do not inherit it.
    """
    raw = os.environ.pop(PARENT_PID_ENV, None)
    if raw is None or not raw.isdigit():
        return
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux: SIGTERM/Ctrl-C of the parent still stop it
        return
    prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM))
    if os.getppid() != int(raw):  # the parent died before prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)


def env_name(option: str) -> str:
    """``--max-body-bytes`` -> ``FLEETPLANE_MAX_BODY_BYTES``."""
    return ENV_PREFIX + option.lstrip("-").replace("-", "_").upper()


class _BadEnvValue:
    """The default of a flag whose environment value is invalid: an error once the flag is
    not given on the command line (the flag wins over the environment)."""

    def __init__(self, message: str) -> None:
        self.message = message


def help_text(action: argparse.Action) -> str | None:
    """An action's help with its default (the environment's value when set) as --help shows it.

    No default shown when there is none to show ("(default: None)" tells the operator nothing); a
    secret's value never, only that the environment set one.
    """
    text = action.help
    if action in _FINAL_HELP or text is argparse.SUPPRESS:
        return text
    if SECRET_OPTIONS.intersection(action.option_strings):
        return f"{text} (set from the environment)" if action in _FROM_ENV else text
    if action.default is None or action.default == [] or action.default is argparse.SUPPRESS:
        return text
    if text is not None and "%(default)" in text:
        return text
    shown = str(action.default).replace("%", "%%")  # argparse %-expands help texts
    return f"{text or ''} (default: {shown})".lstrip()


def freeze_help(action: argparse.Action) -> None:
    """Fix ``action``'s help as it reads now, before its default is replaced (by SUPPRESS)."""
    action.help = help_text(action)
    _FINAL_HELP.add(action)


class _DefaultsHelpFormatter(argparse.HelpFormatter):
    """Shows a flag's default (the environment's value when set) unless there is none to show."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        return help_text(action)


class EnvArgumentParser(argparse.ArgumentParser):
    """An ArgumentParser whose long options take their default from the environment."""

    def __init__(self, *args: Any, environ: Mapping[str, str] | None = None, **kwargs: Any) -> None:
        self._environ = os.environ if environ is None else environ
        # Repeatable flags set from the environment: replaced, not extended, by the command line.
        self._env_lists: list[argparse.Action] = []
        kwargs.setdefault("formatter_class", _DefaultsHelpFormatter)
        super().__init__(*args, **kwargs)

    def add_argument(self, *names: Any, **kwargs: Any) -> argparse.Action:
        action = super().add_argument(*names, **kwargs)
        longs = [n for n in action.option_strings if n.startswith("--")]
        if not longs or action.dest == "help":
            return action
        if action.help is not argparse.SUPPRESS:
            # --help names the variable too: operators find the rule where they look for flags.
            tag = f"[env {env_name(longs[0])}]"
            action.help = f"{action.help} {tag}" if action.help else tag
        raw = self._environ.get(env_name(longs[0]))
        if raw is None:
            return action
        _FROM_ENV.add(action)
        if isinstance(action, argparse._AppendAction):
            action.default = [self._convert(action, v.strip()) for v in raw.split(",") if v.strip()]
            self._env_lists.append(action)
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
                return _BadEnvValue(f"{env_name(action.option_strings[-1])}={raw!r}: {exc}")
        if action.choices is not None and value not in action.choices:
            allowed = ", ".join(map(str, action.choices))
            return _BadEnvValue(f"{env_name(action.option_strings[-1])}={raw!r}: must be one of {allowed}")
        return value

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        ns = argparse.Namespace() if namespace is None else namespace
        # argparse appends command-line values to a copy of the default: start such flags from
        # None instead, and fall back to the environment's list only when none was given.
        unset = [a for a in self._env_lists if not hasattr(ns, a.dest)]
        for action in unset:
            setattr(ns, action.dest, None)
        ns, rest = super().parse_known_args(args, ns)
        for action in unset:
            if getattr(ns, action.dest) is None:
                setattr(ns, action.dest, action.default)
        for value in vars(ns).values():
            bad = (
                next((v for v in value if isinstance(v, _BadEnvValue)), None)
                if isinstance(value, list)
                else value
            )
            if isinstance(bad, _BadEnvValue):
                self.error(bad.message)
        return ns, rest

    def error(self, message: str) -> NoReturn:
        # One line (SPEC §1), not the usage block: the message names the flag and the value.
        print(f"{self.prog}: {message}", file=sys.stderr, flush=True)
        raise SystemExit(2)
