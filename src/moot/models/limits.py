"""Adaptive concurrency per endpoint: how many requests moot keeps in flight, and when it stops.

Every endpoint a model talks to (one base URL; each replica of ``openai:M@URL1,URL2``; a
hosted API) has an :class:`Endpoint`: a concurrency *limit* that adapts, a *pause* set by
the server's ``Retry-After``, and a *circuit breaker* for a server that stopped answering.
A :class:`Gate` hands out the right to send one request, to the endpoint with room.

The limit (:class:`AdaptiveLimit`) is AIMD, additive increase and multiplicative decrease,
as in TCP congestion control, with the latency signal of the gradient limiter of Netflix's
concurrency-limits library:

* **Start: what the work asks for.** Until the first sign of congestion the limit follows
  demand: every request the work has ready is sent (up to the cap), so 100 benches in
  flight with 3 calls each put 300 requests on the wire at once, as TCP's slow start would
  after a few round trips.
* **Windows.** Answers are collected in windows of about one limit's worth (8 to 64); only
  requests sent since the last decrease count, so one burst of congestion is one decrease
  (TCP: at most one window cut per round trip).
* **Latency floor.** Each window's latency is its median, less twice the median's standard
  error estimated from the window's own spread (replies of varied length make a median
  wander with no queue at all; a low quantile would miss a server that answers part of a
  window at once and queues the rest). The floor is the lowest window median among the last
  :data:`FLOOR_WINDOWS` (8), so it follows a server that became slower and a single lucky
  window does not hold it down for good. A window above
  ``shrink_above`` (1.5) times the floor means requests queue at the server: the limit is
  multiplied by ``0.9 / ratio`` (at least 0.5), the gradient rule, aimed just below the
  concurrency that showed the floor so the next windows show it again. When two cuts in a
  row leave latency where it was, the server itself became slower (longer prompts, longer
  answers): its latency becomes the new floor and the limit returns to where it was. Held
  between the two thresholds for 4 windows, the limit is halved once to re-measure the
  floor (it may have been measured while a first burst queued).
* **Drops.** A time-out halves the limit; never below 1. A 429 or 503 only ends slow start:
  the pacer below answers a rate limit.
* **Growth.** While the last window stayed within ``grow_below`` (1.25) times the floor,
  each answer to a request sent with the limit at least half in use adds ``1/sqrt(limit)``:
  about ``sqrt(limit)`` per round trip, up to the cap.

The cap is ``--model-concurrency N`` / ``?max_concurrency=N`` when given, else
:data:`DEFAULT_CAP`; a fixed (non-adaptive) endpoint, the embedded model's, keeps exactly
its cap.

**A rate limit is paced, never paused** (:class:`RatePacer`). A concurrency limit cannot hold a
*rate* limit: with 50 ms answers one request in flight is already 20 requests/s. Pausing the
whole endpoint for a ``Retry-After`` and then letting everyone go at once collapsed against a
limiter with little burst (issue 34: a 0.2 s bucket or nginx's ``limit_req`` without ``burst``
refused every release again). So a 429 or 503 (a rate limiter's, as nginx's and Envoy's 503s)
never cuts the concurrency limit and never opens the circuit; instead requests leave one at a
time on a schedule (GCRA: each send moves the next one's earliest time ``1 / rate`` later):

* **When.** Refusals that are a quarter or more of the latest 16 answers, or three in a row with
  nothing served between: a rate limit refuses every request beyond it. A server refusing a
  request now and then is not paced (the refused request waits its own ``Retry-After``).
* **The rate.** Nothing says what the server allows at first: a *ramp* starts at half the rate
  served over the last second (at least :data:`RAMP_START`) and doubles every 0.2 s of sending
  (no more than once while nothing is sent: RFC 7661's application-limited rule). Its first
  refusal sets ``W`` to :data:`RAMP_EXIT` of the rate it was sent at (the rate it actually left
  at, from the gap since the send before it: a whole second's count lags a doubling ramp and set
  ``W`` at 0.6 of the limit, and two gaps took in a stall of the event loop, set ``W`` at 18
  requests/s against a limit of 50, and the cubic took 6 s to climb back), then ``0.95 * W``;
  after that the rate follows TCP CUBIC's curve (RFC 8312) in
  requests/s: ``0.9 * W`` right after a refusal (up to ``0.97 * W`` when it is the only refusal
  among many served since the last cut: a limiter with no burst refusing a request that arrived
  a little early), back at ``W`` after 1.5 s, flat near it, then probing above. After two
  seconds of pacing, or sooner when every answer of the last second left at 1.1 times the rate
  the server served in it or faster, a refusal sets ``W`` at most at that served rate: sending
  far above a bucket's rate only adds refusals. A paced send leaves on the
  timer (1-3 ms after its slot: asyncio's timers wake on whole milliseconds), and the next slot
  counts from it, less the median lateness of the latest 16 (counted from the send alone, 7%
  below the rate at 20 ms; counted from the slot, a late send then one on time left a gap up to
  2 ms short, which a limiter with no burst refuses). A refusal while climbing back is no new
  cut unless refusals are heavy again (a server refusing some requests whatever the rate would
  otherwise ratchet the rate down), but the first one ends the climb a shallow cut (0.97) below its
  rate (``W`` a little above a limiter with no burst was refused every few sends of each climb,
  then cut deep; ended at the refused rate itself, it was refused a few more times); heavy
  refusals cut deeper each time in a row. Refused as often climbing back (below the refused rate)
  as above it, on a climb from a cut deeper than 0.95 that knew what the server serves (the cap
  above applied), the refusals do not depend on the rate, and pacing ends; a climb from a shallow
  cut, or from one made before the served rate was known, may lie wholly above the limit. A
  refusal says the server's bucket was empty, so between two refusals a second or more apart a
  limit of any depth gave one request to each served, and it allows at least those, less one,
  over the time between: the rate it was *shown* to allow (:meth:`Endpoint._shown_rate`; requests
  sent within :data:`_REORDER_S` of either refusal may have reached it in either order). A
  request paced below 0.7 of the highest rate the server was shown to allow over the last four
  seconds, and refused all the same, was not refused for its rate: at the second such refusal
  pacing ends, and the share of the latest 64 answers refused is taken as what the server refuses
  whatever the rate (an overloaded backend refusing 20% at random was paced down to 5-20
  requests/s by cut after cut); a quarter above that share, or a run of refusals that many more
  than it explains, starts pacing again, and paced answers served ``max(32, 3 / share)`` in a row
  forget it (a limit shared with other clients, whose share of it moved, looks random for a
  while). Past four times ``W`` with no refusal, pacing by measurement ends.
* **Retry-After.** It counts whole seconds: ``1`` says a slot frees within the second, which the
  schedule spaces requests for already. Paced, the refused request queues again at once for a
  slot (the server sees the schedule's rate whichever request fills a slot; waiting the second
  out left a run's end waiting on its last refusal); unpaced, it waits its ``Retry-After``. A
  longer one is a pause the server asks for: nothing leaves before it ends, then the schedule
  resumes, one request at a time.
* **Announced limits** (:func:`announced_limits`). OpenAI's ``x-ratelimit-*`` and Anthropic's
  ``anthropic-ratelimit-*`` headers say the limits (per minute) and what is left: requests are
  paced at 0.95 of the announced request rate, and of the token rate divided by the tokens a
  request asks for (its prompt, about 4 bytes a token, and ``max_tokens``), before anything is
  refused; what the server's bucket still holds goes at once. A process that is one of several
  (a Ray worker) keeps to its share (:func:`set_rate_share`).
* **The first answers.** A new endpoint gets :data:`INITIAL_WINDOW` requests until its first
  answer (at most :data:`INITIAL_HOLD_S`): a limit's refusals and headers come back before the
  rest leave.

The circuit breaker: an endpoint whose last :data:`OPEN_AFTER` (2) or more requests all
failed without an answer (time-outs, refused or dropped connections) for at least
``window`` seconds (the request timeout, at most 10 s) is *open*: every request waiting
for it and every new one fails at once with :class:`~moot.errors.EndpointDown` ("endpoint
http://... answered none of 16 requests within 60 s"). After ``open_for`` seconds (30,
doubling on each failed probe up to 300) one request is let through (half-open); an
answer of any kind closes the circuit.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import math
import statistics
import time
import weakref
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from ..errors import EndpointDown

__all__ = [
    "DEFAULT_CAP",
    "OPEN_AFTER",
    "INITIAL_HOLD_S",
    "INITIAL_WINDOW",
    "THROTTLE_CUT",
    "AdaptiveLimit",
    "Announced",
    "Endpoint",
    "Gate",
    "Outcome",
    "RatePacer",
    "Ticket",
    "announced_limits",
    "set_rate_share",
    "shared_gate",
    "throttle_wait_s",
]

DEFAULT_CAP = 512
"""Upper bound of an adaptive limit when no cap is given: requests in flight per endpoint."""
OPEN_AFTER = 2
"""Requests failed without an answer, in a row, that (over ``window`` seconds) open the circuit."""
HOLD_WINDOWS = 4
"""Windows in a row above the floor's growth band before the limit is halved to re-measure it."""
THROTTLE_CUT = 0.75
"""The limit's factor on a 429/503 (the pause does the rest); a time-out halves it."""
FLOOR_WINDOWS = 8
"""The floor is the lowest window latency among the last this many windows."""
_MIN_WINDOW = 8
_MAX_WINDOW = 64
INITIAL_WINDOW = 16
"""Requests sent to a new endpoint before its first answer (or :data:`INITIAL_HOLD_S`), as TCP's
initial window: a rate limiter's refusals and announced limits come back before the rest leave."""
INITIAL_HOLD_S = 0.1
"""Seconds the initial window holds the rest at most (a refusal comes back within a network round trip)."""
RAMP_EXIT = 0.9
"""W as a fraction of the rate the ramp was refused at (the cubic then starts at ``0.95 * W``)."""
_RAMP_EXIT_CUT = 0.95  # the cut leaving a ramp: W is already RAMP_EXIT of the refused rate
RAMP_START = 20.0
"""Requests/s the pacer starts from after a first burst of refusals (it doubles every 0.2 s)."""
_RAMP_MAX = 10_000.0  # requests/s: a ramp that got this far without a refusal found no limit
_RATE_SENDS = 1  # sends whose spacing measures the rate a request actually left at (the last gap)
_ABOVE_SERVED = 1.0  # W after a refusal, at most this times the rate served over the last second
_SERVED_SPAN_S = 2.0  # seconds of pacing after which the last second's answers were all paced
_SATURATED = 1.1  # answers all sent at this times the rate served or faster: the server's limit is passed
_LATE_S = 0.005  # seconds after its slot a send counts as paced (its lateness measured)
_LATE_SENDS = 16  # paced sends whose median lateness the schedule allows for
_SHALLOW_CUT = 0.97  # the shallowest cut, after one refusal among many served
_TELLING_CUT = 0.95  # a climb from a cut deeper than this tells whether refusals depend on the rate
_PROOF_SPAN_S = 1.0  # seconds between two refusals, at least, whose served requests show a rate allowed
_PROOF_AGE_S = 4.0  # seconds back the refusals that show it go (a shared limit moves)
_PROOF_BIN_S = 0.05  # one refusal kept a bin of this many seconds (any refusal says the bucket was empty)
_REORDER_S = 0.05  # requests sent this close together may reach the server in either order
_UNEXPLAINED = 0.7  # a request paced below this times the rate shown allowed, refused: not for its rate
_UNEXPLAINED_N = 2  # such refusals in one stretch of pacing that end it
_RANDOM_SHARE_MAX = 0.5  # the most of its answers a server is taken to refuse whatever the rate
_RECENT = 64  # the latest answers whose share of refusals that is
_SHARE_OF = 32  # answers whose share of refusals says whether a rate limit is passed
_HEAVY_SHARE = 0.25  # the share of refusals that does


