"""``n`` completions for one prompt (a vote's K samples) in one request where the server can.

OpenAI and vLLM sample ``n`` completions of one prompt in one request, so the
prompt is read once and the server batches the K sequences; llama.cpp's server
refuses ``n > 1`` and some servers ignore it. :class:`NSampler` asks once and
remembers: a server that answers with fewer choices than asked, or refuses with a
400/422/501, is sent single requests from then on (the samples it did return are
kept). A refusal that was about something else fails the single requests too, so
no error is hidden.

Usage is honest either way: ``calls`` counts the requests that answered (one
when the server sampled all K), tokens are what the server reported, and every
request beyond the first counts as an attempt for :func:`~moot.models.call_model`
(:func:`~moot.models.base.note_extra_request`). The single requests of a fallback
go out together, within the one call's slot of the model's concurrency gate.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from ..errors import ModelHTTPError
from .base import ModelRequest, ModelResponse, Sample, Usage, note_extra_request

__all__ = ["NSampler"]

logger = logging.getLogger(__name__)

#: Statuses with which a server refuses a parameter it does not take.
_REFUSALS = frozenset({400, 422, 501})

Send = Callable[[ModelRequest], Awaitable[ModelResponse]]


class NSampler:
    """Sends ``n > 1`` requests for one endpoint and remembers whether it samples n at once.

    Args:
        name: the model spec, for log lines.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.supported: bool | None = None
        """Whether the server samples ``n`` completions per request (None: not known yet)."""

    async def sample(self, request: ModelRequest, send: Send) -> ModelResponse:
        """``request.n`` completions of ``request`` through ``send`` (one request each).

        Raises:
            ModelError: whatever ``send`` raised (a refusal of ``n`` itself excepted, once).
        """
        samples: list[Sample] = []
        usage = Usage()
        model = ""
        sent = 0
        if self.supported is not False:
            sent = 1
            try:
                first = await send(request)
            except ModelHTTPError as err:
                if self.supported or err.status_code not in _REFUSALS:
                    raise
                logger.warning(
                    "%s: the server refused n=%d (HTTP %s); sampling one by one",
                    self.name,
                    request.n,
                    err.status_code,
                )
                self.supported = False
            else:
                samples = first.samples or [Sample(text=first.text, finish_reason=first.finish_reason)]
                usage, model = first.usage, first.model
                self.supported = len(samples) >= request.n
                if self.supported:
                    return first
        missing = request.n - len(samples)
        seed = request.seed
        singles = [
            # Distinct seeds: K requests with one seed would return K copies of one sample.
            request.model_copy(update={"n": 1, "seed": None if seed is None else seed + len(samples) + i})
            for i in range(missing)
        ]
        for _ in range(sent + missing - 1):
            note_extra_request()  # call_model counted this call as one attempt
        for reply in await asyncio.gather(*(send(r) for r in singles)):
            samples.append(Sample(text=reply.text, finish_reason=reply.finish_reason))
            usage = usage + reply.usage
            model = model or reply.model
        return ModelResponse(
            text=samples[0].text,
            usage=usage,
            model=model,
            finish_reason=samples[0].finish_reason,
            samples=samples,
        )
