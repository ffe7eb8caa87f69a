"""What the console shows, read from the live service in one pass: no I/O, nothing a key could identify.

Numbers come from the same Prometheus registry `/metrics` serves, so the console and a scraper never disagree.
Owners appear as a short prefix of their store tag (a hash of the key), never as the key.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

import msgspec

from hotloop.observability.metrics import Samples
from hotloop.pipeline.service import Service
from hotloop.tools.registry import pair

OWNER_PREFIX = 12  # characters of the owner tag shown: enough to tell keys apart, useless to guess one


def owner_label(owner: str) -> str:
    return owner[:OWNER_PREFIX] if owner else "(no keys)"


def snapshot(service: Service) -> dict[str, Any]:
    readings = service.metrics.samples()  # every worker's, under a supervisor
    return {
        "time": time.time(),
        "uptime_s": round(time.time() - service.started_at, 1),
        "models": [model.id for model in service.models],
        "responses": _responses(readings),
        "in_flight": sum(readings.get("hotloop_responses_in_flight", {}).values()),
        "stages": _stages(readings),
        "caches": _caches(readings),
        "gauges": {name: value for name, value in _gauges(readings).items()},
        "connections": _connections(service),
        "ledger": _ledger(service),
        "mcp": _mcp(service, readings),
        "file_search": _file_search(service, readings),
        "history": _history(service),
    }


def _history(service: Service) -> dict[str, Any]:
    """The last hour's points, oldest first (observability/history.py)."""
    history = service.history
    return {"step_s": history.step_s, "points": [msgspec.structs.asdict(point) for point in history.points]}


def _responses(readings: Samples) -> dict[str, Any]:
    by_status: dict[str, float] = defaultdict(float)
    by_transport: dict[str, float] = defaultdict(float)
    for labels, value in readings.get("hotloop_responses_total", {}).items():
        tags = dict(labels)
        by_status[tags["status"]] += value
        by_transport[tags["transport"]] += value
    return {"total": sum(by_status.values()), "by_status": by_status, "by_transport": by_transport}


def _stages(readings: Samples) -> dict[str, Any]:
    """Per stage: count, sum (seconds) and the cumulative histogram buckets as [upper bound, count]."""
    stages: dict[str, dict[str, Any]] = defaultdict(lambda: {"count": 0, "sum": 0.0, "buckets": []})
    for labels, value in readings.get("hotloop_stage_seconds_bucket", {}).items():
        tags = dict(labels)
        bound = float(tags["le"])
        stages[tags["stage"]]["buckets"].append([bound if bound != float("inf") else None, value])
    for labels, value in readings.get("hotloop_stage_seconds_count", {}).items():
        stages[dict(labels)["stage"]]["count"] = value
    for labels, value in readings.get("hotloop_stage_seconds_sum", {}).items():
        stages[dict(labels)["stage"]]["sum"] = value
    for stage in stages.values():
        stage["buckets"].sort(key=lambda pair: float("inf") if pair[0] is None else pair[0])
    return stages


def _caches(readings: Samples) -> dict[str, Any]:
    caches: dict[str, dict[str, float]] = defaultdict(lambda: {"hit": 0.0, "miss": 0.0})
    for labels, value in readings.get("hotloop_cache_lookups_total", {}).items():
        tags = dict(labels)
        caches[tags["cache"]][tags["result"]] = value
    return {
        name: {**counts, "hit_rate": counts["hit"] / (counts["hit"] + counts["miss"]) if any(counts.values()) else None}
        for name, counts in caches.items()
    }


def _gauges(readings: Samples) -> dict[str, float]:
    """The other readings, one row per label set (`cache_bytes{cache=chain}`), without the histogram and counter
    series shown in their own panels."""
    # The MCP call time is the `mcp_call` stage already; its own histogram's buckets would only crowd this panel.
    shown_elsewhere = (
        *("hotloop_stage_seconds", "hotloop_responses", "hotloop_cache_lookups", "hotloop_mcp_"),
        *("hotloop_file_search_seconds", "hotloop_files_"),  # the file search panel's
        "hotloop_turn_overhead_seconds",  # the time series' API time per turn
    )
    gauges: dict[str, float] = {}
    for name, values in sorted(readings.items()):
        if name.startswith(shown_elsewhere) or name.endswith("_created"):
            continue
        for labels, value in values.items():
            tags = ",".join(f"{key}={tag}" for key, tag in labels)
            gauges[name.removeprefix("hotloop_") + (f"{{{tags}}}" if tags else "")] = value
    return gauges


