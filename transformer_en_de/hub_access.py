"""Whether the Hugging Face Hub can be reached, asked the same way by loading, pushing, training and the data.

huggingface_hub's HTTP client has no timeout: a dropped connection would hang, so a TCP connection is tried first
and fails in seconds (`connect`); `cause` puts an error's message on one line for the plain-words errors.
"""

import socket
import urllib.request
from urllib.parse import urlparse

from huggingface_hub import constants

# Loading a model by id: a quick look first, so that an offline machine falls back to the local cache at once.
HUB_CONNECT_TIMEOUT_S = 3.0


def cause(error: Exception, length: int = 300) -> str:
    """The error's message on one line, cut to `length` characters."""
    line = " ".join(str(error).split())
    return line if len(line) <= length else line[: length - 3] + "..."


def connect(endpoint: str, timeout: float) -> None:
    """Open (and close) a TCP connection to the endpoint, so that a dead network fails in seconds, not never.

    Raises OSError. Behind a proxy a direct connection says nothing: the HTTP client goes through the proxy.
    """
    if urllib.request.getproxies():
        return
    parsed = urlparse(endpoint)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    socket.create_connection((parsed.hostname, port), timeout=timeout).close()


def hub_is_reachable(timeout: float = HUB_CONNECT_TIMEOUT_S) -> bool:
    """False in offline mode (HF_HUB_OFFLINE=1) or when a TCP connection to the Hub fails within `timeout`."""
    if constants.is_offline_mode():
        return False
    try:
        connect(constants.ENDPOINT, timeout)
    except OSError:
        return False
    return True
