"""Assembles ``innerguard serve`` from vLLM's own pieces: its argument
namespace, engine client, FastAPI app, serving classes and HTTP launcher.
innerguard adds its engine-client wrapper, its middleware and its admin
routes, then serves exactly as ``vllm serve`` does. Every piece of vLLM is
found through ``vllm_compat``: its server moved between the releases
innerguard supports."""
from __future__ import annotations

import asyncio
from argparse import Namespace
from pathlib import Path
from typing import Sequence

from innerguard.engine.compiler import compile_policies
from innerguard.engine.logging import get_logger
from innerguard.engine.vllm_engine import install_plan_async
from innerguard.engine.serve import admin, vllm_compat
from innerguard.engine.serve.client import GuardedEngineClient
from innerguard.engine.serve.guard import ServeOptions, ServerGuard
from innerguard.engine.serve.middleware import GuardMiddleware
from innerguard.engine.serve.reload import Reloader

log = get_logger("innerguard.serve")


async def serve(args: Namespace, *, sources: Sequence[Path], model_dir: Path, options: ServeOptions,
                audit=None, watch_interval: float = 2.0) -> None:
    from transformers import AutoTokenizer

    plan, _ = compile_policies(list(sources), model_dir)  # fail before the engine starts
    listen_address, sock = vllm_compat.setup_server(args)
    async with vllm_compat.build_async_engine_client(args) as engine:
        info = await install_plan_async(engine, plan)
        tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        served = (args.served_model_name or [args.model])[0]
        guard = ServerGuard(engine, plan, tokenizer, options, audit=audit, model_name=served)
        guard.use_install_info(info)
        reloader = Reloader(guard, sources, model_dir, install_plan_async)
        tasks = await engine.get_supported_tasks()
        app = vllm_compat.build_app(args, tasks, engine.model_config)
        await vllm_compat.init_app_state(GuardedEngineClient(engine, guard), app.state, args, tasks)
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
        shutdown = await vllm_compat.serve_http(app, sock=sock, **vllm_compat.uvicorn_kwargs(args))
    try:
        await shutdown
    finally:
        for task in background:
            task.cancel()
        if audit is not None:
            audit.close()
        sock.close()

