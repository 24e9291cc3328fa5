"""OTLP/HTTP span export with a lean protobuf encoder (the ``moot`` CLI's exporter; needs ``moot[otel]``).

The OpenTelemetry exporter builds one protobuf object per span, attribute and value, then
serializes them: ~45 us of CPU per span with the C protobuf backend, more than the SDK spends
making the span. :func:`encode_spans` writes the same ``ExportTraceServiceRequest`` bytes
directly (protobuf's wire format, the OTLP ``trace.proto`` field numbers), with each attribute's
key, and each repeated key/value pair, encoded once and reused: ~5 us a span. The tests parse
its output with the official message classes and compare it with the official encoder's.

:class:`SpanExporter` is the OTLP/HTTP exporter with that encoder: the same endpoint, headers,
compression, timeout and retries (all read from the ``OTEL_EXPORTER_OTLP_*`` variables by the
exporter itself), only the encoding differs. On an exporter version whose internals it does not
know, it exports through the exporter's own path. Importing this module does not load the
protobuf runtime: only that path needs it (see :func:`_import_exporter`).
"""

from __future__ import annotations

import importlib
import os
import struct
import sys
import types
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.trace import SpanKind

_ENCODER = "opentelemetry.exporter.otlp.proto.common.trace_encoder"


def _official_encode(spans: Sequence[ReadableSpan]) -> Any:
    """The exporter's own encoder, imported the first time its path is taken (a fallback below)."""
    module = importlib.import_module(_ENCODER)
    exporter_module = sys.modules.get("opentelemetry.exporter.otlp.proto.http.trace_exporter")
    if exporter_module is not None and getattr(exporter_module, "encode_spans", None) is _official_encode:
        exporter_module.encode_spans = module.encode_spans  # type: ignore[attr-defined]  # directly from now on
    return module.encode_spans(spans)


def _import_exporter() -> Any:
    """OpenTelemetry's OTLP/HTTP span exporter class, without loading its protobuf encoder yet.

    The exporter's module imports ``encode_spans`` from the protobuf-based encoder, which loads
    the protobuf runtime and the OTLP message classes (~26 ms of CPU at every start of the
    ``moot`` command); this exporter encodes with :func:`encode_spans` and needs them only on the
    exporter's own path. While the exporter's module is imported, the encoder's name stands for a
    module holding only :func:`_official_encode`, which imports the real one when first called;
    the name is given back right after, so any later import gets the real encoder. An exporter
    version that imports anything else from it is imported the ordinary way.
    """
    name = "opentelemetry.exporter.otlp.proto.http.trace_exporter"
    if name not in sys.modules and _ENCODER not in sys.modules:
        stand_in = types.ModuleType(_ENCODER, "moot: the OTLP encoder, imported when first used")
        stand_in.encode_spans = _official_encode  # type: ignore[attr-defined]
        sys.modules[_ENCODER] = stand_in
        try:
            return importlib.import_module(name).OTLPSpanExporter
        except ImportError:
            sys.modules.pop(name, None)
        finally:
            if sys.modules.get(_ENCODER) is stand_in:
                del sys.modules[_ENCODER]
    return importlib.import_module(name).OTLPSpanExporter


if TYPE_CHECKING:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
else:
    OTLPSpanExporter = _import_exporter()

__all__ = ["SpanExporter", "encode_spans"]

_Q = struct.Struct("<Q").pack
_D = struct.Struct("<d").pack
_FLAGS_LOCAL = b"\x85\x01" + struct.pack("<I", 0x100)  # field 16 (fixed32): has-is-remote
_FLAGS_REMOTE = b"\x85\x01" + struct.pack("<I", 0x300)  # ... and is-remote
_STATUS_UNSET = b"\x7a\x00"  # field 15: an empty Status (the official encoder always sets it)


def _varint(n: int) -> bytes:
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field: its tag, the payload's length, the payload."""
    n = len(payload)
    return tag + (bytes((n,)) if n < 0x80 else _varint(n)) + payload


