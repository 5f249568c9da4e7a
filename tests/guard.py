"""A guard that fails any test trying to reach a host off this machine (a real provider)."""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

_original_connect = socket.socket.connect
_original_connect_ex = socket.socket.connect_ex


class RealNetworkCallError(AssertionError):
    """A test tried to open a connection off the loopback interface."""


def _check(address: Any) -> None:
    if not isinstance(address, tuple):  # unix sockets
        return
    host = str(address[0])
    if host == "localhost":
        return
    try:
        if ipaddress.ip_address(host).is_loopback:
            return
    except ValueError:
        pass
    raise RealNetworkCallError(
        f"test tried to connect to {host}:{address[1]}; tests talk only to loopback servers "
        "(use tests.fakellm.FakeLLM instead of a real model provider)"
    )


def _connect(self: socket.socket, address: Any) -> None:
    _check(address)
    _original_connect(self, address)


def _connect_ex(self: socket.socket, address: Any) -> int:
    _check(address)
    return _original_connect_ex(self, address)


def install() -> None:
    """Refuse every non-loopback connection from this process."""
    socket.socket.connect = _connect  # type: ignore[method-assign]
    socket.socket.connect_ex = _connect_ex  # type: ignore[method-assign]
