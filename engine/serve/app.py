"""Assembles ``innerguard serve`` from vLLM's own pieces: its argument
namespace, engine client, FastAPI app, serving classes and HTTP launcher.
innerguard adds its engine-client wrapper, its middleware and its admin
routes, then serves exactly as ``vllm serve`` does."""
from __future__ import annotations

import asyncio
from argparse import Namespace
from pathlib import Path
from typing import Any, Sequence

from ..compiler import compile_policies
from ..logging import get_logger
from ..vllm_engine import install_plan_async
from . import admin
from .client import GuardedEngineClient
from .guard import ServeOptions, ServerGuard
from .middleware import GuardMiddleware
from .reload import Reloader

log = get_logger("innerguard.serve")


async def serve(args: Namespace, *, sources: Sequence[Path], model_dir: Path, options: ServeOptions,
                audit=None, watch_interval: float = 2.0) -> None:
    from transformers import AutoTokenizer
    from vllm.entrypoints.launchers.api_server.app_state import init_app_state
    from vllm.entrypoints.launchers.api_server.entry import build_async_engine_client
    from vllm.entrypoints.launchers.app import build_app
    from vllm.entrypoints.launchers.launcher import serve_http, setup_server

    plan, _ = compile_policies(list(sources), model_dir)  # fail before the engine starts
    listen_address, sock = setup_server(args, reuse_port=False)
    async with build_async_engine_client(args) as engine:
        info = await install_plan_async(engine, plan)
        tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        served = (args.served_model_name or [args.model])[0]
        guard = ServerGuard(engine, plan, tokenizer, options, audit=audit, model_name=served)
        guard.use_install_info(info)
        reloader = Reloader(guard, sources, model_dir, install_plan_async)
        tasks = await engine.get_supported_tasks()
        app = build_app(args, tasks, engine.model_config)
        await init_app_state(GuardedEngineClient(engine, guard), app.state, args, tasks)
        app.include_router(admin.router(guard, reloader))
        # vLLM's bootstrap has built the middleware stack already; Starlette
        # rebuilds it, ours outermost, on the first request.
        app.middleware_stack = None
        app.add_middleware(GuardMiddleware, guard=guard)
        loop = asyncio.get_running_loop()
        reloader.on_sighup(loop)
        background = [loop.create_task(reloader.watch(watch_interval))] if watch_interval > 0 else []
        log.info("innerguard serve ready", address=listen_address, bundle_hash=plan.bundle_hash,
                 policies=[p.name for p in plan.policies], runner=info.get("runner"),
                 graphs=info.get("graphs"))
        shutdown = await serve_http(app, sock=sock, **_uvicorn_kwargs(args))
    try:
        await shutdown
    finally:
        for task in background:
            task.cancel()
        if audit is not None:
            audit.close()
        sock.close()


def _uvicorn_kwargs(args: Namespace) -> dict[str, Any]:
    """The options ``vllm serve`` hands its HTTP launcher."""
    import vllm.envs as envs
    from vllm.entrypoints.launchers.utils.server_utils import get_uvicorn_log_config

    kwargs = dict(
        enable_ssl_refresh=args.enable_ssl_refresh,
        host=args.host,
        port=args.port,
        log_level=args.uvicorn_log_level,
        access_log=not args.disable_uvicorn_access_log,
        timeout_keep_alive=envs.VLLM_HTTP_TIMEOUT_KEEP_ALIVE,
        ssl_keyfile=args.ssl_keyfile,
        ssl_certfile=args.ssl_certfile,
        ssl_ca_certs=args.ssl_ca_certs,
        ssl_cert_reqs=args.ssl_cert_reqs,
        ssl_ciphers=args.ssl_ciphers,
        h11_max_incomplete_event_size=args.h11_max_incomplete_event_size,
        h11_max_header_count=args.h11_max_header_count,
    )
    log_config = get_uvicorn_log_config(args)
    if log_config is not None:
        kwargs["log_config"] = log_config
    return kwargs