class Outcome(Enum):
    """How one request ended, as the endpoint's limit and breaker see it."""

    ANSWER = "answer"
    """A reply (its latency feeds the limit)."""
    ERROR = "error"
    """An HTTP error other than 429/503, or an unreadable reply: the server is alive."""
    THROTTLE = "throttle"
    """429 or 503: the endpoint is paced (a long Retry-After pauses it)."""
    TIMEOUT = "timeout"
    """No complete answer within the request timeout: the limit halves; counts toward the breaker."""
    UNREACHABLE = "unreachable"
    """Refused, unreachable or dropped: counts toward the breaker."""
    CANCELLED = "cancelled"
    """The caller gave up (a deadline): nothing learnt."""


class AdaptiveLimit:
    """The AIMD limit with a latency floor; see the module docstring. Pure arithmetic.

    Args:
        cap: the largest limit (None: :data:`DEFAULT_CAP`).
        adaptive: False keeps the limit at ``cap`` (the embedded model: 1).
        grow_below: grow while the window median is at most this times the floor.
        shrink_above: shrink when the window median is above this times the floor.
    """

    def __init__(
        self,
        cap: int | None = None,
        *,
        adaptive: bool = True,
        grow_below: float = 1.25,
        shrink_above: float = 1.5,
    ) -> None:
        self.cap = cap if cap is not None else DEFAULT_CAP
        self.adaptive = adaptive
        self.grow_below = grow_below
        self.shrink_above = shrink_above
        self.limit = float(self.cap if not adaptive else 1)
        """The current limit (requests in flight); an int view is :attr:`allowed`."""
        self.slow_start = adaptive
        """True until the first sign of congestion: the limit follows demand."""
        self.epoch = 0
        """Bumped by each decrease; answers to requests sent before it are not counted again."""
        self.floor: float | None = None
        """The lowest window latency (lower quartile) seen, seconds."""
        self.low: int | None = None
        """The lowest limit once congestion was seen (None: never)."""
        self.high = int(self.limit)
        """The highest limit reached."""
        self._cut_at: tuple[float, float] | None = None  # (latency, limit) at the first latency cut
        self._strikes = 0  # latency cuts in a row after which latency did not fall
        self._held = 0  # windows in a row between grow_below and shrink_above
        self._window: list[float] = []
        self._recent: deque[float] = deque(maxlen=FLOOR_WINDOWS)
        self._near_floor = True  # the last window's latency was within grow_below of the floor

    def set_cap(self, cap: int | None) -> None:
        """Change the cap (an explicit ``--model-concurrency``); the limit is clipped to it."""
        self.cap = cap if cap is not None else DEFAULT_CAP
        if not self.adaptive:
            self.limit = float(self.cap)
        self.limit = min(self.limit, float(self.cap))

    @property
    def allowed(self) -> int:
        """Requests allowed in flight now (at least 1)."""
        return max(1, int(self.limit))

    def room(self, in_flight: int) -> bool:
        """Whether one more request may be sent with ``in_flight`` already out."""
        if self.slow_start:
            return in_flight < self.cap
        return in_flight < self.allowed

    def sent(self, in_flight: int) -> int:
        """Note a request sent, ``in_flight`` counting it; returns the epoch to report it with."""
        if self.slow_start and in_flight > self.limit:
            self.limit = float(min(in_flight, self.cap))
            self.high = max(self.high, int(self.limit))
        return self.epoch

    def answered(self, latency: float, epoch: int, in_flight: int) -> None:
        """A reply to a request sent at ``epoch``, with ``in_flight`` out then, took ``latency`` seconds."""
        if not self.adaptive or epoch != self.epoch:
            return
        floor = self.floor
        if (
            self._near_floor
            and not self.slow_start
            and floor is not None
            and latency <= self.shrink_above * floor
            and 2 * in_flight >= self.allowed
            and self.limit < self.cap
        ):
            # Additive increase: about sqrt(limit) per round trip (limit answers).
            self.limit = min(float(self.cap), self.limit + 1.0 / math.sqrt(self.limit))
            self.high = max(self.high, int(self.limit))
        self._window.append(latency)
        if len(self._window) >= min(_MAX_WINDOW, max(_MIN_WINDOW, self.allowed)):
            self._close_window()

    def leave_slow_start(self) -> None:
        """A rate limit's refusal: stop following demand, keep the limit (the pacer holds the rate)."""
        self.slow_start = False

    def dropped(self, epoch: int, factor: float = 0.5, *, step: bool = False) -> None:
        """A 429/503/time-out for a request sent at ``epoch``: multiply by ``factor``, once per epoch.

        With ``step`` (a 429/503), each further drop of the same burst takes 1 more off: 50
        of 100 requests refused leave about ``100 * 0.75 - 49``, near what the server took.
        """
        if not self.adaptive:
            return
        if self.slow_start:
            self.slow_start = False
        elif epoch != self.epoch:
            if step and epoch == self.epoch - 1 and self.limit > 1:
                self.limit -= 1
                self.low = self.allowed if self.low is None else min(self.low, self.allowed)
            return
        self._cut(factor)

    def _cut(self, factor: float) -> None:
        self.limit = max(1.0, self.limit * factor)
        self.epoch += 1
        self._window.clear()
        self.low = self.allowed if self.low is None else min(self.low, self.allowed)

    def _close_window(self) -> None:
        # The median: a server whose slots free in waves answers some requests at once and
        # queues the others, and a low quantile would not see that queue until it held them all.
        latency = _quantile(self._window, 0.5)
        # Less twice the median's standard error (sigma from the window's interquartile range):
        # replies of varied length make a window's median wander with no queue at all.
        spread = _quantile(self._window, 0.75) - _quantile(self._window, 0.25)
        noise = 2.0 * 1.25 * (spread / 1.35) / math.sqrt(len(self._window))
        self._window.clear()
        self._recent.append(latency)
        floor = self.floor = min(self._recent)
        ratio = max(latency - noise, floor) / floor if floor > 0 else 1.0
        self._near_floor = ratio <= self.grow_below
        # Held above the floor for HOLD_WINDOWS windows: the floor may be stale (measured while
        # a burst queued); a cut finds out (latency falls: queueing) or is undone (two strikes).
        self._held = 0 if self._near_floor or ratio > self.shrink_above else self._held + 1
        if (ratio <= self.shrink_above and self._held < HOLD_WINDOWS) or self.limit <= 1:
            if self._near_floor:
                self._cut_at = None
            return
        self._held = 0
        self.slow_start = False
        if self._cut_at is not None and latency >= 0.9 * self._cut_at[0]:
            self._strikes += 1
            if self._strikes >= 2:
                # Two cuts and no faster: not queueing but a slower server (longer prompts,
                # longer answers). Its latency is the new floor; the limit comes back.
                self.floor, self._near_floor = latency, True
                self._recent.clear()
                self._recent.append(latency)
                self.limit = max(self.limit, self._cut_at[1])
                self._cut_at, self._strikes = None, 0
                return
        else:
            self._strikes = 0
            self._cut_at = (latency, self.limit)
        self._cut_at = (latency, self._cut_at[1])
        # Aim below the floor's concurrency, so the next windows show the floor again.
        self._cut(max(0.5, min(0.9 / ratio, 0.5 if ratio <= self.shrink_above else 1.0)))


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass(frozen=True, slots=True)
class Announced:
    """The rate limits a server announced in its response headers (per second, from per minute).

    OpenAI sends ``x-ratelimit-{limit,remaining,reset}-{requests,tokens}``; Anthropic
    ``anthropic-ratelimit-{requests,tokens,input-tokens}-{limit,remaining,reset}``. Both state
    their limits per minute (OpenAI's and Anthropic's documentation), so a limit of 3,000 is 50
    requests/s; ``remaining`` is what the server's bucket holds now.
    """

    requests_per_s: float | None = None
    """The announced request rate (the limit over 60 s), or None."""
    requests_remaining: int | None = None
    """Requests the server's bucket held when it answered, or None."""
    tokens_per_s: float | None = None
    """The announced token rate (the limit over 60 s), or None."""
    tokens_remaining: int | None = None
    """Tokens the server's bucket held when it answered, or None."""

    def describe(self) -> str:
        """``"50 requests/s, 10,000 tokens/s announced"``, for progress lines and records."""
        parts = []
        if self.requests_per_s is not None:
            parts.append(f"{self.requests_per_s:,.4g} requests/s")
        if self.tokens_per_s is not None:
            parts.append(f"{self.tokens_per_s:,.6g} tokens/s")
        return ", ".join(parts) + " announced"


