"""Per-client rejection stats (``--api-keys``) through the control plane: ``fleetplane stats`` by client."""

from __future__ import annotations

import json
from pathlib import Path

import openai
import pytest

from tests.fakes.control_plane import ControlPlaneProcess
from tests.fakes.engine_sim import EngineSim
from tests.fakes.fleet import MODEL, fleetplane, wait_for
from tests.fakes.router import RouterProcess

KEYS = {"ci": {"key": "sk-ci-0123456789abcdef"}, "web": {"key": "sk-web-0123456789abcdef"}}


def test_stats_answer_who_sends_what_the_contract_refuses(tmp_path: Path) -> None:
    """Rejections of each client reach GetRejectionStats ``by_client`` and the ``stats`` table, and
    survive a router kill -9 and restart (the counts journal carries them)."""
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps(KEYS))
    with (
        ControlPlaneProcess(store_path=tmp_path / "control.db") as control,
        EngineSim("--model", MODEL) as engine,
    ):
        fleetplane(control.target, "workers", "add", engine.url)
        fleetplane(control.target, "contract", "set", "--scope", "*", '{"temperature": 0.2}')
        flags = ("--control-plane", control.target, "--router-id", "edge", "--api-keys", str(keys))
        journal = tmp_path / "journal"
        journal.mkdir(mode=0o700)
        with RouterProcess(*flags, journal_dir=journal) as router:

            def refuse(key: str, n: int) -> None:
                client = openai.OpenAI(base_url=router.url + "/v1", api_key=key, max_retries=0, timeout=10)
                for _ in range(n):
                    with pytest.raises(openai.BadRequestError):
                        client.chat.completions.create(
                            model=MODEL, messages=[{"role": "user", "content": "hi"}], temperature=0.9
                        )

            wait_for(lambda: router_ready(router.url), 20)
            refuse(KEYS["ci"]["key"], 2)
            refuse(KEYS["web"]["key"], 1)
            router.kill()  # no last report: the journal must carry the counts
        with RouterProcess(*flags, journal_dir=journal) as router:

            def by_client() -> dict[str, int]:
                stats = json.loads(fleetplane(control.target, "stats", "--output", "json").stdout)
                return {kc["key"]: int(kc["count"]) for kc in stats.get("byClient", [])}

            wait_for(lambda: by_client() == {"ci": 2, "web": 1}, 20)
            text = fleetplane(control.target, "stats").stdout
            rows = [line.split() for line in text.splitlines()]
            assert ["CLIENT", "SCOPE", "FIELD", "REJECTIONS"] in rows
            assert ["ci", "*", "temperature", "2"] in rows and ["web", "*", "temperature", "1"] in rows


def router_ready(url: str) -> bool:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url + "/readiness", timeout=2) as answer:
            return bool(answer.status == 200)
    except (urllib.error.URLError, OSError):
        return False
