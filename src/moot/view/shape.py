"""Shape stored runs into what the viewer's templates show (pure data; no HTML here).

Templates escape every value they print (Jinja2 autoescape), so model output
reaches the page as text, whatever it contains.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ..app.records import absa_events, bench_records, bench_run, protocol_of, run_turns
from ..bench.records import ItemRecord
from ..errors import error_text
from ..runs import RunRecord, RunStore
from ..transcript import DebateResult, Persona, RequestRecord, Turn

__all__ = [
    "AbsaAspectRow",
    "AbsaPartial",
    "BENCH_SHOWS",
    "BenchFilter",
    "BenchItemRow",
    "DebateView",
    "Segment",
    "absa_aspect_rows",
    "absa_partial",
    "attach_requests",
    "bench_items",
    "failed_units",
    "filter_bench_items",
    "debate_view",
    "highlight",
    "protocol_of",
    "shared_messages",
    "shared_system_prompts",
    "turn_error",
    "turn_key",
]


def turn_key(turn: Turn) -> str:
    """Which turn of a debate: ``round|speaker|phase`` (a turn's requests are filed under it)."""
    return f"{turn.round}|{turn.speaker}|{turn.phase}"


def _sent(turn: Turn) -> list[Any]:
    """The messages the turn's model was sent, when the record kept them."""
    found = getattr(turn, "sent", None)
    return list(found) if found else []


def _shared_prompts(turns: list[Turn]) -> dict[str, int]:
    """System prompts sent to two turns or more, numbered in the order first sent."""
    seen: dict[str, int] = {}
    for t in turns:
        for m in _sent(t):
            if m.role == "system":
                seen[m.content] = seen.get(m.content, 0) + 1
    shared = [text for text, n in seen.items() if n > 1]
    return {text: i for i, text in enumerate(shared, 1)}


def attach_requests(
    view: DebateView, store: RunStore, record: RunRecord, debate_id: str | None = None
) -> None:
    """File the run's ``model_request`` events (one debate's, if ``debate_id``) under each turn."""
    for event in store.events(record.id):
        data = event.data
        if event.kind != "model_request" or not isinstance(data.get("request"), dict):
            continue
        if debate_id is not None and data.get("debate_id") not in (None, debate_id):
            continue
        key = f"{data.get('round', 0)}|{data.get('speaker', '')}|{data.get('phase') or 'turn'}"
        view.requests.setdefault(key, []).append(RequestRecord.model_validate(data["request"]))


def turn_error(turn: Turn, shown_above: str | None = None) -> str:
    """A failed turn's error as one line, its kind named once (``cancelled: ...``, never twice).

    A turn cancelled because the debate stopped names the reason only when it is not already
    on the page (``shown_above``: the fallback or run error shown at the top).
    """
    text = turn.error or ""
    if turn.cancelled and shown_above:
        for reason in re.findall(r"\((.*)\) before this turn finished", text):
            if reason in shown_above or reason.split(": ", 1)[-1] in shown_above:
                text = text.replace(f"({reason})", "(see above)")
    return error_text(turn.error_kind or "error", text)


@dataclass
class RoundRow:
    """One round of the timeline: a lane (list of turns) per speaker, and the moderator's turn."""

    number: int
    lanes: dict[str, list[Turn]]
    moderator: Turn | None = None


@dataclass
class DebateView:
    """A debate as the timeline shows it, from its result or (while it runs) from its events."""

    topic: str
    protocol: str
    speakers: list[Persona]
    rounds: list[RoundRow]
    verdict: Turn | None = None
    result: DebateResult | None = None
    debate_id: str = ""
    fallback: str | None = None
    calls: int = 0
    cached: int = 0
    tokens: int = 0
    failed: int = 0
    cancelled: int = 0
    repaired: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    requests: dict[str, list[RequestRecord]] = field(default_factory=dict)
    """Each turn's model requests (first, repair; retries inside), by :func:`turn_key`."""
    shared_prompts: dict[str, int] = field(default_factory=dict)
    """System prompts sent to more than one turn, shown once above the timeline: text -> number."""
    error_above: str | None = None
    """The run's error, shown at the top of its page: the fallback banner is left out when it says
    the same, and a cancelled turn does not repeat it."""

    @property
    def fallback_banner(self) -> bool:
        """Whether the fallback needs its own banner (it is not the run error already shown)."""
        if not self.fallback:
            return False
        cause = self.fallback.split(": ", 1)[-1]
        return not (self.error_above and cause in self.error_above)

    @property
    def shown_above(self) -> str:
        """What the page already says at the top: the fallback and the run's error."""
        return " | ".join(x for x in (self.fallback, self.error_above) if x)


def _speakers(personas: list[Persona], turns: list[Turn]) -> list[Persona]:
    out = [p for p in personas if any(t.speaker == p.key and t.phase == "turn" for t in turns)]
    known = {p.key for p in out}
    for t in turns:
        if t.phase == "turn" and t.speaker not in known:
            out.append(Persona(key=t.speaker, name=t.speaker, stance=t.stance))
            known.add(t.speaker)
    return out


def shared_system_prompts(messages: list[list[Any]]) -> dict[str, int]:
    """System prompts sent in two requests or more, numbered in the order first sent.

    ``messages`` holds each request's messages; a shared prompt is shown once above the
    requests and referred to in each.
    """
    seen: dict[str, int] = {}
    for sent in messages:
        for m in {m.content for m in sent if m.role == "system"}:
            seen[m] = seen.get(m, 0) + 1
    order: list[str] = []
    for sent in messages:
        for m in sent:
            if m.role == "system" and seen[m.content] > 1 and m.content not in order:
                order.append(m.content)
    return {text: i for i, text in enumerate(order, 1)}


def debate_view(result: DebateResult | None, turns: list[Turn] | None = None, topic: str = "") -> DebateView:
    """The timeline of a finished debate (``result``) or of one in progress (its ``turns`` so far)."""
    if result is not None:
        turns = result.turns(include_judge=True)
    turns = turns or []
    personas = result.personas if result is not None else []
    speakers = _speakers(personas, turns)
    rounds: dict[int, RoundRow] = {}
    verdict: Turn | None = None
    for t in turns:
        if t.phase == "judge":
            verdict = t
            continue
        row = rounds.setdefault(t.round, RoundRow(t.round, {p.key: [] for p in speakers}))
        if t.phase == "moderator":
            row.moderator = t
        else:
            row.lanes.setdefault(t.speaker, []).append(t)
    view = DebateView(
        topic=result.topic if result is not None else topic,
        protocol=result.protocol if result is not None else "",
        speakers=speakers,
        rounds=[rounds[k] for k in sorted(rounds)],
        verdict=verdict,
        result=result,
        fallback=result.fallback if result is not None else None,
    )
    view.shared_prompts = _shared_prompts(turns)
    for t in turns:
        view.calls += t.usage.calls
        view.cached += t.usage.cached
        view.tokens += t.usage.total_tokens
        view.cancelled += t.cancelled
        view.failed += (not t.ok) and not t.cancelled
        view.repaired += t.repaired
    return view


def live_debate(store: RunStore, record: RunRecord) -> DebateView:
    """The timeline of a ``moot run`` record: from its result, else from the turns recorded so far."""
    from ..app.records import load_result

    result = load_result(store, record.id)
    if isinstance(result, DebateResult):
        view = debate_view(result)
        view.error_above = record.error
        attach_requests(view, store, record)
        return view
    turns = [t for _, t in run_turns(store, record)]
    view = debate_view(None, turns, topic=record.title)
    for event in store.events(record.id):
        outcome = event.data.get("outcome") or {}
        if event.kind == "debate_completed" and outcome.get("fallback"):
            view.fallback = outcome["fallback"]
    view.protocol = str(record.config.get("protocol", {}).get("name", ""))
    view.error_above = record.error
    attach_requests(view, store, record)
    return view


@dataclass(frozen=True)
class Segment:
    """A piece of a sentence; ``mark`` is the aspect it belongs to (None for plain text)."""

    text: str
    mark: str | None = None
    polarity: str | None = None


def highlight(sentence: str, spans: list[tuple[int, int, str, str | None]]) -> list[Segment]:
    """Cut ``sentence`` into plain and highlighted segments; ``spans`` are ``(start, end, aspect, polarity)``.

    Overlapping or out-of-range spans are skipped (the first in start order wins).
    """
    out: list[Segment] = []
    pos = 0
    for start, end, aspect, polarity in sorted(spans):
        if start < pos or end > len(sentence) or start >= end:
            continue
        if start > pos:
            out.append(Segment(sentence[pos:start]))
        out.append(Segment(sentence[start:end], aspect, polarity))
        pos = end
    if pos < len(sentence):
        out.append(Segment(sentence[pos:]))
    return out


@dataclass
class AbsaAspectRow:
    """One aspect across the pipeline: Stage 1, the debate's view, Stage 2 and the final label."""

    aspect: str
    stage1: str = "-"
    debate: str = "-"
    stage2: str = "-"
    final: str = "-"
    confidence: float | None = None
    overridden: bool = False


def absa_aspect_rows(result: Any) -> list[AbsaAspectRow]:
    """Per-aspect polarity at each stage of an ABSA :class:`~moot.absa.FinalResult`."""
    rows: dict[str, AbsaAspectRow] = {}

    def row(name: str) -> AbsaAspectRow:
        key = name.strip().lower()
        return rows.setdefault(key, AbsaAspectRow(name))

    for s in result.stage1.sentiments:
        row(s.aspect).stage1 = s.polarity
    context = result.review_context
    if context is not None:
        for aspect, hints in context.aspect_hints.items():
            labels = sorted({str(h.get("polarity_hint") or h.get("polarity") or "") for h in hints} - {""})
            if labels:
                row(aspect).debate = "/".join(labels)
    verdict = result.debate.verdict if result.debate is not None else None
    if verdict is not None and verdict.ok:
        for t in verdict.get("final_tuples") or []:
            if isinstance(t, dict) and t.get("aspect_ref"):
                row(str(t["aspect_ref"])).debate = str(t.get("polarity", "-"))
    for s in result.stage2.sentiments:
        r = row(s.aspect)
        r.stage2 = s.polarity
        r.overridden = s.source not in ("stage1", "")
    for a in result.aspects:
        r = row(str(a.get("aspect", "")))
        r.final = str(a.get("polarity", "-"))
        conf = a.get("confidence")
        r.confidence = float(conf) if isinstance(conf, int | float) else None
    return list(rows.values())


def absa_spans(result: Any) -> list[Segment]:
    """The sentence with the final aspects' spans (else Stage 1's) highlighted."""
    spans = [
        (int(a["start"]), int(a["end"]), str(a.get("aspect", "")), a.get("polarity"))
        for a in result.aspects
        if isinstance(a.get("start"), int) and isinstance(a.get("end"), int)
    ]
    if not spans:
        spans = [(a.start, a.end, a.term, None) for a in result.stage1.aspects]
    return highlight(result.sentence, spans)


@dataclass
class AbsaPartial:
    """A one-sentence ABSA run without a result (running, or killed): what its events say so far."""

    sentence: str
    steps: list[Any] = field(default_factory=list)
    """The completed steps (:class:`~moot.absa.schemas.TraceStep`), in order."""
    running: list[str] = field(default_factory=list)
    """Steps started and not finished: where the run is, or where it stopped."""
    stage1: Any = None
    review_context: Any = None
    stage2: Any = None
    segments: list[Segment] = field(default_factory=list)
    debate: DebateView | None = None


def absa_partial(store: RunStore, record: RunRecord) -> AbsaPartial:
    """Rebuild an unfinished ``absa`` run from its recorded steps, stage outputs and debate turns."""
    sentence = str(record.config.get("sentence") or record.title)
    out = AbsaPartial(sentence)
    for event in absa_events(store, record.id):
        if event.kind == "step_started":
            out.running.append(event.name)
        elif event.kind == "step_completed" and event.step is not None:
            out.steps.append(event.step)
            if event.name in out.running:
                out.running.remove(event.name)
        elif event.name in ("stage1", "review_context", "stage2"):
            setattr(out, event.name, getattr(event, event.name))
    if out.stage1 is not None:
        polarity = {s.aspect: s.polarity for s in out.stage1.sentiments}
        spans = [(a.start, a.end, a.term, polarity.get(a.term)) for a in out.stage1.aspects]
        out.segments = highlight(sentence, spans)
    else:
        out.segments = [Segment(sentence)]
    turns = [t for _, t in run_turns(store, record)]
    if turns:
        out.debate = debate_view(None, turns, topic=sentence)
    return out


@dataclass
class BenchItemRow:
    """One item of a bench run: its gold answer and each method's record."""

    item_id: str
    gold: str
    records: dict[str, ItemRecord]
    flips: set[str] = field(default_factory=set)
    """Methods in which some agent went from right to wrong between rounds on this item."""


def _right_to_wrong(record: ItemRecord) -> bool:
    for before, after in zip(record.rounds, record.rounds[1:], strict=False):
        right = {a.agent for a in before if a.correct}
        if any(a.agent in right and not a.correct for a in after):
            return True
    return False


def bench_items(store: RunStore, run_id: str) -> list[BenchItemRow]:
    """Every item of a bench run with each method's record and its right→wrong flips."""
    rows: dict[str, BenchItemRow] = {}
    for r in bench_records(store, run_id):
        row = rows.setdefault(r.item_id, BenchItemRow(r.item_id, r.gold, {}))
        row.records[r.method] = r
        if _right_to_wrong(r):
            row.flips.add(r.method)
    return list(rows.values())


def shared_messages(record: ItemRecord) -> dict[int, int]:
    """A bench unit's opening prompts sent to two answers or more, shown once above its agents.

    An opening prompt is a system message, or the first message an answer was sent (round 0's
    question, which every agent of a vote or society is sent). Returns ``{index in
    record.messages: number}``, numbered in the order first sent. Later messages (replies,
    the peers' answers) stay in each agent's transcript, even when two agents were sent the same.
    """
    uses: dict[int, int] = {}
    opening: set[int] = set()
    for answers in record.rounds:
        for answer in answers:
            sent = answer.sent or []
            opening.update(sent[:1])
            for i in set(sent):
                uses[i] = uses.get(i, 0) + 1
    shared = [
        i
        for i in sorted(uses)
        if uses[i] > 1 and i < len(record.messages) and (i in opening or record.messages[i].role == "system")
    ]
    return {i: n for n, i in enumerate(shared, 1)}


def bench_report(store: RunStore, run_id: str) -> Any:
    """The bench report (:class:`~moot.bench.report.Report`) rebuilt from the stored units."""
    from ..bench.report import build_report

    return build_report(bench_run(store, run_id))


BENCH_SHOWS = {
    "": "every item",
    "parse_failure": "a parse failure",
    "fell_back": "a debate that fell back",
    "failed": "a failed unit",
    "flip": "a right→wrong flip",
    "disagree": "methods that disagree",
}
"""The bench run page's ``show=`` filter: its values and what each keeps."""


@dataclass(frozen=True)
class BenchFilter:
    """Which items of a bench run to show (from the page's URL: ``?right=M&wrong=M&show=...``)."""

    right: str = ""
    """Keep the items this method got right."""
    wrong: str = ""
    """Keep the items this method got wrong (a parse failure is wrong)."""
    show: str = ""
    """A key of :data:`BENCH_SHOWS`: keep the items where some method had it."""

    @property
    def active(self) -> bool:
        """True when it filters anything."""
        return bool(self.right or self.wrong or self.show)


def _fell_back(record: ItemRecord) -> bool:
    if getattr(record, "fallback", None):
        return True
    return bool(record.note and record.note.startswith("fallback"))


def failed_units(store: RunStore, run_id: str) -> dict[str, dict[str, str]]:
    """``{item: {method: error}}``: the bench units that failed (recorded as ``unit_failed`` events)."""
    out: dict[str, dict[str, str]] = {}
    for event in store.events(run_id):
        if event.kind == "unit_failed":
            data = event.data
            out.setdefault(str(data.get("item_id")), {})[str(data.get("method"))] = str(data.get("error"))
    return out


def filter_bench_items(
    rows: list[BenchItemRow], flt: BenchFilter, failed: dict[str, dict[str, str]]
) -> list[BenchItemRow]:
    """The rows ``flt`` keeps; ``failed`` is ``{item: {method: error}}`` of the units that failed."""

    def keep(row: BenchItemRow) -> bool:
        recs = list(row.records.values())
        if flt.right and not (flt.right in row.records and row.records[flt.right].correct):
            return False
        if flt.wrong and not (flt.wrong in row.records and not row.records[flt.wrong].correct):
            return False
        if flt.show == "parse_failure":
            return any(r.parse_failed for r in recs)
        if flt.show == "fell_back":
            return any(_fell_back(r) for r in recs)
        if flt.show == "failed":
            return row.item_id in failed
        if flt.show == "flip":
            return bool(row.flips)
        if flt.show == "disagree":
            return len({r.correct for r in recs}) > 1
        return flt.show == ""

    return [row for row in rows if keep(row)]