_ANNOUNCE_PREFIXES = ("x-ratelimit-", "anthropic-ratelimit-")


def _number(headers: Mapping[str, str], *names: str) -> float | None:
    for name in names:
        value = headers.get(name)
        if value is None:
            continue
        try:
            number = float(value)
        except ValueError:
            continue
        if math.isfinite(number) and number >= 0:
            return number
    return None


def announced_limits(headers: Mapping[str, str] | None) -> Announced | None:
    """The rate limits in a response's headers (OpenAI's or Anthropic's), or None when there are none.

    Args:
        headers: the response headers, a case-insensitive mapping (aiohttp's, httpx's).
    """
    if not headers:
        return None
    requests = _number(headers, "x-ratelimit-limit-requests", "anthropic-ratelimit-requests-limit")
    tokens = _number(
        headers,
        "x-ratelimit-limit-tokens",
        "anthropic-ratelimit-tokens-limit",
        "anthropic-ratelimit-input-tokens-limit",
    )
    if requests is None and tokens is None:
        return None
    left = _number(headers, "x-ratelimit-remaining-requests", "anthropic-ratelimit-requests-remaining")
    tokens_left = _number(
        headers,
        "x-ratelimit-remaining-tokens",
        "anthropic-ratelimit-tokens-remaining",
        "anthropic-ratelimit-input-tokens-remaining",
    )
    return Announced(
        requests_per_s=requests / 60.0 if requests else None,
        requests_remaining=int(left) if left is not None else None,
        tokens_per_s=tokens / 60.0 if tokens else None,
        tokens_remaining=int(tokens_left) if tokens_left is not None else None,
    )


_RATE_SHARE = [1.0]  # this process's share of announced limits (set_rate_share)


def set_rate_share(fraction: float) -> None:
    """This process's share of every rate limit a server announces (a Ray worker's: ``1 / workers``).

    Every process sending to one endpoint reads the same headers; together they keep to them
    only if each paces at its share.

    Raises:
        ValueError: ``fraction`` is not in (0, 1].
    """
    if not 0 < fraction <= 1:
        raise ValueError(f"a rate share is in (0, 1], got {fraction}")
    _RATE_SHARE[0] = fraction


