"""SGLang 0.5.23's own request code as the test oracle: what the real engine samples with.

``reading`` answers, for the raw bytes of a request on one route, the sampling parameters the
engine ends up with (or that it refuses the body); ``routes`` reads the engine's route table
from the wheel. ``wheel`` loads the wheel's modules without torch (its docstring says why the
guards cannot change what is tested). Tests skip when the wheel is missing:
``scripts/test.sh`` installs it.
"""

from __future__ import annotations

from tests.fakes.sglang_engine.reading import (
    DIALECTS,
    FIELDS,
    ROUTES,
    FieldReading,
    Reading,
    Refused,
    Sampling,
    chat,
    completions,
    generate,
    messages,
    ollama,
    ollama_chat,
    ollama_generate,
    responses,
    transcription,
    vertex,
)
from tests.fakes.sglang_engine.routes import NOT_SAMPLING, EngineRoute, engine_routes, sampling_routes
from tests.fakes.sglang_engine.wheel import VERSION, GuardedUse, WheelMissing, installed_version

WHEEL_INSTALLED = installed_version() == VERSION
SKIP_REASON = f"sglang=={VERSION} wheel not installed (scripts/test.sh installs it with --no-deps)"

__all__ = [
    "DIALECTS",
    "FIELDS",
    "NOT_SAMPLING",
    "ROUTES",
    "SKIP_REASON",
    "VERSION",
    "WHEEL_INSTALLED",
    "EngineRoute",
    "FieldReading",
    "GuardedUse",
    "Reading",
    "Refused",
    "Sampling",
    "WheelMissing",
    "chat",
    "completions",
    "engine_routes",
    "generate",
    "messages",
    "ollama",
    "ollama_chat",
    "ollama_generate",
    "responses",
    "sampling_routes",
    "transcription",
    "vertex",
]