def _value(value: Any) -> bytes:
    """An ``AnyValue`` message's bytes (as the official encoder maps Python values)."""
    if value is None:
        return b""
    if value is True or value is False:
        return b"\x10\x01" if value else b"\x10\x00"
    if isinstance(value, str):
        return _field(b"\x0a", value.encode("utf-8", "surrogatepass"))
    if isinstance(value, int):
        if not -(2**63) <= value < 2**63:
            raise TypeError("an integer attribute beyond int64")  # the exporter's own path drops it
        return b"\x18" + _varint(value & 0xFFFFFFFFFFFFFFFF)
    if isinstance(value, float):
        return b"\x21" + _D(value)
    if isinstance(value, bytes):
        return _field(b"\x3a", value)
    if isinstance(value, tuple | list | Sequence):
        return _field(b"\x2a", b"".join(_field(b"\x0a", _value(v)) for v in value))
    if isinstance(value, Mapping):
        return _field(b"\x32", b"".join(_field(b"\x0a", _key_value(str(k), v)) for k, v in value.items()))
    raise TypeError(f"invalid attribute value type {type(value).__name__}")


_KEYS: dict[str, bytes] = {}
# tag -> key -> value -> its encoded field. Strings and tuples in one table, integers in another
# (``1 == 1.0 == True``: one dictionary key, three encodings; booleans and floats are not kept).
# The fields are bytes, which the collector does not track: a long run's cache (up to
# _PAIRS_MAX fields: unit ids, token counts...) adds nothing to its young-generation counts.
_TEXT: dict[bytes, dict[str, dict[Any, bytes]]] = {}
_INTS: dict[bytes, dict[str, dict[int, bytes]]] = {}
_PAIRS_MAX = 8192  # distinct attribute fields kept encoded: personas, models, phases, rounds
_pairs = 0


def _key_value(key: str, value: Any) -> bytes:
    """A ``KeyValue`` message's bytes."""
    head = _KEYS.get(key)
    if head is None:
        head = _KEYS[key] = _field(b"\x0a", key.encode("utf-8", "surrogatepass"))
    return head + _field(b"\x12", _value(value))


def _attributes(tag: bytes, attributes: Mapping[str, Any] | None) -> bytes:
    """Repeated ``KeyValue`` fields; a short string, tuple or integer seen under that key is encoded once."""
    global _pairs
    if not attributes:
        return b""
    items = getattr(attributes, "_dict", attributes)  # an event's BoundedAttributes: its dict
    text, ints = _TEXT.get(tag), _INTS.get(tag)
    if text is None or ints is None:
        text, ints = _TEXT.setdefault(tag, {}), _INTS.setdefault(tag, {})
    out = []
    for key, value in items.items():
        cls = value.__class__
        if cls is str or cls is tuple:
            table: dict[str, dict[Any, bytes]] = text
        elif cls is int:
            table = ints
        else:
            out.append(_field(tag, _key_value(key, value)))
            continue
        values = table.get(key)
        if values is not None:
            try:
                found = values.get(value)
            except TypeError:  # a tuple holding an unhashable value (never kept)
                found = None
            if found is not None:
                out.append(found)
                continue
        encoded = _field(tag, _key_value(key, value))
        # A tuple is kept only when it holds strings: (1,) == (True,) == (1.0,), one key again.
        if (
            (cls is int or len(value) <= 64)
            and (cls is not tuple or all(v.__class__ is str for v in value))
            and _pairs < _PAIRS_MAX
        ):
            if values is None:
                values = table[key] = {}
            values[value] = encoded
            _pairs += 1
        out.append(encoded)
    return b"".join(out)


def _uint(tag: bytes, n: int) -> bytes:
    return tag + _varint(n) if n else b""


_PLAIN_SPANS: set[type] = {ReadableSpan}
"""Span classes whose fields are ``ReadableSpan``'s, read directly (moot.app.sdk adds its span's)."""
_NAMES: dict[str, bytes] = {}  # a span name's field (names repeat: ``chat {model}``, ``invoke_agent ...``)
_NAMES_MAX = 4096
_KINDS = {kind: b"\x30" + bytes((kind.value + 1,)) for kind in SpanKind}
_TRACE_ID: list[Any] = [None, b""]  # the last trace id and its field (a run's spans share one)