class RatePacer:
    """The send schedule of an endpoint that limits its rate; see the module docstring.

    Requests leave one at a time on a schedule (GCRA: each send moves the next one's earliest
    time ``1 / rate`` later), never as a burst. The rate is the smaller of what the server
    announced (:meth:`announce`, times ``margin``) and what refusals measured (:meth:`refused`):
    a *ramp* doubling every ``ramp_s`` seconds until the first refusal, then TCP CUBIC's curve
    (RFC 8312) in requests/s: ``beta * W`` right after a refusal at rate ``W``, back at ``W``
    after ``k_s`` seconds, flat near it, then probing above; past ``release * W`` with no
    refusal, pacing by measurement ends.

    Args:
        beta: the rate right after a refusal, as a fraction of the rate it was sent at.
        k_s: seconds the cubic takes to return to the refused rate.
        release: pacing by measurement stops when the rate reaches this times the refused one.
        ramp_s: while ramping, the rate doubles every this many seconds.
        margin: the fraction of an announced rate moot sends at (clocks and jitter differ).
    """

    def __init__(
        self,
        beta: float = 0.9,
        k_s: float = 1.5,
        release: float = 4.0,
        ramp_s: float = 0.2,
        margin: float = 0.95,
    ) -> None:
        self.beta = beta
        self.k_s = k_s
        self.release = release
        self.ramp_s = ramp_s
        self.margin = margin
        self.cut_beta = beta
        """The last cut's factor: ``beta``, or shallower when refusals were few since the cut before."""
        self.w_max: float | None = None
        """The rate of the last refusal (requests/s); None: no refusal measured one."""
        self.ramping = False
        """True between the first burst of refusals and the first refusal while paced."""
        self.since = 0.0
        """When the current ramp or cubic began (and the earliest time anything is sent)."""
        self.ramp_rate = 1.0
        self.ramp_last = 0.0
        """When the ramp last sent a request, at ``ramp_rate``: it grows one doubling past that at most."""
        self.next_at = 0.0
        """The schedule: the earliest time the next request may leave."""
        self.cut_at = float("-inf")
        """When the rate was last cut: refusals of requests sent before it are not counted again."""
        self.random_share = 0.0
        """The share of requests the server refuses whatever the rate, once measured."""
        self._below = [0, 0]  # answers and refusals to requests sent while climbing back, since the cut
        self._above = [0, 0]  # the same at or above the refused rate
        self._unexplained = 0  # refusals of requests paced well below the rate shown allowed, this stretch
        self._served_run = 0  # answers served in a row
        self._shown: deque[tuple[float, float]] = deque()  # when, the rate shown allowed then: falling
        self.paced_since = 0.0
        """When the current stretch of pacing began (its first ramp)."""
        self.cuts_in_row = 0
        """Cuts since a request sent after a cut was last served."""
        self.announced: Announced | None = None
        """The limits the server announced last."""
        self.allowance = 0.0
        """Requests the server's announced bucket still holds for us: sent without waiting."""
        self.tokens_per_request = 0.0
        """The mean tokens a request asks for (prompt estimate plus max_tokens), once known."""
        self._late: deque[float] = deque(maxlen=_LATE_SENDS)  # how long after its slot a send left
        self.ceiled = False
        """A refusal while climbing back lowered ``w_max`` (once a climb)."""
        self.telling = False
        """The current climb tells whether refusals depend on the rate (see :meth:`refused`)."""

    def climbing(self, now: float) -> bool:
        """True while the rate climbs back to the one refused last (the cubic's first ``k_s`` seconds)."""
        return self.w_max is not None and not self.ramping and now - self.since < self.k_s

    def answered(self, below: bool, refused: bool) -> None:
        """Count an answer to a request sent below (climbing back) or at/above the refused rate."""
        counts = self._below if below else self._above
        counts[0] += 1
        counts[1] += refused
        self._served_run = 0 if refused else self._served_run + 1
        share, paced = self.random_share, self.ramping or self.w_max is not None
        if share and paced and self._served_run >= max(_SHARE_OF, 3 / share):
            # Paced, and served a run that a server refusing this share of all requests would
            # have broken (but for 5% of runs): the refusals were for the rate after all (a limit
            # shared with other clients, whose share of it moved, looks random for a while).
            self.random_share = 0.0

    @property
    def shown_max(self) -> float:
        """The highest rate the server was shown to allow over the last few seconds (see :meth:`refused`)."""
        return self._shown[0][1] if self._shown else 0.0

    @property
    def active(self) -> bool:
        """True while requests are paced."""
        return self.ramping or self.w_max is not None or self._announced_rate() is not None

    def _announced_rate(self) -> float | None:
        a = self.announced
        if a is None:
            return None
        rates = []
        if a.requests_per_s is not None:
            rates.append(a.requests_per_s)
        if a.tokens_per_s is not None and self.tokens_per_request > 0:
            rates.append(a.tokens_per_s / self.tokens_per_request)
        return self.margin * _RATE_SHARE[0] * min(rates) if rates else None

    def _measured_rate(self, now: float) -> float | None:
        t = max(0.0, now - self.since)
        if self.ramping:
            # Application-limited (RFC 7661's rule for TCP): the ramp grows while requests go out,
            # at most one doubling past the last one sent. Requests all waiting a Retry-After of a
            # second would otherwise come back to a rate 2^10 times higher, and go as one burst.
            idle = min(max(0.0, now - self.ramp_last), self.ramp_s)
            rate: float = self.ramp_rate * 2.0 ** (idle / self.ramp_s)
            if rate < _RAMP_MAX:
                return rate
            self.ramping = False  # no refusal however fast: no rate limit to pace for
            return None
        if self.w_max is None:
            return None
        c = (1.0 - self.cut_beta) / self.k_s**3
        rate = self.w_max * (1.0 + c * (t - self.k_s) ** 3)
        if rate >= self.release * self.w_max:
            self.w_max = None  # the server allows far more than it did: stop pacing by measurement
            return None
        return max(rate, 0.1)

    def rate(self, now: float) -> float | None:
        """The allowed send rate now (requests/s), or None when not pacing."""
        measured = self._measured_rate(now)
        announced = self._announced_rate()
        if measured is None:
            return announced
        return measured if announced is None else min(measured, announced)

    def scheduled(self, now: float) -> bool:
        """True while requests leave on the schedule (pacing, and no announced room to send at once)."""
        return self.allowance < 1.0 and self.rate(now) is not None

    def wait(self, now: float) -> float:
        """Seconds until one more request may be sent (0: now, or not pacing)."""
        if now < self.since:
            return self.since - now  # a long Retry-After: the schedule starts after it
        if not self.scheduled(now):
            return 0.0
        return max(0.0, self.next_at - now)

    def take(self, now: float, tokens: float = 0.0) -> None:
        """Spend the right to one request asking for about ``tokens`` tokens (call when :meth:`wait` is 0)."""
        if tokens > 0:
            n = self.tokens_per_request
            self.tokens_per_request = tokens if n == 0 else 0.9 * n + 0.1 * tokens
        rate = self.rate(now)
        if rate is None:
            return
        if self.ramping and now >= self.ramp_last:
            self.ramp_rate, self.ramp_last = rate, now
        if self.allowance >= 1.0:
            self.allowance -= 1.0  # the server's bucket has room: no need to wait for the schedule
            return
        # A send leaves a little after its slot (asyncio's timers wake on whole milliseconds: 1-3
        # ms late). The next slot counts from this send, less the median recent lateness: counted
        # from the send alone, 1-2 ms lost per 20 ms interval ran 7% below the rate; counted from
        # the slot, a late send then one on time left a gap up to 2 ms short, which a limiter
        # with no burst refuses (it ran at 45 of 50 requests/s to keep its refusals few).
        late = now - self.next_at
        if 0.0 <= late < min(_LATE_S, 0.5 / rate):
            self._late.append(late)
        typical = statistics.median_high(self._late) if self._late else 0.0
        self.next_at = now - typical + 1.0 / rate

    def refused(
        self,
        now: float,
        sent_at: float,
        sent_rate: float | None,
        pause_s: float = 0.0,
        *,
        heavy: bool = True,
        served_rate: float = 0.0,
        saturated: bool = False,
        shown_rate: float = 0.0,
        refused_share: float = 0.0,
    ) -> None:
        """A 429/503's refusal of a request sent at ``sent_at`` while the rate was ``sent_rate``.

        Args:
            now: when the refusal arrived.
            sent_at: when the refused request left.
            sent_rate: the paced rate it left at (None: not paced).
            pause_s: a Retry-After longer than its one-second resolution, which the schedule waits out.
            heavy: refusals are a large share of the latest answers (a rate limit well passed).
            served_rate: requests/s answered over the last second (where a ramp starts).
            saturated: every request answered over the last second left paced well above
                ``served_rate`` (:data:`_SATURATED` times it): ``served_rate`` is the server's limit.
            shown_rate: requests/s the server is shown to allow (served between two refusals,
                :meth:`Endpoint._shown_rate`): a request paced well below it and refused was
                not refused for its rate.
            refused_share: the share of refusals among the latest answers (what a server refusing
                whatever the rate refuses).
        """
        self.allowance = 0.0
        shown = self._shown  # a falling sequence: the first is the highest of the last seconds
        while shown and shown[-1][1] <= shown_rate:
            shown.pop()
        shown.append((now, shown_rate))
        while shown[0][0] < now - _PROOF_AGE_S:
            shown.popleft()
        shown_rate = self.shown_max
        if sent_rate is not None and sent_rate < _UNEXPLAINED * shown_rate and self.active:
            # The server was shown to allow shown_rate (served between two refusals: a bound that
            # holds for a limit of any depth), and refused a request paced well below it: not for
            # its rate. Twice in a stretch of pacing: the server refuses a share of all requests
            # (an overloaded backend), and pacing would only ratchet the rate down for nothing
            # (a server refusing 20% at random was paced down to 5 requests/s).
            self._unexplained += 1
            if self._unexplained >= _UNEXPLAINED_N:
                self.random_share = min(refused_share, _RANDOM_SHARE_MAX)
                self._end_measured()
                return
        if sent_at < self.cut_at:
            return  # sent before the last cut: that cut already answers it
        if self.w_max is not None and not heavy and now - self.since < self.k_s:
            # Still climbing back to the rate refused last: a lone refusal here is no new cut (a
            # server refusing some requests whatever the rate would otherwise ratchet it to 0),
            # but the climb ends a shallow cut below its rate: W set a little above a limiter's
            # (no burst, timer jitter) was refused every few sends of each climb back, then cut
            # deep; ended at the refused rate itself, the climb was refused five more times, and
            # the cut that followed left W at the rate served meanwhile (43 of 50 requests/s, for
            # seconds). Once a climb: lowered at each refusal, clients sharing a limit each kept
            # what they had (one joining late was held at an eighth of the other's rate).
            if sent_rate is not None and sent_rate < self.w_max and not self.ceiled:
                ceiling = sent_rate * _SHALLOW_CUT
                self.w_max = self._at_most_served(ceiling, now, served_rate, saturated)
                self.ceiled = True
            return
        below, above = self._below, self._above
        if (
            not heavy
            and self.telling
            and below[0] >= 32
            and below[1] >= 0.05 * below[0]
            and below[1] / below[0] >= 0.5 * above[1] / max(1, above[0])
        ):
            # Refused as often below the refused rate as above it: the refusals do not depend on
            # the rate (a server that refuses a share of all requests). No limit to pace for.
            # Only a climb from a deep enough cut tells: from a shallow one (leaving the ramp, or
            # one refusal among many), the climb may lie wholly above the limit (W at 21.6 of a 1 s
            # bucket of 20, climbing from 20.5, was refused 5% of the time and pacing stopped:
            # the burst that followed took refusals to 40-90% of the served). And only from a cut
            # that knew what the server serves (W at most that rate): 1.4 s into pacing a 1 s
            # bucket of 50 still served 58 a second from its depth, W was left at 62, the climb
            # from 56 lay wholly above 50, and pacing stopped (235 refused for 500 served).
            self.random_share = below[1] / below[0]
            self._end_measured()
            return
        # A refusal after many served requests (a limiter with no burst, refusing a request that
        # arrived a little early) says the rate is just above the limit: a shallow cut. Many
        # refusals since the last cut (a bucket well passed) cut by beta.
        answered, refusals = below[0] + above[0], below[1] + above[1]
        if self.ramping:
            shallow = _RAMP_EXIT_CUT
        else:
            shallow = min(_SHALLOW_CUT, 1.0 - refusals / answered) if answered else self.beta
        self.cut_beta = max(self.beta, shallow)
        self._below, self._above = [0, 0], [0, 0]
        self.cut_at = now
        self.ceiled = self.telling = False
        if sent_rate is None or (self.w_max is None and not self.ramping):
            # Not paced yet: nothing says what the server allows. Ramp up from what it served.
            self.ramping, self.paced_since = True, now
            self.ramp_rate, self.ramp_last = max(RAMP_START, 0.5 * served_rate), now + pause_s
            self._unexplained = 0
        else:
            # A ramp doubles its rate, so it may have gone past the limit by up to twice (more where
            # a deep bucket hid the limit for a while): leaving it, W is a fraction of the refused rate.
            # Refused again before anything sent after the last cut was served: the rate is still
            # far above the limit, so each cut in a row goes deeper (beta, beta^2, beta^4, ...).
            deeper = self.beta ** (2 ** min(self.cuts_in_row, 2) - 1)
            self.cuts_in_row += 1
            w = sent_rate * deeper * (RAMP_EXIT if self.ramping else 1.0)
            if not self.ramping:
                w = self._at_most_served(w, now, served_rate, saturated)
                self.telling = self.cut_beta < _TELLING_CUT and self._knows_served(
                    now, served_rate, saturated
                )
            self.w_max = max(w, 0.1)
            self.ramping = False
        self.since = now + pause_s
        # The refusal says the server's bucket is empty now: the next request leaves one interval
        # of the new rate later (a burst that drained the bucket is not refused again at once).
        first = self.rate(self.since) or RAMP_START
        self.next_at = max(self.next_at, self.since + 1.0 / first)

    def _end_measured(self) -> None:
        """Stop pacing by measurement: the refusals do not depend on the rate."""
        self.w_max, self.ramping = None, False
        self._below, self._above = [0, 0], [0, 0]

    def _at_most_served(self, w: float, now: float, served_rate: float, saturated: bool) -> float:
        """``w``, at most the rate the server served over the last second when that rate is its limit."""
        # Paced long enough that the last second's answers were all sent on the schedule, or every
        # one of them sent well above the rate served: the server served what it would, and a
        # little above it is enough to keep it busy (sending far above a bucket's rate only adds
        # refusals; a W left at 1.4 times a 1 s bucket's rate 1.2 s into pacing was refused all
        # the way back up, and the pacer took that for refusals whatever the rate, and stopped).
        if self._knows_served(now, served_rate, saturated):
            return min(w, _ABOVE_SERVED * served_rate)
        return w

    def _knows_served(self, now: float, served_rate: float, saturated: bool) -> bool:
        """True when the last second's served rate is what the server allows (see :meth:`_at_most_served`)."""
        return served_rate > 0 and (saturated or now - self.paced_since >= _SERVED_SPAN_S)

    def announce(self, announced: Announced, pending: int) -> None:
        """The server announced its limits; ``pending``: requests sent since the answer's request left."""
        self.announced = announced
        share = _RATE_SHARE[0]
        if announced.requests_remaining is not None:
            self.allowance = max(0.0, announced.requests_remaining * share - pending - 1.0)
        if announced.tokens_remaining is not None and self.tokens_per_request > 0:
            self.allowance = min(
                self.allowance,
                max(0.0, announced.tokens_remaining * share / self.tokens_per_request - pending - 1.0),
            )


