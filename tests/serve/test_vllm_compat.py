"""The server's pieces of vLLM, found through ``vllm_compat`` on the vLLM
installed here. The older layout (vLLM 0.24, the GPU build) is checked on a
GPU machine by scripts/gpu_serve_check.py."""
from __future__ import annotations

import socket

import pytest

from innerguard.engine.serve import vllm_compat


@pytest.mark.parametrize("name", sorted(vllm_compat._LOCATIONS))
def test_every_server_piece_is_found_in_the_installed_vllm(name):
    assert callable(vllm_compat.find(name))


def _bind_shared(port: int) -> socket.socket:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.bind(("127.0.0.1", port))
    return s


def test_a_port_sharing_socket_is_bound_again_so_no_other_server_can_join_it():
    # vLLM 0.24's setup_server returns such a socket; an unguarded server
    # started later on the same port would otherwise take part of the traffic.
    ours = vllm_compat._exclusive(_bind_shared(0))
    try:
        ours.listen()
        port = ours.getsockname()[1]
        with pytest.raises(OSError):
            _bind_shared(port).close()
    finally:
        ours.close()


def test_the_servers_socket_is_not_shared_with_a_second_server():
    from innerguard.engine.commands.serve import build_parser

    args = build_parser().parse_args(["smollm2-135m-instruct", "--policies", "policies", "--host", "127.0.0.1", "--port", "0"])
    args.model = args.model_tag
    _, ours = vllm_compat.setup_server(args)
    try:
        ours.listen()
        with pytest.raises(OSError):
            _bind_shared(ours.getsockname()[1]).close()
    finally:
        ours.close()
