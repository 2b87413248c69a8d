"""What a client is to both front ends: built from its arguments (``options.py``), a transport
and its four kinds; and its multi-lock calls and plans, without their I/O.

:class:`~lockbroker.Client` and :class:`~lockbroker.AsyncClient` are this class with their
own transport and kinds (``_transport_type``, ``_kind_types``) and a method per call that
sends it, blocking or awaited.
"""

import ssl
from typing import Any, Dict, List, Optional, Tuple, Type

from . import acquiring, sessionbase, specs
from .options import Options
from .specs import own_deadline
from .steps import Plan
from .wire import Call


class ClientBase:
    """A connection to one broker as one tenant (the front ends document the arguments)."""

    #: The front end's transport class, made from the :class:`~lockbroker.options.Options`.
    _transport_type: Type[Any]
    #: The front end's kinds: locks, semaphores, rwlocks, elections.
    _kind_types: Tuple[Type[Any], Type[Any], Type[Any], Type[Any]]
    #: The front end's multi-lock handle.
    _multi_lease_type: Type[Any]
    #: The front end's session kept alive, and its plain session calls (``client.sessions``).
    _session_type: Type[Any]
    _sessions_type: Type[Any]

    def __init__(
        self,
        url: Optional[str] = None,
        api_key: Optional[str] = None,
        timeout: float = 10.0,
        *,
        retries: int = 4,
        backoff: float = 0.1,
        max_backoff: float = 2.0,
        ca_file: Optional[str] = None,
        client_cert: Optional[str] = None,
        client_key: Optional[str] = None,
        ssl_context: Optional[ssl.SSLContext] = None,
    ) -> None:
        options = Options.build(
            url, api_key, timeout, retries, backoff, max_backoff, ca_file, client_cert, client_key, ssl_context
        )
        self.timeout = timeout
        self.backoff = backoff
        self._http = self._transport_type(options)
        locks, semaphores, rwlocks, elections = self._kind_types
        self.locks = locks(self, self._http)
        self.semaphores = semaphores(self, self._http)
        self.rwlocks = rwlocks(self, self._http)
        self.elections = elections(self, self._http)
        self.sessions = self._sessions_type(self, self._http)

    @property
    def url(self) -> str:
        return self._http.exchange.url

    # -- sessions ------------------------------------------------------------------

    def _opening(self, ttl: float, name: Optional[str], lock_delay: Optional[float]) -> Plan[Any]:
        """A session's open, giving the front end's session, kept alive (``sessionbase.opening``)."""
        return sessionbase.opening(
            self._http.exchange, ttl, name, lock_delay, lambda info, sent: self._session_type(self, info, sent)
        )

    # -- multi-locks ---------------------------------------------------------------

    def _multilocking(self, keys: List[str], ttl: float, wait: float, owner: Optional[str]) -> Plan[Any]:
        """A multi-lock guard's acquire, giving the front end's handle (``acquiring.hold_multi``)."""
        return acquiring.hold_multi(self._http.exchange, keys, ttl, wait, owner, self._multi_lease)

    def _multi_lease(self, grant: Any, ttl: float, confirmed_at: float) -> Any:
        return self._multi_lease_type(self, grant, ttl, confirmed_at)

    def _multi_renewal(
        self, owner: str, locks: List[Dict[str, Any]], ttl: float, read_timeout: float, deadline: float
    ) -> Call:
        """One multi-lock renewal, for a multi-lease's renewer (no retries: it does its own)."""
        return specs.renew_multi(owner, locks, ttl, read_timeout=read_timeout, retries=0, deadline=deadline)

    def _own_multi_release(self, owner: str, locks: List[Dict[str, Any]]) -> Call:
        """A multi-lease's release, within a deadline of its own."""
        return specs.release_multi(owner, locks, deadline=own_deadline(self.timeout))