@dataclass(frozen=True, slots=True)
class Ticket:
    """The right to one request in flight at ``endpoint``; give it back with :meth:`Gate.release`."""

    endpoint: Endpoint
    sent_at: float
    epoch: int
    in_flight: int
    probe: bool = False
    rate: float | None = None
    """The paced rate (requests/s) when it was sent; None: not paced."""
    seq: int = 0
    """Its number among the endpoint's requests (1 for the first)."""
    below: bool = False
    """Sent while the pacer climbed back to the rate refused last (below it)."""


class Endpoint:
    """One endpoint's limit, pause and circuit breaker (synchronous; :class:`Gate` waits on them).

    Args:
        name: the endpoint's URL (or the model spec when there is no URL), used in messages.
        cap: the limit's cap (None: :data:`DEFAULT_CAP`).
        adaptive: False keeps exactly ``cap`` in flight.
        window: seconds without any answer (with :data:`OPEN_AFTER` failures) that open the circuit.
        open_for: seconds the circuit stays open before a probe (doubles per failed probe, to 300).
        clock: monotonic clock (tests pass a fake one).
    """

    def __init__(
        self,
        name: str,
        cap: int | None = None,
        *,
        adaptive: bool = True,
        window: float = 10.0,
        open_for: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self.limit = AdaptiveLimit(cap, adaptive=adaptive)
        self.window = window
        self.open_for = open_for
        self.clock = clock
        self.in_flight = 0
        """Requests sent and not yet finished."""
        self.paused_until = 0.0
        """Monotonic time before which nothing is sent (Retry-After)."""
        self.throttled = 0
        """429/503 answers so far."""
        self.timeouts = 0
        """Requests that timed out so far."""
        self.answers = 0
        """Answers of any kind so far (errors included)."""
        self.sent_total = 0
        """Requests sent so far."""
        self._throttle_run = 0  # 429/503s in a row, with no answer between them
        self._first_sent_at: float | None = None
        self._refusals: deque[bool] = deque(maxlen=_SHARE_OF)  # the latest answers: refused or not
        self._recent: deque[bool] = deque(maxlen=_RECENT)  # the same, kept across cuts
        self._served_at: deque[tuple[float, float]] = deque()  # the last second's answers: when, sent rate
        self._send_times: deque[float] = deque()  # when the latest few seconds' requests left, in order
        self._send_base = 1  # the number of the first of them among the endpoint's requests
        self._refused_seqs: list[int] = []  # the numbers of the refused among them, in order
        self._refused_before = 0  # refused requests sent before them
        self._anchors: deque[list[float]] = deque()  # refusals: sent at, requests served up to it
        self._announce_seq = 0  # the newest request whose answer announced limits
        self._unanswered = 0  # requests failed without an answer since the last answer
        self._unanswered_since: float | None = None  # when the first of them was sent
        self._open_until: float | None = None
        self._open_count = 0
        self._probing = False
        self.reason: str | None = None
        """Why the circuit is open (None: closed)."""
        self.pacer = RatePacer()
        """The send schedule (inactive until a burst of 429/503s or an announced limit)."""

    # -- state ------------------------------------------------------------------------------
    def check(self) -> None:
        """Raise :class:`EndpointDown` if the circuit is open and no probe may go now.

        Raises:
            EndpointDown: the endpoint answered nothing for a while (``reason``).
        """
        if self.reason is None:
            return
        assert self._open_until is not None
        if self.clock() < self._open_until or self._probing:
            raise EndpointDown(self.reason, endpoint=self.name)

    @property
    def is_open(self) -> bool:
        """True while the circuit is open (a probe may be due)."""
        return self.reason is not None

    def pause_left(self) -> float:
        """Seconds until the endpoint takes a request again: a long Retry-After, then the pacer's schedule.

        A refused request waits this before it queues again, so a call refused until its deadline
        ends with ``RateLimited`` and the reason, not cancelled mid-wait.
        """
        now = self.clock()
        return max(0.0, self.paused_until - now, self.pacer.wait(now) if self.pacer.active else 0.0)

    def paced(self) -> bool:
        """True while requests leave on the pacer's schedule (a rate limit measured or announced)."""
        return self.pacer.scheduled(self.clock())

    def room(self) -> bool:
        """Whether a request may be sent now (not paused, circuit closed or probe due, under the limit)."""
        if self.reason is not None:
            assert self._open_until is not None
            return not self._probing and self.clock() >= self._open_until
        now = self.clock()
        if self.paused_until > now:
            return False
        if self.pacer.active and self.pacer.wait(now) > 0:
            return False
        if self._holding(now) > 0:
            return False
        return self.limit.room(self.in_flight)

    def _holding(self, now: float) -> float:
        """Seconds the initial window still holds further requests (0: it does not)."""
        if (
            self.answers
            or self._first_sent_at is None
            or self.in_flight < INITIAL_WINDOW
            or not self.limit.adaptive
        ):
            return 0.0
        return max(0.0, self._first_sent_at + INITIAL_HOLD_S - now)

    def wait_left(self) -> float:
        """Seconds until the pause ends and the pacer lets one request go (0: now)."""
        now = self.clock()
        return max(self.paused_until - now, self.pacer.wait(now), self._holding(now))

    def load(self) -> float:
        """In flight over the limit: routing prefers the endpoint with the most room."""
        limit = self.limit
        return self.in_flight / (limit.cap if limit.slow_start else limit.allowed)

    # -- events -----------------------------------------------------------------------------
    def take(self, tokens: float = 0.0) -> Ticket:
        """Count one request sent (call only when :meth:`room` is True).

        Args:
            tokens: about how many tokens it asks for (prompt and ``max_tokens``; 0: unknown),
                counted against a token rate the server announced.
        """
        self.in_flight += 1
        self.sent_total += 1
        probe = False
        if self.reason is not None:
            self._probing = probe = True
        now = self.clock()
        if self._first_sent_at is None:
            self._first_sent_at = now
        times = self._send_times
        times.append(now)
        while times[0] < now - _PROOF_AGE_S - 1.0:  # older than any refusal the rate shown uses
            times.popleft()
            self._send_base += 1
        rate = self.pacer.rate(now) if self.pacer.active else None
        if rate is not None and len(times) > _RATE_SENDS and times[-1 - _RATE_SENDS] >= now - 1.0:
            # The rate it actually left at: fewer requests than the schedule allows may be ready
            # (callers waiting their Retry-After), and a refusal says something of that rate only.
            # Measured over the latest gap (not a whole second, which lags a ramp's doubling); a
            # gap longer than a second (an idle endpoint) says nothing of it.
            rate = min(rate, _RATE_SENDS / max(now - times[-1 - _RATE_SENDS], 1e-6))
        below = self.pacer.climbing(now)
        self.pacer.take(now, tokens)
        epoch = self.limit.sent(self.in_flight)
        return Ticket(self, now, epoch, self.in_flight, probe, rate, self.sent_total, below)

    def finish(
        self,
        ticket: Ticket,
        outcome: Outcome,
        retry_after: float | None = None,
        announced: Announced | None = None,
    ) -> None:
        """Count a request finished with ``outcome``.

        Args:
            ticket: the request's ticket.
            outcome: how it ended.
            retry_after: the server's ``Retry-After`` on a 429/503, seconds.
            announced: the limits the answer's headers announced (:func:`announced_limits`).
        """
        self.in_flight -= 1
        now = self.clock()
        if announced is not None and ticket.seq >= self._announce_seq:
            self._announce_seq = ticket.seq  # an older answer's numbers are staler than this one's
            self.pacer.announce(announced, self.sent_total - ticket.seq)
        if ticket.probe:
            self._probing = False
        if outcome is Outcome.CANCELLED:
            return
        if outcome in (Outcome.TIMEOUT, Outcome.UNREACHABLE):
            if outcome is Outcome.TIMEOUT:
                self.timeouts += 1
                self.limit.dropped(ticket.epoch)
            self._failed(ticket, now)
            return
        self.answers += 1
        self._unanswered = 0
        self._unanswered_since = None
        if self.reason is not None:  # any answer closes the circuit
            self.reason = self._open_until = None
            self._open_count = 0
        if outcome is Outcome.THROTTLE:
            self._throttled(ticket, now, retry_after)
            return
        self._throttle_run = 0
        self._refusals.append(False)
        self._recent.append(False)
        if ticket.sent_at >= self.pacer.cut_at:
            self.pacer.answered(ticket.below, refused=False)
        self._served_at.append((now, ticket.rate or 0.0))
        self._prune_served(now)
        if ticket.sent_at >= self.pacer.cut_at:
            self.pacer.cuts_in_row = 0  # the rate after the last cut is served
        if outcome is Outcome.ANSWER:
            self.limit.answered(now - ticket.sent_at, ticket.epoch, ticket.in_flight)

    def _prune_served(self, now: float) -> deque[tuple[float, float]]:
        """The answers of the last second (when, the rate each left at), older ones dropped."""
        served = self._served_at
        while served and served[0][0] < now - 1.0:
            served.popleft()
        return served

    def _throttled(self, ticket: Ticket, now: float, retry_after: float | None) -> None:
        """A 429/503: pace, never pause the endpoint and release everyone at once (module docstring)."""
        self.throttled += 1
        self._throttle_run += 1
        # A rate limit is the pacer's to answer: cutting the concurrency limit as well left one
        # request in flight against a limiter with little burst (issue 34: 26.6 s for a 10 s job).
        self.limit.leave_slow_start()
        # Retry-After counts whole seconds: "1" says a slot frees within the second, which the
        # schedule already spaces requests for. A longer one is a pause the server asks for.
        pause = retry_after if retry_after is not None and retry_after > 1.0 else 0.0
        if pause:
            self.paused_until = max(self.paused_until, now + pause)
        # A rate limit refuses every request beyond it, so its refusals are a large share of the
        # answers, or come in a row; a server refusing a request now and then is not paced.
        self._refusals.append(True)
        self._recent.append(True)
        pacer = self.pacer
        if ticket.sent_at >= pacer.cut_at:
            pacer.answered(ticket.below, refused=True)
        # Heavy: a quarter of the latest answers refused, beyond what the server refuses whatever
        # the rate (measured when pacing found the refusals did not depend on the rate).
        share = sum(self._refusals) / _SHARE_OF
        # Or refused several times in a row with nothing served between (with many in flight, a
        # few in a row happen by chance at a server that refuses a share of all requests: a
        # refusal comes back before the answers sent with it, so a burst of 32 to a server
        # refusing 20% at random is refused 6 times in a row on average).
        run = max(3.0, self.in_flight * (_HEAVY_SHARE + pacer.random_share))
        heavy = share >= _HEAVY_SHARE + pacer.random_share or self._throttle_run >= run
        shown = self._shown_rate(ticket)
        if heavy or pacer.active:
            served = self._prune_served(now)
            cut_at = pacer.cut_at
            # Saturated: every answer of the last second left well above the rate served (a tenth
            # above: a limiter with no burst refuses a few early arrivals below its limit).
            saturated = bool(served) and min(rate for _, rate in served) >= _SATURATED * len(served)
            pacer.refused(
                now,
                ticket.sent_at,
                ticket.rate,
                pause,
                heavy=heavy,
                served_rate=len(served),
                saturated=saturated,
                shown_rate=shown,
                refused_share=sum(self._recent) / len(self._recent),
            )
            if pacer.cut_at != cut_at:
                self._refusals.clear()  # only the answers at the new rate tell about it

    def _shown_rate(self, ticket: Ticket) -> float:
        """Requests/s the server is shown to allow, at the refusal of ``ticket`` (and record the refusal).

        A refusal says the server's bucket was empty when the refused request came. Between two
        refusals the bucket gained the limit's rate times the time between them, and gave a
        request to each one served: so the limit is at least the requests served between them,
        less one (the fraction the bucket may have held), over that time. This holds for a
        bucket of any depth and for a limiter with no burst alike; the best of the refusals of
        the last :data:`_PROOF_AGE_S` seconds at least :data:`_PROOF_SPAN_S` before this one.
        A request sent before the refused one and not refused by now counts as served: its
        refusal would have come back by now, as this one's did.

        Requests sent within :data:`_REORDER_S` of each other may reach the server in either
        order (a burst let go at once, connections opened for it, network jitter): at the earlier
        refusal they count as served before it, at the later one as not. Counted in the order of
        sending, the first burst to a 1 s bucket of 50 "showed" it allowed 115 requests/s, pacing
        ended as if the server refused at random, and the bursts that followed were refused 892
        times for 500 served (3% of fake-clock runs with 1.5 ms of jitter).
        """
        refused = self._refused_seqs
        bisect.insort(refused, ticket.seq)
        old = bisect.bisect_left(refused, self._send_base - 1)  # sent before the kept sends
        if old:
            self._refused_before += old
            del refused[:old]
        anchors = self._anchors
        while anchors and anchors[0][0] < ticket.sent_at - _PROOF_AGE_S:
            anchors.popleft()
        served_to = self._served_by(ticket.sent_at - _REORDER_S)
        best = 0.0
        for anchor in anchors:
            at = anchor[0]
            span = ticket.sent_at - at
            if span < _PROOF_SPAN_S:
                break  # in order of sending: the rest are closer still
            if len(anchor) == 1:  # counted once, a second on: its neighbours' refusals are back
                anchor.append(self._served_by(at + _REORDER_S))
            best = max(best, (served_to - anchor[1] - 1) / span)
        if not anchors or ticket.sent_at - anchors[-1][0] >= _PROOF_BIN_S:
            anchors.append([ticket.sent_at])
        return best

    def _served_by(self, when: float) -> int:
        """Requests sent by ``when`` (within the last few seconds) and not refused so far."""
        sent = self._send_base - 1 + bisect.bisect_right(self._send_times, when)
        return sent - self._refused_before - bisect.bisect_right(self._refused_seqs, sent)

    def _failed(self, ticket: Ticket, now: float) -> None:
        self._unanswered += 1
        if self.reason is not None and not ticket.probe:
            return  # open already: requests sent before it opened end as they may
        if self._unanswered_since is None or ticket.sent_at < self._unanswered_since:
            self._unanswered_since = ticket.sent_at
        quiet = now - self._unanswered_since
        if ticket.probe or (self._unanswered >= OPEN_AFTER and quiet >= self.window):
            self._open_count += 1
            pause = min(300.0, self.open_for * 2 ** (self._open_count - 1))
            self._open_until = now + pause
            within = f"{quiet:.1f}" if quiet < 10 else f"{quiet:.0f}"
            self.reason = (
                f"endpoint {self.name} answered none of {self._unanswered} requests within "
                f"{within} s; not sending to it for {pause:g} s"
            )

    def snapshot(self) -> dict[str, object]:
        """Counters for progress displays and the run record."""
        return {
            "endpoint": self.name,
            "in_flight": self.in_flight,
            "limit": self.limit.allowed,
            "limit_low": self.limit.low if self.limit.low is not None else self.limit.allowed,
            "limit_high": self.limit.high,
            "sent": self.sent_total,
            "throttled": self.throttled,
            "timeouts": self.timeouts,
            "open": self.reason,
            "paced": _rounded(self.pacer.rate(self.clock())),
            "announced": self.pacer.announced.describe() if self.pacer.announced is not None else None,
        }


def _rounded(rate: float | None) -> float | None:
    return None if rate is None else round(rate, 1)


class Gate:
    """Hands out requests over one or more endpoints, each within its limit.

    :meth:`acquire` picks the endpoint with the most room (least in flight for its limit;
    ties rotate), or waits until one has room: a request finishes, a pause ends. When every
    endpoint's circuit is open it raises at once, and so do the requests already waiting.

    Args:
        endpoints: the endpoints (one for a plain backend; one per replica).
    """

    def __init__(self, endpoints: Sequence[Endpoint]) -> None:
        self.endpoints = list(endpoints)
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._turn = 0

    def _pick(self, exclude: frozenset[Endpoint] | set[Endpoint]) -> Endpoint | None:
        best: Endpoint | None = None
        n = len(self.endpoints)
        if n == 1:
            only = self.endpoints[0]
            return only if only not in exclude and only.room() else None
        self._turn = (self._turn + 1) % n
        best_key: tuple[float, int] | None = None
        for i, ep in enumerate(self.endpoints):
            if ep in exclude or not ep.room():
                continue
            key = (ep.load(), (i - self._turn) % n)
            if best_key is None or key < best_key:
                best, best_key = ep, key
        return best

    def _usable(self, exclude: frozenset[Endpoint] | set[Endpoint]) -> list[Endpoint]:
        """Endpoints not excluded whose circuit lets requests through now or after a probe."""
        usable = []
        for ep in self.endpoints:
            if ep in exclude:
                continue
            try:
                ep.check()
            except EndpointDown:
                continue
            usable.append(ep)
        return usable

    def try_acquire(
        self, exclude: frozenset[Endpoint] | set[Endpoint] = frozenset(), tokens: float = 0.0
    ) -> Ticket | None:
        """A ticket if an endpoint has room now and nobody waits, else None (no await: the fast path).

        ``tokens``: about how many tokens the request asks for (:meth:`Endpoint.take`).
        """
        if self._waiters:
            return None
        ep = self._pick(exclude)
        return ep.take(tokens) if ep is not None else None

    async def acquire(
        self, exclude: frozenset[Endpoint] | set[Endpoint] = frozenset(), tokens: float = 0.0
    ) -> Ticket:
        """Wait for room at an endpoint not in ``exclude`` and take it.

        ``tokens``: about how many tokens the request asks for (:meth:`Endpoint.take`).

        Raises:
            EndpointDown: every (not excluded) endpoint's circuit is open; the message names why.
            LookupError: ``exclude`` leaves no endpoint.
        """
        ticket = self.try_acquire(exclude, tokens)
        if ticket is not None:
            return ticket
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # a fresh event loop (run_sync): waiters of an old one are gone
            self._loop, self._waiters, self._timer = loop, deque(), None
        queued = bool(self._waiters)  # others wait already: queue behind them first
        while True:
            if all(ep in exclude for ep in self.endpoints):
                raise LookupError("no endpoint left to try")
            usable = self._usable(exclude)
            if not usable:
                down = next(ep for ep in self.endpoints if ep not in exclude)
                raise EndpointDown(down.reason or f"endpoint {down.name} is down", endpoint=down.name)
            if not queued:
                ep = self._pick(exclude)
                if ep is not None:
                    ticket = ep.take(tokens)
                    if self._waiters and ep.pacer.active:
                        if ep.room():
                            self._wake(1)  # the next may go at once (the announced bucket has room)
                        else:
                            self._arm_timer(usable)  # the next paced send
                    return ticket
            queued = False
            self._arm_timer(usable)
            waiter = loop.create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():
                    self._wake(1)  # pass the wake-up on
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)
                raise

    def _arm_timer(self, usable: list[Endpoint]) -> None:
        """Wake the waiters when the earliest pause or circuit-open period ends."""
        if self._loop is None:
            return
        waits = [w for w in (ep.wait_left() for ep in usable) if w > 0]
        for ep in usable:
            if ep.is_open and ep._open_until is not None:
                waits.append(max(0.0, ep._open_until - ep.clock()))
        if not waits:
            return
        at = self._loop.time() + min(waits) + 0.001
        if self._timer is not None and not self._timer.cancelled() and self._timer.when() <= at:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._loop.call_at(at, self._timer_fired)

    def _timer_fired(self) -> None:
        self._timer = None
        if all(ep.pacer.active and ep.pause_left() == 0 for ep in self.endpoints):
            self._wake(1)  # a paced send is due: one goes, the next arms the timer again
        else:
            self._wake(len(self._waiters))

    def _wake(self, n: int) -> None:
        while n > 0 and self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                n -= 1

    def release(
        self,
        ticket: Ticket,
        outcome: Outcome,
        retry_after: float | None = None,
        announced: Announced | None = None,
    ) -> None:
        """Give a ticket back with how its request ended; wakes waiters that may now proceed.

        ``retry_after`` and ``announced`` are what the answer's headers said
        (``Retry-After`` in seconds; :func:`announced_limits`).
        """
        ep = ticket.endpoint
        was_open = ep.is_open
        first = ep.answers == 0
        ep.finish(ticket, outcome, retry_after, announced)
        if not self._waiters:
            return
        if ep.is_open and not was_open:
            self._wake(len(self._waiters))  # they fail at once (or go to another endpoint)
        elif first and ep.answers:
            self._wake(len(self._waiters))  # the initial window's first answer: the rest may go
        elif outcome is Outcome.THROTTLE:
            self._wake(len(self._waiters))  # they re-check and wait for the pause's timer
        elif self._timer is not None and len(self.endpoints) == 1 and ep.paced():
            # The next paced send is the timer's: one woken here, just after its slot, would leave
            # 1-2 ms before a send the timer wakes, a gap too short for a limiter with no burst.
            # (One endpoint only: replicas, each on a schedule of its own, were not measured so.)
            return
        else:
            self._wake(max(1, ep.limit.allowed - ep.in_flight))

    def pause_left(self) -> float:
        """Seconds until some endpoint takes requests again (0: one does now or none is paused)."""
        lefts = [ep.pause_left() for ep in self.endpoints if not ep.is_open]
        return min(lefts) if lefts else 0.0

    def paced(self) -> bool:
        """True while every endpoint that may take a request sends on its pacer's schedule."""
        usable = [ep for ep in self.endpoints if not ep.is_open]
        return bool(usable) and all(ep.paced() for ep in usable)

    def snapshot(self) -> list[dict[str, object]]:
        """Each endpoint's counters (:meth:`Endpoint.snapshot`)."""
        return [ep.snapshot() for ep in self.endpoints]