def _connections(service: Service) -> list[dict[str, Any]]:
    now = time.time()
    rows: list[dict[str, Any]] = []
    for session in list(service.sessions):
        lanes = [
            {
                "lane": lane if lane is not None else "default",
                "response_id": state.response.id,
                "model": state.response.model,
                "items": len(state.context),
                "awaiting": _awaiting(state.response.output),
            }
            for lane, state in session.lanes().items()
        ]
        rows.append({"owner": owner_label(session.owner), "age_s": round(now - session.opened_at, 1), "lanes": lanes})
    rows.sort(key=lambda row: float(row["age_s"]), reverse=True)
    return rows


def _awaiting(output: list[Any]) -> list[str]:
    """The types of the calls a response handed to its client (`function_call`, `shell_call`, `apply_patch_call`,
    …): what the lane waits for. Only the types: a call's command, patch or arguments may hold a user's data."""
    return [str(type(item).__struct_config__.tag) for item in output if (found := pair(item)) and found[0] == "call"]


def _ledger(service: Service) -> list[dict[str, Any]]:
    """Usage per key since this process started, from the ledger's running totals."""
    return [
        {"owner": owner_label(owner), **{field: getattr(totals, field) for field in totals.__struct_fields__}}
        for owner, totals in sorted(service.ledger.totals_by_owner.items())
    ]


def _mcp(service: Service, readings: Samples) -> dict[str, Any]:
    """The latest MCP calls, newest first, and the call and list counts by outcome. Only names, status and timing:
    a call's arguments and output may hold a user's data, so they never reach the console."""
    now = time.time()
    calls = [
        {
            "started_at": record.started_at,
            "server_label": record.server_label,
            "name": record.name,
            "owner": owner_label(record.owner),
            "status": record.status,
            # a call still running shows how long it has run so far
            "seconds": round(record.seconds if record.seconds is not None else now - record.started_at, 4),
            "error": record.error,
        }
        for record in reversed(service.mcp_calls.records)
    ]
    return {
        "calls": calls,
        "calls_by_outcome": _by_outcome(readings, "hotloop_mcp_calls_total"),
        "lists_by_outcome": _by_outcome(readings, "hotloop_mcp_lists_total"),
    }


def _file_search(service: Service, readings: Samples) -> dict[str, Any]:
    """This server's latest ingestions and searches, newest first (ids, sizes and times only: a file's name and text
    may be a user's data), the searches' p50 and p99, and the files ingested by outcome (every worker's)."""
    found = service.file_search
    now = time.time()
    latencies = sorted(found.latencies)
    ingestions = [
        {
            **{field: getattr(record, field) for field in record.__slots__},
            "owner": owner_label(record.owner),
            "seconds": round(record.seconds if record.seconds is not None else now - record.started_at, 4),
        }
        for record in reversed(found.ingestions)
    ]
    searches = [
        {
            "at": record.at,
            "owner": owner_label(record.owner),
            "vector_store_ids": list(record.vector_store_ids),
            "queries": record.queries,
            "results": record.results,
            "seconds": round(record.seconds, 5),
        }
        for record in reversed(found.searches)
    ]
    return {
        "ingesting": sum(readings.get("hotloop_files_ingesting", {}).values()),
        "files_by_outcome": _by_outcome(readings, "hotloop_files_ingested_total"),
        "search_p50_s": latencies[len(latencies) // 2] if latencies else None,
        "search_p99_s": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] if latencies else None,
        "ingestions": ingestions,
        "searches": searches,
    }


def _by_outcome(readings: Samples, name: str) -> dict[str, float]:
    return {dict(labels)["outcome"]: value for labels, value in readings.get(name, {}).items()}