def _span(span: ReadableSpan) -> bytes:
    """A ``Span`` message's bytes.

    An SDK span is read through its fields (``span.events``, ``span.attributes``... copy them
    into new tuples and mappings on every read, ~2 us a span); any other ``ReadableSpan``
    through its properties.
    """
    if type(span) not in _PLAIN_SPANS:
        return _span_public(span)
    context = span._context
    if context is None:
        raise TypeError("a span without a context")
    trace_id = context.trace_id
    if _TRACE_ID[0] != trace_id:
        _TRACE_ID[1] = b"\x0a\x10" + trace_id.to_bytes(16, "big")
        _TRACE_ID[0] = trace_id
    parts = [_TRACE_ID[1], b"\x12\x08", context.span_id.to_bytes(8, "big")]
    if context.trace_state:
        state = context.trace_state
        parts.append(_field(b"\x1a", ",".join(f"{k}={v}" for k, v in state.items()).encode()))
    parent = span._parent
    if parent:
        parts += (b"\x22\x08", parent.span_id.to_bytes(8, "big"))
    name = span._name
    head = _NAMES.get(name)
    if head is None:
        head = _field(b"\x2a", name.encode("utf-8", "surrogatepass"))
        if len(_NAMES) < _NAMES_MAX:
            _NAMES[name] = head
    parts += (head, _KINDS[span._kind], b"\x39", _Q(span._start_time or 0), b"\x41", _Q(span._end_time or 0))
    attributes = span._attributes
    if attributes:
        parts.append(_attributes(b"\x4a", getattr(attributes, "_dict", attributes)))
        dropped = getattr(attributes, "dropped", 0)
        if dropped:
            parts.append(_uint(b"\x50", dropped))
    events = span._events
    if events:
        parts.append(_events(events))
    parts.append(_uint(b"\x60", getattr(events, "dropped", 0)))
    links = span._links
    if links:
        parts.append(_links(links))
    parts.append(_uint(b"\x70", getattr(links, "dropped", 0)))
    parts.append(_status(span._status))
    parts.append(_FLAGS_REMOTE if parent is not None and parent.is_remote else _FLAGS_LOCAL)
    return b"".join(parts)


def _events(events: Any) -> bytes:
    out = []
    for event in events:
        body = b"\x09" + _Q(event.timestamp) + _field(b"\x12", event.name.encode("utf-8", "surrogatepass"))
        body += _attributes(b"\x1a", event.attributes) + _uint(b"\x20", event.dropped_attributes)
        out.append(_field(b"\x5a", body))
    return b"".join(out)


def _links(links: Any) -> bytes:
    out = []
    for link in links:
        body = b"\x0a\x10" + link.context.trace_id.to_bytes(16, "big")
        body += b"\x12\x08" + link.context.span_id.to_bytes(8, "big")
        body += _attributes(b"\x22", link.attributes) + _uint(b"\x28", link.dropped_attributes)
        body += b"\x35" + struct.pack("<I", 0x300 if link.context.is_remote else 0x100)
        out.append(_field(b"\x6a", body))
    return b"".join(out)


def _status(status: Any) -> bytes:
    code = status.status_code.value
    if not code and not status.description:
        return _STATUS_UNSET
    body = _field(b"\x12", status.description.encode()) if status.description else b""
    return _field(b"\x7a", body + _uint(b"\x18", code))


def _span_public(span: ReadableSpan) -> bytes:
    """A ``Span`` message's bytes, read through the ``ReadableSpan`` properties only."""
    context = span.context
    if context is None:
        raise TypeError("a span without a context")
    parts = [
        b"\x0a\x10",
        context.trace_id.to_bytes(16, "big"),
        b"\x12\x08",
        context.span_id.to_bytes(8, "big"),
    ]
    state = context.trace_state
    if state:
        parts.append(_field(b"\x1a", ",".join(f"{k}={v}" for k, v in state.items()).encode()))
    parent = span.parent
    if parent:
        parts += (b"\x22\x08", parent.span_id.to_bytes(8, "big"))
    parts.append(_field(b"\x2a", span.name.encode("utf-8", "surrogatepass")))
    parts += (_KINDS[span.kind], b"\x39", _Q(span.start_time or 0), b"\x41", _Q(span.end_time or 0))
    parts.append(_attributes(b"\x4a", span.attributes))
    parts.append(_uint(b"\x50", span.dropped_attributes))
    parts.append(_events(span.events))
    parts.append(_uint(b"\x60", span.dropped_events))
    parts.append(_links(span.links))
    parts.append(_uint(b"\x70", span.dropped_links))
    parts.append(_status(span.status))
    parts.append(_FLAGS_REMOTE if parent is not None and parent.is_remote else _FLAGS_LOCAL)
    return b"".join(parts)


