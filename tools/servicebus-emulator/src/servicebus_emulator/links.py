"""Link routing: senders into entities, receivers out of them, and request/response nodes.

Every message a receiver gets is tagged with its lock token (``uuid.bytes_le``), which is
how the SDK names a lock; the client's disposition on that delivery settles the message
and the broker echoes the outcome, settled, as the SDK waits for it.
"""

from __future__ import annotations

import logging
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import cproton  # type: ignore[import-untyped]
from proton import Disposition, Link, Message

from .amqp_server import AmqpConnection
from .broker import BrokerError, Namespace
from .codec import parse_message, split_batch
from .consumers import Consumer, ConsumerRegistry
from .replies import error_condition, refuse, status_reply
from .sections import MessageFormatError

LOG = logging.getLogger("servicebus_emulator.links")
CREDIT_WINDOW = 1000
RECENT_TAGS = 64  # per sender link: how far back a re-sent delivery is recognised
NodeHandler = Callable[[AmqpConnection, str, Message], Message]


@dataclass
class NodeLink:
    """Both links of a request/response node ($cbs or an entity's $management)."""

    address: str


@dataclass
class LinkRouter:
    """Routes link events of every connection to the broker."""

    namespace: Namespace
    cbs: NodeHandler
    management: NodeHandler
    requires_auth: bool
    connections: set[AmqpConnection] = field(default_factory=set)
    stopping: bool = False  # set on shutdown: sockets the broker closes are not drops
    consumers: ConsumerRegistry = field(init=False)

    def __post_init__(self) -> None:
        self.consumers = ConsumerRegistry(self.namespace)
        self.namespace.on_available = self.consumers.pump

    # --- attach --------------------------------------------------------------------------
    def link_opened(self, conn: AmqpConnection, link: Link) -> None:
        remote = link.remote_target if link.is_receiver else link.remote_source
        address = remote.address or ""
        link.source.copy(link.remote_source)
        link.target.copy(link.remote_target)
        link.snd_settle_mode = link.remote_snd_settle_mode
        link.rcv_settle_mode = link.remote_rcv_settle_mode
        node = Namespace.normalize(address)
        try:
            if self.requires_auth and node != "$cbs" and not conn.authorized:
                raise BrokerError(
                    "amqp:unauthorized-access", "Put a valid token on $cbs before attaching."
                )
            if node == "$cbs" or node.endswith("$management"):
                link.node = NodeLink(node)
                link.open()
                if link.is_receiver:
                    link.flow(CREDIT_WINDOW)
                return
            if link.is_receiver:
                self._open_entity_sender(link, address)
            else:
                self.consumers.attach(conn, link, address)
        except BrokerError as error:
            refuse(link, error.condition, error.description)
        except Exception as error:
            LOG.exception("attach of %s failed", address)
            refuse(link, "amqp:internal-error", str(error))

    def _open_entity_sender(self, link: Link, address: str) -> None:
        """Senders always attach; a refusal is answered on each transfer instead.

        The SDK treats a sender as ready as soon as the attach arrives, so an error on the
        detach that follows is reported as an unknown error; a rejected transfer carries
        the real condition (e.g. ``amqp:not-found``) to the caller.
        """
        link.target_entity = address
        try:
            target = self.namespace.sendable(address)
        except BrokerError as error:
            link.refusal = error
            link.open()
            link.flow(CREDIT_WINDOW)
            LOG.info("sender to unknown entity %s: transfers will be refused", address)
            return
        link.max_message_size = target.send_settings.max_message_size
        link.open()
        link.flow(CREDIT_WINDOW)
        LOG.info("sender attached to %s", target.name)

    def link_flow(self, link: Link) -> None:
        consumer: Consumer | None = getattr(link, "consumer", None)
        if consumer is not None:
            self.consumers.serve(consumer)

    def settled_by_client(self, link: Link, delivery: Any) -> None:
        """A disposition on a message the broker sent (it may arrive after the link closed)."""
        if getattr(delivery, "store", None) is not None and (delivery.updated or delivery.settled):
            self.consumers.settle(delivery)

    def link_closed(self, link: Link) -> None:
        consumer: Consumer | None = getattr(link, "consumer", None)
        if consumer is not None:
            self.consumers.detach(consumer)

    def connection_closed(self, conn: AmqpConnection) -> None:
        self.consumers.connection_closed(conn)

    # --- incoming messages ---------------------------------------------------------------------
    def incoming(self, conn: AmqpConnection, link: Link, delivery: Any) -> None:
        if not delivery.readable or delivery.partial:
            return
        data = link.recv(delivery.pending)
        link.advance()
        node: NodeLink | None = getattr(link, "node", None)
        if node is not None:
            self._request(conn, node, delivery, data)
        else:
            self._accept_send(link, delivery, data)
        if link.credit < CREDIT_WINDOW // 2:
            link.flow(CREDIT_WINDOW - link.credit)

    def _accept_send(self, link: Link, delivery: Any, data: bytes) -> None:
        try:
            refusal: BrokerError | None = getattr(link, "refusal", None)
            if refusal is not None:
                raise refusal
            tag = raw_tag(delivery)
            if is_resent(link, delivery, tag):
                LOG.debug("delivery re-sent on %s: accepted once", link.target_entity)
                delivery.update(Disposition.ACCEPTED)
                delivery.settle()
                return
            inner = split_batch(data)
            messages = [parse_message(raw) for raw in inner] if inner else [parse_message(data)]
            self.namespace.send(link.target_entity, messages)
            remember_accepted(link, delivery, tag)
            delivery.update(Disposition.ACCEPTED)
        except (BrokerError, MessageFormatError) as error:
            condition = getattr(error, "condition", "amqp:decode-error")
            delivery.local.condition = error_condition(condition, str(error))
            delivery.update(Disposition.REJECTED)
            LOG.info("send to %s refused: %s", link.target_entity, error)
        except Exception as error:
            LOG.exception("send to %s failed", link.target_entity)
            delivery.local.condition = error_condition("amqp:internal-error", str(error))
            delivery.update(Disposition.REJECTED)
        delivery.settle()

    def _request(self, conn: AmqpConnection, node: NodeLink, delivery: Any, data: bytes) -> None:
        request = Message()
        request.decode(data)
        handler = self.cbs if node.address == "$cbs" else self.management
        try:
            reply = handler(conn, node.address, request)
        except Exception as error:
            LOG.exception("request to %s failed", node.address)
            reply = status_reply(500, str(error), "amqp:internal-error")
        reply.correlation_id = request.id
        self._send_reply(conn, node.address, request.reply_to, reply)
        delivery.update(Disposition.ACCEPTED)
        delivery.settle()

    @staticmethod
    def _send_reply(
        conn: AmqpConnection, address: str, reply_to: str | None, reply: Message
    ) -> None:
        candidates: list[Any] = []
        link = conn.connection.link_head(0)
        while link is not None:
            node = getattr(link, "node", None)
            if link.is_sender and node is not None and node.address == address:
                candidates.append(link)
            link = link.next(0)
        exact = [c for c in candidates if reply_to and c.remote_target.address == reply_to]
        chosen = (exact or candidates or [None])[-1]
        if chosen is None:
            LOG.warning("no reply link for %s on this connection", address)
            return
        if reply_to:
            reply.address = reply_to
        tag: Any = uuid.uuid4().bytes
        out = chosen.delivery(tag)
        chosen.send(reply.encode())
        chosen.advance()
        out.settle()


def raw_tag(delivery: Any) -> bytes:
    """The delivery tag as bytes (proton's ``Delivery.tag`` UTF-8-decodes it)."""
    tag = cproton.lib.pn_delivery_tag(delivery._impl)
    return bytes(cproton.ffi.buffer(tag.start, tag.size)) if tag.size else b""


def _recent_tags(link: Link) -> deque[bytes]:
    recent: deque[bytes] | None = getattr(link, "recent_tags", None)
    if recent is None:
        recent = deque(maxlen=RECENT_TAGS)
        link.recent_tags = recent
    return recent


def is_resent(link: Link, delivery: Any, tag: bytes) -> bool:
    """True if an unsettled transfer repeats the tag of a delivery this link just accepted.

    Tags are unique among a link's unsettled deliveries. Several tasks sending on one
    async SDK sender can each transmit the same pending delivery (same tag, fresh or
    reused delivery-id); it is one message, so it is stored once.
    """
    return bool(tag) and not delivery.settled and tag in _recent_tags(link)


def remember_accepted(link: Link, delivery: Any, tag: bytes) -> None:
    if tag and not delivery.settled:
        _recent_tags(link).append(tag)


__all__ = ["LinkRouter"]
