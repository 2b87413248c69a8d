"""What a kind is to both clients: its spec, its name, and its calls and plans bound to it.

A kind of the sync client (``kinds.py``: ``client.locks``, ...) and its async twin
(``aio/kinds.py``) are this class with a method per call that sends it, blocking or awaited.
The calls are the kind's :class:`~lockbroker.specs.Spec`'s; what takes more than one call is a
plan (``steps.py``) of ``acquiring.py`` (a guard's acquire), ``listing.py`` (the listing) or
``resuming.py`` (``observe``), bound here to the kind's spec, client and transport.
"""

from typing import Any, Dict, Optional, Type, TypeVar

from . import acquiring, listing
from .models import Model
from .resuming import LeaderWatch
from .specs import Spec, own_deadline
from .steps import Plan
from .wire import Call

#: A kind's grant (what its acquire and renew answer) and status (what its status and listing give).
G = TypeVar("G", bound=Model)
S = TypeVar("S", bound=Model)


class KindBase:
    """The calls every kind shares, without their I/O. ``client.locks`` is one, ``client.semaphores``
    another, ... (the front end gives ``client`` and ``_http``, its transport)."""

    spec: Spec = Spec()
    handle_type: Type[Any] = object
    client: Any
    _http: Any

    @property
    def noun(self) -> str:
        return self.spec.noun

    def __repr__(self) -> str:
        return f"<{self.spec.path} of {self.client!r}>"

    # -- calls -----------------------------------------------------------------

    def _acquisition(
        self,
        key: str,
        owner: str,
        ttl: float,
        wait: float,
        priority: int,
        fields: Dict[str, Any],
        session: Optional[str] = None,
    ) -> Call:
        return self.spec.acquire(key, owner, ttl, wait, priority, fields, self.client.timeout, session)

    def _renewal(self, key: str, ids: Dict[str, Any], ttl: float, read_timeout: float, deadline: float) -> Call:
        """One renewal for a handle's renewer, which does its own retrying (``renewing.py``)."""
        return self.spec.renew(key, ids, ttl, read_timeout=read_timeout, retries=0, deadline=deadline)

    def _own_release(self, key: str, ids: Dict[str, Any]) -> Call:
        """A handle's release, within a deadline of its own (not the caller's)."""
        return self.spec.release(key, ids, deadline=own_deadline(self.client.timeout))

    # -- plans -----------------------------------------------------------------

    def _holding(
        self, key: str, ttl: float, wait: float, owner: Optional[str], priority: int, fields: Dict[str, Any]
    ) -> Plan[Any]:
        """A guard's acquire, giving this kind's handle (``acquiring.hold``)."""
        return acquiring.hold(self._http.exchange, self.spec, key, ttl, wait, owner, priority, fields, self._held)

    def _trying(self, key: str, ttl: float, owner: Optional[str], priority: int, fields: Dict[str, Any]) -> Plan[Any]:
        """A ``try_`` guard: no wait, None when taken by others."""
        return acquiring.trying(self._holding(key, ttl, 0.0, owner, priority, fields))

    def _held(self, grant: Any, ttl: float, confirmed_at: float) -> Any:
        return self.handle_type(self, grant, ttl, confirmed_at)

    def _listing(self, prefix: str, limit: Optional[int], page_size: int) -> Plan[None]:
        return listing.pages(self._http.exchange, self.spec, prefix, limit, page_size)

    def _observing(self, name: str, timeout: Optional[float], idle_timeout: float) -> Plan[None]:
        """An election's leaderships (``resuming.LeaderWatch``), emitted."""
        return LeaderWatch(self._http.exchange, name, timeout, idle_timeout).each()
