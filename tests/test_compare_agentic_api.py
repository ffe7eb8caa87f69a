"""scripts/compare_agentic_api.py's pure parts: pairing turns with the engine's records, medians, per-round ratios
and the table. The comparison itself installs agentic-api and is run by hand, never here."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from hotloop.bench.agent_records import TurnRecord
from hotloop.bench.clients import BenchError

pytestmark = pytest.mark.fast  # the fast tier: `make unit-fast`

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "compare_agentic_api.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("compare_agentic_api", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


compare = _load()


def _turn(index: int, turn_ms: float, timings: dict[str, Any] | None = None) -> TurnRecord:
    return TurnRecord(
        turn=index,
        context_tokens=100 * (index + 1),
        output_tokens=30,
        ttft_ms=None,
        turn_ms=turn_ms,
        model_ms=0.0,
        overhead_ms=0.0,
        tool_ms=0.0,
        timings=timings,
    )


def _record(seq: int, ms: float, prompt: int = 100, cached: int = 50) -> dict[str, Any]:
    return {
        "seq": seq,
        "path": "/v1/responses",
        "ms": ms,
        "prompt_tokens": prompt,
        "cached_tokens": cached,
        "output_tokens": 30,
    }


def _sample(gateway: str, run: int, overheads: list[float], e2e_ms: float, cpu: float) -> Any:
    turns = [
        {
            "turn_ms": 100.0 + o,
            "engine_ms": 100.0,
            "overhead_ms": o,
            "prompt_tokens": 100,
            "cached_tokens": 75,
            "gateway_stages_ms": None,
        }
        for o in overheads
    ]
    return compare.Sample(gateway, "ws", run, e2e_ms, cpu, 1.0, turns)


def test_turns_pair_with_the_engine_records_in_order() -> None:
    timings = {"pre_inference": 1.5, "post_inference": 0.25}
    paired = compare.pair_turns([_turn(0, 110.0, timings), _turn(1, 120.0)], [_record(7, 100.0), _record(8, 115.5)])
    assert [row["overhead_ms"] for row in paired] == [10.0, 4.5]
    assert paired[0]["gateway_stages_ms"] == 1.75 and paired[1]["gateway_stages_ms"] is None
    assert paired[1]["gateway_input_tokens"] == 200 and paired[1]["engine_path"] == "/v1/responses"
    with pytest.raises(BenchError, match="cannot pair"):
        compare.pair_turns([_turn(0, 110.0)], [_record(1, 1.0), _record(2, 1.0)])


def test_summary_and_per_round_ratios() -> None:
    samples = [
        _sample("agentic-api", 0, [2.0, 4.0, 6.0], 1000.0, 5.0),
        _sample("hotloop-chat", 0, [3.0, 5.0, 7.0], 1100.0, 10.0),
        _sample("agentic-api", 1, [2.0, 2.0, 2.0], 1000.0, 5.0),
        _sample("hotloop-chat", 1, [4.0, 4.0, 4.0], 1000.0, 5.0),
    ]
    summary = compare.summarize(samples[:2])
    assert summary["overhead_ms"] == 4.5 and summary["turns"] == 6 and summary["cached_ratio"] == 0.75
    assert summary["gateway_stages_ms"] is None and summary["e2e_s"] == 1.05
    ratios = compare.run_ratios(samples, "hotloop-chat", "ws")
    assert ratios == {"overhead": pytest.approx(1.625), "e2e": pytest.approx(1.05), "gateway_cpu": 1.5}
    assert compare.run_ratios(samples, "hotloop-tokens", "ws") is None


def test_table_names_what_is_not_supported() -> None:
    row = {
        "gateway": "agentic-api 0.9.0",
        "mode": "ws",
        "turn_ms": 101.0,
        "engine_ms": 99.0,
        "overhead_ms": 2.0,
        "gateway_stages_ms": None,
        "e2e_s": 4.2,
        "gateway_cpu_ms_per_turn": 3.0,
        "engine_cpu_ms_per_turn": 9.0,
        "cached_ratio": 0.9,
    }
    text = compare.markdown({"summary": {"agentic-api ws": row}, "ratios": {}, "unsupported": {"x http-full": "no"}})
    assert "| agentic-api 0.9.0 | ws | 101.0 | 99.0 | **2.00** | — | 4.200 | 3.00 | 9.00 | 90.0% |" in text
    assert "not supported: x http-full: no" in text


def test_arguments_need_the_reference_gateway() -> None:
    assert compare.parse_args(["--modes", "ws", "--gateways", "agentic-api,hotloop-tokens"]).modes == ["ws"]
    with pytest.raises(SystemExit):
        compare.parse_args(["--gateways", "hotloop-chat"])
    with pytest.raises(SystemExit):
        compare.parse_args(["--modes", "carrier-pigeon"])
