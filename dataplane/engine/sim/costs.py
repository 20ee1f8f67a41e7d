"""What a simulated forward pass costs: the step-time model of engine-sim. Pure.

A decode step advances every running sequence by one token and takes
``t = a + b·batch + c·kv_tokens``: ``a`` reads the weights once per step, ``b`` is the per-sequence
work (sampling, the batch's activations), ``c`` reads each context token's KV once (attention is
memory bound). A prefill (extend) step takes ``a + p·tokens`` for the uncached prompt tokens it
processes, at most ``chunked_prefill_size`` of them per step (SGLang's chunked prefill).

**Calibration of the defaults** (Llama-3-8B, bf16, one H100, SGLang with CUDA graphs):

- Source: SGLang issue sgl-project/sglang#1008 ("Torch.compile Performance Tracking", 2024-08-09,
  by an SGLang maintainer): ``python3 -m sglang.bench_latency --model meta-llama/Meta-Llama-3-8B
  --batch-size B --input 128 --output 8`` (CUDA graph, TP 1) gives a median decode step of
  **7.37 ms at B = 1** and **11.84 ms at B = 128**. The GPU is an H100: one step at B = 1 streams
  the 16 GB of bf16 weights in 7.37 ms, 2.2 TB/s, more than an A100's 2.0 TB/s peak.
- ``c``: a Llama-3-8B token's KV is 32 layers × 8 KV heads × 128 dims × 2 (K, V) × 2 bytes =
  128 KiB; read at the 2.2 TB/s that run reached, **60 ns per KV token**.
- ``b``: at B = 128 the context is 128 prompt + ~4 generated tokens (the median of 8 steps), so
  the step reads 16 896 KV tokens (1.01 ms); (11.84 − 7.37 − 1.01 + 132·60 ns) / 127 =
  **27 µs per sequence**.
- ``a``: 7.37 ms − 27 µs − 132·60 ns = **7.34 ms**. (Check: 7.34 + 128·0.027 + 16 896·60e-6 =
  11.81 ms at B = 128.)
- ``p``: prefill is compute bound: 2 × 8.0e9 FLOPs per token on 989 dense bf16 TFLOP/s at ~55 %
  utilisation is **30 µs per uncached token** (≈ 33 k tokens/s); chunks of **8192** tokens,
  SGLang's default for 80 GB GPUs (``_handle_gpu_memory_settings``).

All of them are flags (``settings``). ``--decode-tokens-per-s R`` keeps the old meaning: every
sequence decodes R tokens per second whatever the batch (``a = 1/R``, no other cost), and
``R = 0`` is instant (benchmarks of the router).
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_STEP_BASE_MS = 7.34
DEFAULT_STEP_PER_SEQUENCE_US = 27.0
DEFAULT_STEP_PER_KV_TOKEN_NS = 60.0
DEFAULT_PREFILL_PER_TOKEN_US = 30.0
DEFAULT_CHUNKED_PREFILL_SIZE = 8192


@dataclass(frozen=True, slots=True)
class StepCosts:
    """The step-time model (seconds); all zero means instant decoding."""

    base_s: float = DEFAULT_STEP_BASE_MS / 1e3
    per_sequence_s: float = DEFAULT_STEP_PER_SEQUENCE_US / 1e6
    per_kv_token_s: float = DEFAULT_STEP_PER_KV_TOKEN_NS / 1e9
    prefill_per_token_s: float = DEFAULT_PREFILL_PER_TOKEN_US / 1e6
    chunked_prefill_size: int = DEFAULT_CHUNKED_PREFILL_SIZE

    @classmethod
    def fixed_rate(cls, tokens_per_s: float) -> StepCosts:
        """Every sequence decodes ``tokens_per_s`` whatever the batch; 0 is instant."""
        if tokens_per_s <= 0:
            return cls.instant()
        return cls(1.0 / tokens_per_s, 0.0, 0.0, 0.0)

    @classmethod
    def instant(cls) -> StepCosts:
        return cls(0.0, 0.0, 0.0, 0.0)

    @property
    def is_instant(self) -> bool:
        return self.base_s <= 0 and self.per_sequence_s <= 0 and self.per_kv_token_s <= 0

    def decode_s(self, sequences: int, kv_tokens: int) -> float:
        """One decode step of ``sequences`` sequences reading ``kv_tokens`` context tokens."""
        return self.base_s + self.per_sequence_s * sequences + self.per_kv_token_s * kv_tokens

    def prefill_s(self, tokens: int) -> float:
        """One extend step over ``tokens`` uncached prompt tokens."""
        return self.base_s + self.prefill_per_token_s * tokens

    @property
    def tokens_per_s_alone(self) -> float:
        """One sequence's decode speed on an otherwise idle rank (``/server_info``)."""
        step = self.decode_s(1, 0)
        return 0.0 if step <= 0 else 1.0 / step