_SCOPES: dict[int, tuple[Any, bytes]] = {}  # id -> (the scope, kept so its id is not reused; bytes)
_RESOURCES: dict[int, tuple[Any, bytes]] = {}  # id -> (the resource, kept so its id is not reused; bytes)


def _scope(scope: Any) -> bytes:
    """An ``InstrumentationScope`` field of ``ScopeSpans`` (encoded once per scope)."""
    found = _SCOPES.get(id(scope))
    if found is None or found[0] is not scope:
        if len(_SCOPES) > 64:
            _SCOPES.clear()
        body = b""
        if scope is not None:
            body = _field(b"\x0a", scope.name.encode()) if scope.name else b""
            body += _field(b"\x12", scope.version.encode()) if scope.version else b""
            body += _attributes(b"\x1a", scope.attributes)
        found = _SCOPES[id(scope)] = (scope, _field(b"\x0a", body))
    return found[1]


def _resource(resource: Any) -> bytes:
    """A ``Resource`` field of ``ResourceSpans`` (encoded once per resource)."""
    found = _RESOURCES.get(id(resource))
    if found is None or found[0] is not resource:
        if len(_RESOURCES) > 64:
            _RESOURCES.clear()
        found = _RESOURCES[id(resource)] = (
            resource,
            _field(b"\x0a", _attributes(b"\x0a", resource.attributes)),
        )
    return found[1]


def encode_spans(spans: Sequence[ReadableSpan]) -> bytes:
    """The serialized ``ExportTraceServiceRequest`` for ``spans`` (grouped by resource, then scope)."""
    grouped: dict[Any, dict[Any, list[bytes]]] = {}
    resources: dict[int, Any] = {}
    last: tuple[Any, Any] | None = None  # the previous span's resource and scope (usually all spans')
    encoded: list[bytes] = []
    for span in spans:
        resource, scope = span.resource, span.instrumentation_scope or None
        if last is None or last[0] is not resource or last[1] is not scope:
            last = (resource, scope)
            resources[id(resource)] = resource
            encoded = grouped.setdefault(id(resource), {}).setdefault(scope, [])
        encoded.append(_field(b"\x12", _span(span)))
    out = []
    for key, scopes in grouped.items():
        resource = resources[key]
        body = [_resource(resource)]
        for scope, in_scope in scopes.items():
            url = scope.schema_url if scope is not None else ""
            scope_body = _scope(scope) + b"".join(in_scope)
            scope_body += _field(b"\x1a", url.encode()) if url else b""
            body.append(_field(b"\x12", scope_body))
        if resource.schema_url:
            body.append(_field(b"\x1a", resource.schema_url.encode()))
        out.append(_field(b"\x0a", b"".join(body)))
    return b"".join(out)


_PROXY_VARIABLES = ("http_proxy", "all_proxy")


def _plain_http(endpoint: str | None) -> bool:
    """Whether the exporter will post to a plain ``http://`` URL with nothing ``requests`` would add.

    ``requests`` (the exporter's default transport) is what brings proxies from the environment,
    its CA bundle, client certificates and a credential provider's session: with any of those in
    play, or an ``https://`` endpoint, the default transport is kept.
    """
    env = os.environ
    url = endpoint or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    if not (url or "http://localhost:4318").strip().lower().startswith("http://"):
        return False
    for name, value in env.items():
        if not value:
            continue
        if name.lower() in _PROXY_VARIABLES or (name.startswith("OTEL_") and "CREDENTIAL_PROVIDER" in name):
            return False
    return True


class _Answer:
    """An HTTP answer's body and headers, kept for the exporter's client (status, retry-after)."""

    __slots__ = ("body", "fields")

    def __init__(self, body: bytes, fields: Any) -> None:
        self.body = body
        self.fields = fields


