"""Knowing at once whether the Hugging Face hub can be reached, before timm asks it for weights.

Without a network, huggingface_hub retries every request with back-off (1, 2, 4, 8, 8 s) for each
file it tries (timm asks for ``model.safetensors``, then ``pytorch_model.bin``): a ``timm:`` name
that is not in the cache failed after about a minute. `offline_or_reachable` opens one connection to
the hub's host (or the proxy that would carry the request), with a short timeout; when that fails, it
switches huggingface_hub to offline mode for this process (``HF_HUB_OFFLINE``, which huggingface_hub
reads at each request), so that the cache is still read and a miss fails at once, with the reason.
"""

from __future__ import annotations

import os
import socket
import urllib.request
from urllib.parse import urlparse

PROBE_TIMEOUT_S = 3.0
_reason: str | None = None  # why this process switched huggingface_hub to offline mode


def _address(url: str) -> tuple[str, int]:
    """The host and port a request to `url` first connects to: the proxy's, where one applies."""
    parsed = urlparse(url)
    host = parsed.hostname or ""
    proxy = urllib.request.getproxies().get(parsed.scheme)
    if proxy and not urllib.request.proxy_bypass(host):
        proxied = urlparse(proxy if "://" in proxy else f"http://{proxy}")
        return proxied.hostname or "", proxied.port or (443 if proxied.scheme == "https" else 80)
    return host, parsed.port or (443 if parsed.scheme == "https" else 80)


def offline_or_reachable(timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """None when huggingface_hub may go on as it is: offline mode is set (it reads only its cache) or
    the hub answers. Otherwise the reason it cannot be reached (``no network (cannot reach
    huggingface.co:443: ...)``), after setting offline mode for this process."""
    global _reason
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return _reason  # set by the user (None), or by an earlier probe of this process
    _reason = None
    host, port = _address(constants.ENDPOINT)
    try:
        socket.create_connection((host, port), timeout=timeout).close()
        return None
    except OSError as error:  # no DNS (immediate), connection refused, unreachable, timed out
        detail = error.strerror or type(error).__name__
        _reason = f"no network (cannot reach {host}:{port}: {detail})"
    constants.HF_HUB_OFFLINE = True
    os.environ["HF_HUB_OFFLINE"] = "1"  # for DataLoader workers and anything that reads the variable
    return _reason
