"""`hotloop serve`: run the server with uvicorn (uvloop, httptools, websockets-sansio); `hotloop bench`;
`hotloop sim-engine` (a stand-in engine, simengine/)."""

from __future__ import annotations

import argparse
import sys

import msgspec

from hotloop.bench.command import add_bench_parser, run_bench
from hotloop.config import HELP, Settings, load_settings
from hotloop.simengine.cli import add_sim_engine_parser, run_sim_engine


def _serve_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = sub.add_parser(
        "serve",
        help="run the server",
        description="Serve the Responses API over HTTP, SSE and WebSocket mode. Every option can also be set in "
        "the TOML file given by --config (same names) or as HOTLOOP_<NAME> in the environment; flags win, then "
        "the environment, then the file.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    serve.add_argument("--config", help="TOML settings file")
    defaults = Settings()
    for name in Settings.__struct_fields__:
        flag = "--" + name.replace("_", "-")
        default = getattr(defaults, name)
        kind = Settings.__annotations__[name]
        if kind == "bool":
            serve.add_argument(flag, dest=name, action=argparse.BooleanOptionalAction, default=None, help=HELP[name])
        else:
            shown = ",".join(default) if isinstance(default, list) else default
            serve.add_argument(flag, dest=name, default=None, metavar=name.upper(), help=f"{HELP[name]} [{shown}]")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hotloop", description="An open server for agent loops.")
    sub = parser.add_subparsers(dest="command", required=True)
    _serve_parser(sub)
    add_bench_parser(sub)
    add_sim_engine_parser(sub)
    args = parser.parse_args(argv)
    if args.command == "sim-engine":
        return run_sim_engine(args)
    if args.command == "bench":
        return run_bench(args)
    if args.command == "serve":
        overrides = {name: getattr(args, name) for name in Settings.__struct_fields__}
        try:
            settings = load_settings(args.config, overrides)
        except (ValueError, OSError) as exc:
            print(f"hotloop: {exc}", file=sys.stderr)
            return 2
        return serve(settings)
    return 0


def serve(settings: Settings) -> int:
    """Serve in this process (`workers` 1), or under a supervisor that runs one process per worker (by default one
    per core, so that every core works: docs/operations.md)."""
    if settings.workers < 0:
        print("hotloop: workers must be 0 (one per core) or more", file=sys.stderr)
        return 2
    settings = msgspec.structs.replace(settings, workers=settings.resolved_workers())
    if settings.workers > 1:
        from hotloop.transports.workers import run_workers

        try:
            return run_workers(settings)
        except OSError as exc:  # the port is taken, the data directory is not writable
            print(f"hotloop: {exc}", file=sys.stderr)
            return 1
    from hotloop.transports.server import Server, server_config

    Server(server_config(settings), own_process=True).run()  # graceful shutdown on SIGTERM included
    return 0