def _transport() -> Any:
    """An HTTP/1.1 keep-alive transport on the standard library's ``http.client``, for plain ``http://``.

    The exporter's default transport imports ``requests`` (with ``urllib3``, ``idna``,
    ``charset_normalizer``): ~45 ms of CPU at every start of a traced ``moot`` command, for one
    POST a batch to a collector. This one implements the exporter's transport interface (the
    ``_transport`` argument its constructor takes) and nothing else. None when that interface
    is not there (another exporter version): the default transport then.
    """
    try:
        from opentelemetry.exporter.http.transport._base import BaseHTTPResult, BaseHTTPTransport
    except ImportError:
        return None
    import http.client
    import threading
    from urllib.parse import urlsplit

    class Result(BaseHTTPResult):
        answer: _Answer | None

        def __init__(
            self,
            status: int | None = None,
            reason: str | None = None,
            error: Exception | None = None,
            answer: _Answer | None = None,
        ) -> None:
            super().__init__(status_code=status, reason=reason, error=error)
            object.__setattr__(self, "answer", answer)  # a frozen dataclass's field-less extra

        def content(self) -> bytes:
            return self.answer.body if self.answer is not None else b""

        def headers(self) -> Any:
            return self.answer.fields if self.answer is not None else {}

    class Transport(BaseHTTPTransport):
        def __init__(self) -> None:
            self._lock = threading.Lock()
            self._conn: http.client.HTTPConnection | None = None
            self._where: tuple[str, int] | None = None

        def request(
            self,
            method: str,
            url: str,
            *,
            headers: dict[str, str] | None = None,
            timeout: float | None = None,
            data: bytes | None = None,
        ) -> Any:
            parts = urlsplit(url)
            where = (parts.hostname or "localhost", parts.port or 80)
            path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            with self._lock:
                conn = self._conn
                if conn is None or self._where != where:
                    if conn is not None:
                        conn.close()
                    conn = self._conn = http.client.HTTPConnection(*where, timeout=timeout)
                    self._where = where
                conn.timeout = timeout
                if conn.sock is not None:
                    conn.sock.settimeout(timeout)
                try:
                    conn.request(method, path, body=data, headers=headers or {})
                    response = conn.getresponse()
                    body = response.read()
                except (OSError, http.client.HTTPException) as exc:
                    conn.close()
                    self._conn = None
                    return Result(error=exc)
                if response.will_close:
                    conn.close()
                    self._conn = None
            return Result(response.status, response.reason, answer=_Answer(body, response.headers))

        def close(self) -> None:
            with self._lock:
                if self._conn is not None:
                    self._conn.close()
                    self._conn = None

        def is_connection_error(self, exception: Exception | None) -> bool:
            return isinstance(exception, OSError | http.client.HTTPException)

    return Transport()


class SpanExporter(OTLPSpanExporter):
    """The OTLP/HTTP span exporter, encoding with :func:`encode_spans` (see the module docstring).

    To a plain ``http://`` endpoint (a local collector, Phoenix) it posts through a standard
    library transport instead of ``requests`` (see :func:`_transport`); otherwise as the exporter does.
    """

    def __init__(self, endpoint: str | None = None, **kwargs: Any) -> None:
        """Build the exporter as OpenTelemetry's (same arguments and environment variables)."""
        plain = not kwargs.get("session") and not any(
            kwargs.get(k) for k in ("certificate_file", "client_key_file", "client_certificate_file")
        )
        transport = _transport() if plain and "_transport" not in kwargs and _plain_http(endpoint) else None
        if transport is not None:
            try:
                super().__init__(endpoint, _transport=transport, **kwargs)
                return
            except TypeError:  # an exporter version without that argument
                pass
        super().__init__(endpoint, **kwargs)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Encode ``spans`` and post them through the exporter's own client (its retries, timeout)."""
        client = getattr(self, "_client", None)
        limit = getattr(self, "_max_request_size", None)
        if getattr(self, "_shutdown", True) or not callable(getattr(client, "export", None)):
            return super().export(spans)  # an exporter version whose internals differ: its own path
        try:
            data = encode_spans(spans)
        except Exception:  # noqa: BLE001 - a value the encoder does not know: the exporter's own path
            return super().export(spans)
        if isinstance(limit, int) and limit > 0 and len(data) > limit:
            return super().export(spans)  # it drops the batch and says so
        result = client.export(data)  # type: ignore[union-attr]
        return SpanExportResult.SUCCESS if getattr(result, "success", False) else SpanExportResult.FAILURE
