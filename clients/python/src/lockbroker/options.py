"""What a client is built from: its arguments, else the environment; the same for both clients.

| argument | environment | |
|---|---|---|
| ``url`` | ``LOCKBROKER_URL`` | ``http://host:port`` or ``https://...``, a path prefix allowed |
| ``api_key`` | ``LOCKBROKER_API_KEY`` | the tenant's key (or the admin token) |
| ``ca_file`` | ``LOCKBROKER_CA_FILE`` | PEM: the CAs trusted for the broker's certificate (default: the system's) |
| ``client_cert`` | ``LOCKBROKER_CLIENT_CERT`` | PEM: this client's certificate chain, for mutual TLS |
| ``client_key`` | ``LOCKBROKER_CLIENT_KEY`` | PEM: its private key (default: in ``client_cert``) |

The TLS settings apply to ``https`` URLs only (a plain ``http`` broker is
reached without them), and an ``ssl_context`` argument replaces all three.
"""

import dataclasses
import os
import ssl
import urllib.parse
from typing import Optional

from .retry import RetryPolicy


@dataclasses.dataclass(frozen=True)
class Options:
    """A client's settings, checked: where the broker is, how to reach it, how to retry.

    Attributes:
        url: the broker's base URL.
        api_key: the bearer token (None: no ``Authorization`` header).
        timeout: seconds to connect, and to wait for each answer (a waiting
            acquire adds its wait).
        retry: the retry rules (``retry.py``).
        ssl: the TLS context of an ``https`` URL, None for ``http``.
        host, port, prefix: the URL's parts.
    """

    url: str
    api_key: Optional[str]
    timeout: float
    retry: RetryPolicy
    ssl: Optional[ssl.SSLContext]
    host: str
    port: int
    prefix: str

    @classmethod
    def build(
        cls,
        url: Optional[str],
        api_key: Optional[str],
        timeout: float,
        retries: int,
        backoff: float,
        max_backoff: float,
        ca_file: Optional[str] = None,
        client_cert: Optional[str] = None,
        client_key: Optional[str] = None,
        ssl_context: Optional[ssl.SSLContext] = None,
    ) -> "Options":
        """Fills what is not given from the environment (see the module), and checks it.

        Raises:
            ValueError: no URL, not an http(s) URL, a client key without its
                certificate, or a TLS file that cannot be loaded.
        """
        url = url or _env("LOCKBROKER_URL")
        if not url:
            raise ValueError("no broker URL: pass url= or set LOCKBROKER_URL")
        if api_key is None:
            api_key = os.environ.get("LOCKBROKER_API_KEY")
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        https = parts.scheme == "https"
        context = None
        if https:
            context = ssl_context or tls_context(
                ca_file or _env("LOCKBROKER_CA_FILE"),
                client_cert or _env("LOCKBROKER_CLIENT_CERT"),
                client_key or _env("LOCKBROKER_CLIENT_KEY"),
            )
        return cls(
            url=url,
            api_key=api_key,
            timeout=timeout,
            retry=RetryPolicy(retries, backoff, max_backoff),
            ssl=context,
            host=parts.hostname,
            port=parts.port or (443 if https else 80),
            prefix=parts.path.rstrip("/"),
        )

    @property
    def host_header(self) -> str:
        """The ``Host`` header: the host (bracketed if IPv6) and the port."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def tls_context(ca_file: Optional[str], client_cert: Optional[str], client_key: Optional[str]) -> ssl.SSLContext:
    """A context that verifies the broker's certificate and host name against ``ca_file`` (the
    system's CAs without one) and presents ``client_cert`` (with ``client_key``) when given.

    Raises:
        ValueError: ``client_key`` without ``client_cert``, or a file that cannot be loaded.
    """
    if client_key and not client_cert:
        raise ValueError("a client key without its certificate: set client_cert (LOCKBROKER_CLIENT_CERT) too")
    try:
        context = ssl.create_default_context(cafile=ca_file)
        if client_cert:
            context.load_cert_chain(client_cert, client_key)
    except (OSError, ssl.SSLError) as err:  # a missing file, or not PEM
        raise ValueError(f"cannot load the TLS files ({ca_file=}, {client_cert=}, {client_key=}): {err}") from err
    return context


def _env(name: str) -> Optional[str]:
    """An environment variable; empty counts as unset."""
    return os.environ.get(name) or None
