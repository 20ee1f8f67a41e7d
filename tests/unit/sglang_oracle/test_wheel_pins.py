"""Lines of the 0.5.23 wheel the oracle restates (where their module cannot be imported) still read so."""

from __future__ import annotations

import ast

import pytest

from tests.fakes import sglang_engine as engine
from tests.fakes.sglang_engine import wheel

pytestmark = pytest.mark.skipif(not engine.WHEEL_INSTALLED, reason=engine.SKIP_REASON)


def _statements(relative: str, function: str) -> list[str]:
    return [
        ast.unparse(n) for n in ast.walk(wheel.function_def(relative, function)) if isinstance(n, ast.stmt)
    ]


def test_tokenizer_manager_merges_preferred_params_under_the_body() -> None:
    """_create_tokenized_object: {**preferred, **obj.sampling_params}, else dict(obj.sampling_params)."""
    text = "\n".join(_statements("srt/managers/tokenizer_manager.py", "_create_tokenized_object"))
    assert "sampling_kwargs = {**self.preferred_sampling_params, **obj.sampling_params}" in text
    assert "sampling_kwargs = dict(obj.sampling_params)" in text
    assert "sampling_params = self.sampling_params_class(**sampling_kwargs)" in text
    assert "sampling_params.verify(self.model_config.vocab_size)" in text


def test_generate_req_input_normalizes_single_and_batch_params_as_restated() -> None:
    """_normalize_single_inputs defaults a None dict to {}; _normalize_batch_inputs multiplies by n."""
    single = "\n".join(_statements("srt/managers/io_struct.py", "_normalize_single_inputs"))
    assert "if self.sampling_params is None:\n    self.sampling_params = {}" in single
    batch = "\n".join(_statements("srt/managers/io_struct.py", "_normalize_batch_inputs"))
    assert "num = self.batch_size * self.parallel_sample_num" in batch


def test_ollama_generate_answers_blank_prompts_unsampled() -> None:
    """handle_generate returns an empty answer for a blank prompt (the oracle's []), system prepended first."""
    text = "\n".join(_statements("srt/entrypoints/ollama/serving.py", "handle_generate"))
    assert "prompt = f'{request.system}\\n\\n{prompt}'" in text
    assert "if not prompt or not prompt.strip():" in text


def test_the_engine_parses_bodies_with_orjson() -> None:
    """http_server.ORJSONRequest.json is orjson.loads, and the app's route class is ORJSONRoute."""
    source = wheel.source("srt/entrypoints/http_server.py")
    assert "self._json = orjson.loads(await self.body())" in source
    assert "app.router.route_class = ORJSONRoute" in source
