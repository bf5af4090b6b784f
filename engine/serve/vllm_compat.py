"""The pieces of vLLM's OpenAI server that ``innerguard serve`` assembles,
found wherever the installed vLLM keeps them.

innerguard is tested on vLLM 0.24.0, 0.27.1 and 0.32.0
(``vllm_engine.TESTED_VLLM``), and vLLM moved its server between them: 0.24
(the CUDA build the GPU machines run) keeps it in
``vllm.entrypoints.openai.api_server``, ``vllm.entrypoints.launcher`` and
``vllm.entrypoints.serve.utils``; 0.32 (the CPU build of CI's main lane) in the
``vllm.entrypoints.launchers`` package (the old module is a deprecated shim
there). Every difference the server depends on lives here, and nowhere else:

- where each function lives (``_LOCATIONS``: newest layout first, each name
  looked up on its own, so a release between the two layouts works too);
- ``setup_server``: 0.32 takes ``reuse_port`` and innerguard passes False;
  0.24 always sets ``SO_REUSEPORT``, which would let a second server (an
  unguarded ``vllm serve``, say) bind the same port and silently take a
  share of the requests. On such a release the socket is bound again
  without it (``_exclusive``).

Everything else innerguard relies on has the same shape in both: the
serving classes call ``engine_client.generate(engine_input, params,
request_id, **kwargs)`` with a ``TokensInput`` mapping (``prompt_token_ids``,
optional ``cache_salt``) and keyword arguments that differ by release
(``reasoning_ended`` in 0.24, ``session_id`` in 0.32), which the guarded
client passes through untouched; ``AsyncLLM.collective_rpc`` is a coroutine;
``get_tokenizer`` is synchronous; the uvicorn options ``vllm serve`` passes
are the same.

vLLM is imported only when a function is called: importing vLLM starts its
platform detection, which ``vllm_engine.import_vllm`` prepares first.
"""
from __future__ import annotations

import importlib
import inspect
import socket
from argparse import Namespace
from functools import cache
from typing import Any, Callable

from innerguard.engine.errors import InnerguardError

# name -> the modules that define it, newest vLLM layout first.
_LOCATIONS: dict[str, tuple[str, ...]] = {
    "make_arg_parser": ("vllm.entrypoints.launchers.cli_args", "vllm.entrypoints.openai.cli_args"),
    "validate_parsed_serve_args": ("vllm.entrypoints.launchers.cli_args", "vllm.entrypoints.openai.cli_args"),
    "FlexibleArgumentParser": ("vllm.utils.argparse_utils", "vllm.utils"),
    "build_async_engine_client": ("vllm.entrypoints.launchers.api_server.entry", "vllm.entrypoints.openai.api_server"),
    "build_app": ("vllm.entrypoints.launchers.app", "vllm.entrypoints.openai.api_server"),
    "init_app_state": ("vllm.entrypoints.launchers.api_server.app_state", "vllm.entrypoints.openai.api_server"),
    "setup_server": ("vllm.entrypoints.launchers.launcher", "vllm.entrypoints.openai.api_server"),
    "serve_http": ("vllm.entrypoints.launchers.launcher", "vllm.entrypoints.launcher"),
    "get_uvicorn_log_config": ("vllm.entrypoints.launchers.utils.server_utils", "vllm.entrypoints.serve.utils.server_utils",
                               "vllm.entrypoints.openai.api_server"),
}


@cache
def find(name: str) -> Any:
    """vLLM's ``name``, from the first module in ``_LOCATIONS`` that has it."""
    tried = []
    for module_name in _LOCATIONS[name]:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            # Only the module itself being absent means "another layout";
            # a missing dependency inside it is a broken install: say so.
            if exc.name is None or not module_name.startswith(exc.name):
                raise
            tried.append(module_name)
            continue
        if hasattr(module, name):
            return getattr(module, name)
        tried.append(module_name)
    raise InnerguardError(
        f"vLLM {_version()} has no {name} in {' or '.join(tried)}: innerguard serve does not know this vLLM's server layout",
        hint="install a vLLM that innerguard is tested on (0.24.0, 0.27.1 or 0.32.0)",
    )


def _version() -> str:
    try:
        import vllm

        return str(vllm.__version__)
    except Exception:  # only for the message above
        return "?"


# -- the parser ----------------------------------------------------------------
def flexible_argument_parser(**kwargs) -> Any:
    return find("FlexibleArgumentParser")(**kwargs)


def make_arg_parser(parser) -> Any:
    return find("make_arg_parser")(parser)


def validate_parsed_serve_args(args: Namespace) -> None:
    find("validate_parsed_serve_args")(args)


# -- the server ----------------------------------------------------------------
def build_async_engine_client(args: Namespace):
    """An async context manager that yields vLLM's engine client (``AsyncLLM``)."""
    return find("build_async_engine_client")(args)


def build_app(args: Namespace, tasks, model_config):
    return find("build_app")(args, tasks, model_config)


async def init_app_state(engine_client, state, args: Namespace, tasks) -> None:
    await find("init_app_state")(engine_client, state, args, tasks)


async def serve_http(app, *, sock: socket.socket, **uvicorn_kwargs):
    """Starts uvicorn; returns the task to await for its shutdown."""
    return await find("serve_http")(app, sock=sock, **uvicorn_kwargs)


def setup_server(args: Namespace) -> tuple[str, socket.socket]:
    """vLLM's argument checks and the bound listening socket, which no
    other process may share (see the module's docstring)."""
    setup: Callable = find("setup_server")
    if "reuse_port" in inspect.signature(setup).parameters:
        return setup(args, reuse_port=False)
    listen_address, sock = setup(args)
    return listen_address, _exclusive(sock)


def _exclusive(sock: socket.socket) -> socket.socket:
    """The same address, bound again without ``SO_REUSEPORT``. Should another
    process have taken the port in between, binding fails: the server then
    refuses to start rather than share it."""
    if sock.family not in (socket.AF_INET, socket.AF_INET6):
        return sock  # a Unix socket: no port to share
    if not sock.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT):
        return sock
    address, family = sock.getsockname(), sock.family
    sock.close()
    fresh = socket.socket(family=family, type=socket.SOCK_STREAM)
    try:
        fresh.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        fresh.bind(address)
    except OSError:
        fresh.close()
        raise
    return fresh


def uvicorn_kwargs(args: Namespace) -> dict[str, Any]:
    """The options ``vllm serve`` hands its HTTP launcher (the same in 0.24 and 0.32)."""
    import vllm.envs as envs

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
    log_config = find("get_uvicorn_log_config")(args)
    if log_config is not None:
        kwargs["log_config"] = log_config
    return kwargs
