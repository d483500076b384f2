"""``tandem serve``: the options, the safety checks, the socket, uvicorn and Ctrl+C.

Binds before loading (a taken port is one line at once, not after the weights are
read), loads the pair on the engine's own thread, prints the address and a ready
line, then serves until Ctrl+C, which stops the running reply and the queue.
"""

from __future__ import annotations

import argparse
import os
import sys

from app.terminal.arg_types import setting_value, whole
from app.server.listening import bind, is_loopback, url_of, uvicorn_config
from app.terminal.shared import UsageError

API_KEY_VARIABLE = "TANDEM_API_KEY"


def add_parser(subcommands, add_model_arguments, add_sampling_arguments) -> None:
    serve = subcommands.add_parser("serve", help="serve the pair through an OpenAI-compatible HTTP API")
    group = serve.add_argument_group("server")
    group.add_argument("--host", default="127.0.0.1",
                       help="address to listen on (default: %(default)s; any other than loopback needs --api-key)")
    group.add_argument("--port", type=whole(0, 65535), default=8080, metavar="N",
                       help="port (default: %(default)s; 0 picks a free one)")
    group.add_argument("--api-key", metavar="KEY", default=None,
                       help=f"require 'Authorization: Bearer KEY' on every route (default: ${API_KEY_VARIABLE}, or none)")
    group.add_argument("--cors-origin", action="append", default=[], metavar="ORIGIN",
                       help="allow browser pages from ORIGIN (repeatable; default: none)")
    group.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                       help="also answer requests whose Host header is NAME (repeatable; default: only loopback "
                            "names and the address served, against DNS rebinding; '*' turns the check off)")
    group.add_argument("--model-alias", action="append", default=[], metavar="NAME",
                       help="another name GET /v1/models/NAME finds the served model by (repeatable; requests "
                            "on every route are served whatever model they name)")
    group.add_argument("--max-body", type=whole(1024, 1 << 30), default=4 * 1024 * 1024, metavar="BYTES",
                       help="largest request body (default: %(default)s)")
    group.add_argument("--max-tokens-limit", type=setting_value("max_tokens"), default=None, metavar="N",
                       help="largest max_tokens a request may ask for (default: the context size)")
    add_model_arguments(serve)
    add_sampling_arguments(serve)
    # A request without max_tokens may use what the context leaves, as OpenAI's does.
    serve.set_defaults(max_tokens=None)
    for action in serve._actions:  # its help, as this command reads it
        if action.dest == "max_tokens":
            action.help = "most tokens in a reply when a request names none (default: what the context leaves)"


def cmd_serve(args: argparse.Namespace) -> int:
    from app.server.worker import EngineWorker
    from app.terminal.shared import TerminalProgress, load, spec_from, sampling_from

    api_key = args.api_key if args.api_key is not None else os.environ.get(API_KEY_VARIABLE) or None
    if not is_loopback(args.host) and not api_key:
        raise UsageError(f"--host {args.host} is reachable from other machines; give --api-key KEY "
                         f"(or set {API_KEY_VARIABLE}), or keep the default 127.0.0.1")
    sock = bind(args.host, args.port)
    progress = TerminalProgress()
    worker = EngineWorker(lambda: load(args, progress))
    try:
        session = worker.start()
        _serve(args, sock, worker, session, api_key, sampling_from(args), spec_from(args))
    except KeyboardInterrupt:
        pass
    finally:
        worker.stop()
        sock.close()
    print("tandem: server stopped", file=sys.stderr)
    return 0


def _serve(args, sock, worker, session, api_key, sampling, spec) -> None:
    import uvicorn

    from app.server.api import create_app
    from app.server.requests import Defaults

    info = session.info
    n_ctx = session.target.n_ctx
    defaults = Defaults(sampling=sampling, spec=spec, max_tokens=args.max_tokens,
                        max_tokens_limit=args.max_tokens_limit or n_ctx)
    compatibility = session.compatibility
    if spec.enabled and compatibility is not None and not compatibility.ok:
        print(f"tandem: {compatibility.reason}; serving without speculation", file=sys.stderr)
    app = create_app(worker, model_id=info.target_name, defaults=defaults, info=info, api_key=api_key,
                     max_body=args.max_body, cors_origins=args.cors_origin,
                     allowed_hosts=args.allowed_host, model_aliases=args.model_alias)
    url = url_of(sock)
    speculation = (f"speculation on ({info.drafter}, draft-max {spec.draft_max})"
                   if info.speculation_available and spec.enabled else
                   f"speculation off ({info.note or 'as asked'})")

    class Server(uvicorn.Server):
        def handle_exit(self, sig, frame) -> None:
            worker.cancel_all(abandon=True)  # a long reply (or a slow prompt) must not hold the shutdown
            super().handle_exit(sig, frame)

        async def startup(self, sockets=None) -> None:
            await super().startup(sockets)
            if self.started:
                print(f"Tandem API: {url}", flush=True)
                print(f"Ready: {info.target_name}" + (f" + {info.draft_name}" if info.draft_name else "")
                      + f", {speculation}, context {n_ctx}" + (", API key required" if api_key else "")
                      + (f"; memory: {info.memory_plan}" if info.memory_plan else "")
                      + ". Ctrl+C stops.", flush=True)

    Server(uvicorn_config(app)).run(sockets=[sock])
