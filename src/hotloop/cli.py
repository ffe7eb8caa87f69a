"""`hotloop serve`: run the server with uvicorn (uvloop, httptools, websockets-sansio); `hotloop bench`;
`hotloop sim-engine` (a stand-in engine, simengine/)."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import msgspec

from hotloop.bench.command import add_bench_parser, run_bench
from hotloop.config import HELP, Settings, load_settings
from hotloop.simengine.cli import add_sim_engine_parser, run_sim_engine
from hotloop.transports.doors import is_loopback

log = logging.getLogger("hotloop.serve")

# A server beyond loopback without keys (issue 36): refused unless `allow_unauthenticated`, then this at every start.
OPEN_WARNING = (
    "listening on %s without api_keys (allow_unauthenticated): anyone who can reach this address can use this "
    "server's models, its compute and the MCP servers it allows"
)


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
    if settings.secret_key_file:
        from hotloop.sealing import read_given

        try:
            read_given(Path(settings.secret_key_file))  # a bad secret stops the start here, not in a worker
        except ValueError as exc:
            print(f"hotloop: {exc}", file=sys.stderr)
            return 2
    if settings.file_search_embeddings_url and not settings.file_search_embeddings_model:
        print("hotloop: file_search_embeddings_url needs file_search_embeddings_model", file=sys.stderr)
        return 2
    exposed = unguarded_host(settings)
    if exposed is not None and not settings.allow_unauthenticated:
        print(refusal(exposed), file=sys.stderr)
        return 2
    if exposed is not None:
        import logging.config

        from hotloop.observability.logs import logging_config

        logging.config.dictConfig(logging_config(settings))  # the server's own format, before it starts
        log.warning(OPEN_WARNING, exposed)
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


def unguarded_host(settings: Settings) -> str | None:
    """The address `hotloop serve` would open to anyone who reaches it, or None: its `host` when that is not a
    loopback address and no `api_keys` are set (the keys of the file, HOTLOOP_API_KEYS and --api-keys all end up
    there; `admin_key` guards only the console's numbers). Loopback is what the Host check calls it
    (transports/doors.py): `localhost`, 127.0.0.0/8 and ::1; 0.0.0.0, ::, a LAN address and any other name are
    beyond it, whatever they resolve to."""
    if settings.api_keys or is_loopback(settings.host.strip("[]")):
        return None
    return settings.host or "every address"


def refusal(host: str) -> str:
    """Why a server beyond loopback without keys does not start, and the three ways out."""
    return (
        f"hotloop: refusing to listen on {host} without API keys: anyone who can reach it could use this server's "
        "models, its compute and the MCP servers it allows.\n"
        '  Set keys: api_keys = ["sk-..."] in the --config file, HOTLOOP_API_KEYS=sk-one,sk-two or '
        "--api-keys sk-one,sk-two (clients then send Authorization: Bearer <key>);\n"
        "  or listen on loopback only: --host 127.0.0.1;\n"
        "  or serve without keys anyway (a trusted network, a proxy in front that authenticates): "
        "allow_unauthenticated = true in the file, HOTLOOP_ALLOW_UNAUTHENTICATED=true or --allow-unauthenticated."
    )