_SHARED: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[str, ...], Gate]] = (
    weakref.WeakKeyDictionary()
)


def throttle_wait_s(
    retry_after_s: float | None, *, paced: bool, pause_left_s: float, max_delay_s: float = math.inf
) -> float:
    """Seconds a request refused with a 429/503 waits before it queues again for its endpoint.

    It waits its own ``Retry-After`` (at most ``max_delay_s``) and the endpoint's pause
    (``pause_left_s``: a longer Retry-After, then the pacer's next slot). Paced, a Retry-After of
    a second or less is not waited: the server sees the schedule's rate whichever request fills
    a slot, and "1" says a slot frees within the second, so the refused request queues for the
    next one (waiting the second out left a run's end waiting on its last refusal).
    """
    own = retry_after_s or 0.0
    if own <= 1.0 and paced:
        own = 0.0
    return max(pause_left_s, min(own, max_delay_s))


def shared_gate(urls: Sequence[str], build: Callable[[], Gate]) -> Gate:
    """The running event loop's gate for the endpoints ``urls``, built by ``build`` the first time.

    Every model object that sends to the same endpoints (two ``openai:`` models served by one
    vLLM, an SDK client and the aiohttp one, several debaters on ``anthropic:``) shares one gate,
    so their requests count in one limit and one Retry-After pauses them all. One per event
    loop, as asyncio objects belong to one loop.
    """
    loop = asyncio.get_running_loop()
    gates = _SHARED.get(loop)
    if gates is None:
        gates = _SHARED[loop] = {}
    key = tuple(urls)
    gate = gates.get(key)
    if gate is None:
        gate = gates[key] = build()
    return gate
