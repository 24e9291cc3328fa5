"""The ``moot view`` web app: FastAPI routes over a run store, Jinja2 pages, a JSON API and live updates.

Pages (HTML) and the API (JSON, under ``/api/``, documented at ``/docs``) read
the same store. A page of a run in progress listens to
``/api/runs/{id}/stream`` (server-sent events) and reloads its body when the
store has more. Nothing is fetched from outside: the CSS and JavaScript are
files of this package.

Safety: templates autoescape everything (model output is shown as text); the
app only reads, except ``DELETE /api/runs/{id}``, which needs the
``X-Moot-Confirm`` header to repeat the full run id (a custom header, so no
other site can send it without a CORS preflight this app never grants). With a
token, every request must carry it (``?token=``, which sets a cookie,
``Authorization: Bearer``, or the cookie); bound to loopback, requests must
name a loopback host (DNS-rebinding guard).
"""

from __future__ import annotations

import asyncio
import hmac
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from importlib import resources
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlencode

from fastapi import FastAPI, HTTPException, Request, Response
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, StreamingResponse
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from starlette.middleware.trustedhost import TrustedHostMiddleware

import moot.view.shape as shape

from ..app.compare import as_json, compare_runs
from ..app.records import list_row, load_result, read_store, runs_page
from ..errors import UsageError
from ..runs import DamagedRecord, RunRecord, RunStore

__all__ = ["LOOPBACK", "create_app"]

LOOPBACK = ("127.0.0.1", "localhost", "::1")
_COOKIE = "moot_token"
_KINDS = ("run", "absa", "absa-eval", "arbitrate", "bench")
_STATUSES = ("running", "complete", "fell_back", "skipped", "failed", "interrupted")


def _package_dir(name: str) -> Path:
    return Path(str(resources.files("moot.view").joinpath(name)))


def _templates() -> Jinja2Templates:
    templates = Jinja2Templates(directory=str(_package_dir("templates")))
    env = templates.env
    env.autoescape = True  # every template, whatever its name: model output is text
    env.filters["pct"] = lambda x: "-" if x is None else f"{100 * x:.1f}%"
    env.filters["num"] = lambda x, d=2: "-" if x is None else f"{x:.{d}f}"
    env.filters["short"] = lambda s: s[:8]
    env.filters["tojson_pretty"] = lambda x: json.dumps(x, ensure_ascii=False, indent=2, default=str)
    env.globals["when"] = _when
    env.globals["turn_error"] = shape.turn_error
    env.globals["turn_key"] = shape.turn_key
    env.globals["shared_messages"] = shape.shared_messages
    return templates


def _when(ts: float | None) -> str:
    import datetime as dt

    return "-" if ts is None else dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


def _token_guard(
    token: str,
) -> Callable[[Request, Callable[[Request], Awaitable[Response]]], Awaitable[Response]]:
    async def guard(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        given = request.query_params.get("token")
        auth = request.headers.get("authorization", "")
        candidates = [
            given,
            auth.removeprefix("Bearer ").strip() if auth else None,
            request.cookies.get(_COOKIE),
        ]
        if not any(c and hmac.compare_digest(c, token) for c in candidates):
            return JSONResponse({"detail": "a valid token is required (?token=...)"}, status_code=401)
        response = await call_next(request)
        if given:  # the browser keeps it, so links, fetches and the event stream carry it
            response.set_cookie(_COOKIE, token, httponly=True, samesite="strict")
        return response

    return guard


def create_app(store_path: str | Path, *, token: str | None = None, host: str = "127.0.0.1") -> FastAPI:
    """The viewer app for the store at ``store_path``.

    Args:
        store_path: the SQLite run store (must exist).
        token: if set, every request must carry it.
        host: the address the server binds; on loopback, requests must name a loopback host.

    A file that is not a moot store, or a damaged one, gets an app whose every page says so
    (HTTP 503, the path and the reason; JSON under ``/api``), never a 500; the file is not touched.

    Raises:
        UsageError: no store at ``store_path``.
    """
    if not Path(store_path).is_file():
        raise UsageError(f"no run store at {store_path}")
    try:
        store = read_store(store_path)  # the application layer opens the store
    except UsageError as exc:
        return _store_error_app(str(exc), token=token, host=host)
    app = FastAPI(
        title="moot view",
        description="Runs recorded by moot: the JSON API the pages use.",
        docs_url=None,  # served below from this package's own copy of Swagger UI, never a CDN
        redoc_url=None,
    )
    templates = _templates()
    if host in LOOPBACK:
        app.add_middleware(TrustedHostMiddleware, allowed_hosts=["127.0.0.1", "localhost", "[::1]"])
    if token:
        app.middleware("http")(_token_guard(token))
    app.mount("/static", StaticFiles(directory=str(_package_dir("static"))), name="static")
    _api(app, store)
    _pages(app, store, templates)
    _docs(app)

    @app.exception_handler(UsageError)
    async def store_failed(request: Request, exc: UsageError) -> Response:  # damaged after the open
        return _store_error(request, templates, str(exc))

    @app.exception_handler(DamagedRecord)
    async def record_damaged(request: Request, exc: DamagedRecord) -> Response:  # one run, not the store
        if request.url.path.startswith("/api/"):
            return JSONResponse({"detail": str(exc)}, status_code=422)
        return templates.TemplateResponse(
            request, "record_error.html", {"message": str(exc)}, status_code=422
        )

    return app


def _store_error(request: Request, templates: Jinja2Templates, message: str) -> Response:
    if request.url.path.startswith("/api/"):
        return JSONResponse({"detail": message}, status_code=503)
    return templates.TemplateResponse(request, "store_error.html", {"message": message}, status_code=503)


def _store_error_app(message: str, *, token: str | None, host: str) -> FastAPI:
    """An app that answers every request with the store's error page (nothing else is served)."""
    app = FastAPI(title="moot view", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.store_error = message
    templates = _templates()
    if host in LOOPBACK:
        app.add_middleware(TrustedHostMiddleware, allowed_hosts=["127.0.0.1", "localhost", "[::1]"])
    if token:
        app.middleware("http")(_token_guard(token))
    app.mount("/static", StaticFiles(directory=str(_package_dir("static"))), name="static")

    @app.api_route("/{path:path}", methods=["GET", "POST", "DELETE"], include_in_schema=False)
    def everything(request: Request, path: str) -> Response:
        return _store_error(request, templates, message)

    return app


def _docs(app: FastAPI) -> None:
    """``/docs``: Swagger UI from ``static/swagger/`` (vendored), so the API page works offline."""
    from fastapi.openapi.docs import get_swagger_ui_html

    @app.get("/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title="moot view · API",
            swagger_js_url="/static/swagger/swagger-ui-bundle.js",
            swagger_css_url="/static/swagger/swagger-ui.css",
            swagger_favicon_url="/static/swagger/favicon-32x32.png",
            swagger_ui_parameters={"validatorUrl": None},  # no badge fetched from validator.swagger.io
        )


_SORTS: dict[str, Literal["time", "cost", "score"]] = {"time": "time", "cost": "cost", "score": "score"}
PAGE = 50
"""Runs per page of the list page and of ``/api/runs`` unless ``limit`` says otherwise."""
MAX_PAGE = 500
"""The most runs one page or API answer holds."""


def _list(
    store: RunStore,
    *,
    kind: str | None,
    status: str | None,
    model: str | None,
    q: str | None,
    sort: str,
    limit: int = PAGE,
    offset: int = 0,
) -> tuple[list[dict[str, Any]], int]:
    """One page of runs as list rows, and how many runs match in all."""
    filters: dict[str, Any] = {
        "kind": kind or None,
        "status": status or None,
        "model": model or None,
        "search": q or None,
    }
    limit, offset = min(max(limit, 1), MAX_PAGE), max(offset, 0)
    found = store.list(**filters, limit=limit, offset=offset, sort=_SORTS.get(sort, "time"))
    return [list_row(store, r) for r in found], store.count(**filters)


def _getter(store: RunStore) -> Callable[[str], RunRecord]:
    def get(run_id: str) -> RunRecord:
        try:
            record = store.get(run_id)
        except UsageError as exc:
            raise HTTPException(status_code=404, detail=str(exc)) from None
        if record.damage is not None:  # listed, but not shown (HTTP 422 naming the damage)
            raise DamagedRecord(record.damage)
        return record

    return get


def _api(app: FastAPI, store: RunStore) -> None:
    """The JSON API under ``/api/``."""
    get = _getter(store)

    # -- JSON API -----------------------------------------------------------------------------
    @app.get("/api/runs")
    def api_runs(
        kind: str | None = None,
        status: str | None = None,
        model: str | None = None,
        q: str | None = None,
        sort: str = "time",
        limit: int = PAGE,
        offset: int = 0,
    ) -> dict[str, Any]:
        """A page of runs, newest first (``sort``: time, cost or score), filtered like ``moot runs list``.

        ``q`` finds runs holding every word of it in their title, turns, prompts or items.
        The answer: ``{"total": runs matching, "offset", "limit", "runs": [...]}``; ``limit``
        is at most 500; the next page starts at ``offset + limit`` while that is below ``total``.
        """
        runs, total = _list(
            store, kind=kind, status=status, model=model, q=q, sort=sort, limit=limit, offset=offset
        )
        return runs_page(runs, total=total, offset=max(offset, 0), limit=min(max(limit, 1), MAX_PAGE))

    @app.get("/api/runs/{run_id}")
    def api_run(run_id: str) -> dict[str, Any]:
        """One run with its result."""
        record = get(run_id)
        return record.model_dump(mode="json") | {"wall_s": record.wall_s, "counts": store.counts(record.id)}

    @app.get("/api/runs/{run_id}/events")
    def api_events(run_id: str, after: int = 0) -> list[dict[str, Any]]:
        """The run's events after ``after`` (their ``seq``)."""
        return [e.model_dump(mode="json") for e in store.events(get(run_id).id, after=after)]

    @app.get("/api/runs/{run_id}/items")
    def api_items(run_id: str) -> list[dict[str, Any]]:
        """The run's items (bench units, ABSA sentences)."""
        return [i.model_dump(mode="json") for i in store.iter_items(get(run_id).id)]

    @app.get("/api/runs/{run_id}/stream")
    async def api_stream(run_id: str, request: Request) -> StreamingResponse:
        """Server-sent events: ``update`` whenever the run records more, ``end`` once it has finished."""
        record = get(run_id)

        async def events() -> AsyncIterator[str]:
            last: tuple[Any, ...] | None = None
            while True:
                current = store.get(record.id)
                state = (current.status, *store.counts(record.id))
                if state != last:
                    last = state
                    data = {"status": state[0], "events": state[1], "items": state[2]}
                    yield f"event: update\ndata: {json.dumps(data)}\n\n"
                if current.status != "running":
                    yield f"event: end\ndata: {json.dumps({'status': current.status})}\n\n"
                    return
                if await request.is_disconnected():
                    return
                await asyncio.sleep(0.5)

        headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
        return StreamingResponse(events(), media_type="text/event-stream", headers=headers)

    @app.delete("/api/runs/{run_id}")
    def api_delete(run_id: str, request: Request) -> dict[str, str]:
        """Delete a run; the ``X-Moot-Confirm`` header must repeat its full id."""
        record = get(run_id)
        if request.headers.get("x-moot-confirm") != record.id:
            raise HTTPException(
                status_code=409, detail="not confirmed: send X-Moot-Confirm with the full run id"
            )
        store.delete(record.id)
        return {"deleted": record.id}

    @app.get("/api/compare")
    def api_compare(a: str, b: str) -> dict[str, Any]:
        """Two runs side by side (as ``moot runs compare``)."""
        try:
            return as_json(compare_runs(store, a, b))
        except UsageError as exc:
            raise HTTPException(status_code=400, detail=str(exc)) from None


def _pages(app: FastAPI, store: RunStore, templates: Jinja2Templates) -> None:
    """The HTML pages."""
    get = _getter(store)

    def page(request: Request, name: str, **context: Any) -> HTMLResponse:
        return templates.TemplateResponse(request, name, context)

    @app.get("/", response_class=HTMLResponse)
    def runs_page(
        request: Request,
        kind: str | None = None,
        status: str | None = None,
        model: str | None = None,
        q: str | None = None,
        sort: str = "time",
        offset: int = 0,
    ) -> HTMLResponse:
        runs, total = _list(store, kind=kind, status=status, model=model, q=q, sort=sort, offset=offset)
        filters = {
            "kind": kind or "",
            "status": status or "",
            "model": model or "",
            "q": q or "",
            "sort": sort,
        }
        return page(
            request,
            "runs.html",
            runs=runs,
            filters=filters,
            kinds=_KINDS,
            statuses=_STATUSES,
            models=store.models(),
            pager=_pager(filters, max(offset, 0), len(runs), total),
        )

    @app.get("/runs/{run_id}", response_class=HTMLResponse)
    def run_page(
        request: Request,
        run_id: str,
        fragment: bool = False,
        right: str = "",
        wrong: str = "",
        show: str = "",
    ) -> HTMLResponse:
        """A run; a bench's items filtered by ``right``/``wrong`` (a method) and ``show``."""
        record = get(run_id)
        if show not in shape.BENCH_SHOWS:
            raise HTTPException(
                status_code=400, detail=f"show must be one of {', '.join(k for k in shape.BENCH_SHOWS if k)}"
            )
        context = _run_context(store, record, shape.BenchFilter(right, wrong, show))
        # fragment=1: only the body, which a live page swaps in when the store has more.
        return page(request, "_run_body.html" if fragment else "run.html", record=record, **context)

    @app.get("/runs/{run_id}/plots/{name}")
    def plot(run_id: str, name: str) -> FileResponse:
        # Only the report's own plot files, from the bench run's recorded --out folder.
        record = get(run_id)
        path = _plots(record).get(name)
        if path is None:
            raise HTTPException(status_code=404, detail=f"no plot {name!r} for run {record.id[:8]}")
        return FileResponse(path, media_type="image/png")

    @app.get("/runs/{run_id}/items/{item_id:path}", response_class=HTMLResponse)
    def item_page(request: Request, run_id: str, item_id: str) -> HTMLResponse:
        record = get(run_id)
        context = _item_context(store, record, item_id)
        if context is None:
            raise HTTPException(status_code=404, detail=f"no item {item_id!r} in run {record.id[:8]}")
        return page(request, "item.html", record=record, item_id=item_id, **context)

    @app.get("/compare", response_class=HTMLResponse)
    def compare_page(request: Request, a: str, b: str) -> HTMLResponse:
        try:
            cmp = compare_runs(store, a, b)
        except UsageError as exc:
            raise HTTPException(status_code=400, detail=str(exc)) from None
        return page(request, "compare.html", cmp=cmp)


def _pager(filters: dict[str, str], offset: int, shown: int, total: int) -> dict[str, Any]:
    """``showing`` text and the links to the newer and older pages (None at either end)."""
    kept = {k: v for k, v in filters.items() if v and not (k == "sort" and v == "time")}

    def link(at: int) -> str:
        return "/?" + urlencode(kept | ({"offset": at} if at else {}))

    first = offset + 1 if shown else 0
    return {
        "showing": f"showing {first:,}–{offset + shown:,} of {total:,}" if shown else f"none of {total:,}",
        "newer": link(max(offset - PAGE, 0)) if offset > 0 else None,
        "older": link(offset + PAGE) if offset + shown < total else None,
    }


def _run_context(store: RunStore, record: RunRecord, flt: shape.BenchFilter | None = None) -> dict[str, Any]:
    """What the run page needs, by kind."""
    if record.kind == "run":
        return {"debate": shape.live_debate(store, record)}
    if record.kind == "bench":
        report, items = shape.bench_report(store, record.id), shape.bench_items(store, record.id)
        failed = shape.failed_units(store, record.id)
        known = {row.item_id for row in items}
        items += [shape.BenchItemRow(i, "", {}) for i in failed if i not in known]  # no unit finished
        flt = flt or shape.BenchFilter()
        shown = shape.filter_bench_items(items, flt, failed)
        return {
            "report": report,
            "items": shown,
            "all_items": len(items),
            "failed_units": failed,
            "bench_filter": flt,
            "bench_shows": shape.BENCH_SHOWS,
            "plots": sorted(_plots(record)),
        }
    if record.kind == "absa" and not record.config.get("batch"):
        result = load_result(store, record.id)
        if result is None:  # running, or killed: every step and turn recorded so far
            return {"absa_partial": shape.absa_partial(store, record)}
        return {"absa": _absa_context(result, record.config)}
    if record.kind in ("absa", "absa-eval"):
        return {"sentences": list(store.iter_items(record.id))}
    if record.kind == "arbitrate":
        return {"arbitration": load_result(store, record.id)}
    return {}


def _plots(record: RunRecord) -> dict[str, Path]:
    """The report plots a bench run left in its ``--out`` folder, by file name."""
    from ..bench.report import ROUNDS_PLOT, TOKENS_PLOT

    out = record.config.get("out") if record.kind == "bench" else None
    if not isinstance(out, str):
        return {}
    found = {name: Path(out) / name for name in (TOKENS_PLOT, ROUNDS_PLOT)}
    return {name: path for name, path in found.items() if path.is_file()}


def _absa_context(result: Any, config: dict[str, Any]) -> dict[str, Any]:
    from ..absa import AbsaConfig

    cfg = AbsaConfig.model_validate(config["config"]) if isinstance(config.get("config"), dict) else None
    return {
        "result": result,
        "segments": shape.absa_spans(result),
        "rows": shape.absa_aspect_rows(result),
        "thresholds": cfg.thresholds() if cfg is not None else None,
        "moderator_thresholds": cfg.moderator if cfg is not None else None,
        "debate": shape.debate_view(result.debate) if result.debate is not None else None,
        "stage_requests": result.stage_requests,
        "stage_shared": shape.shared_system_prompts([r.messages for r in result.stage_requests or []]),
    }


def _item_context(store: RunStore, record: RunRecord, item_id: str) -> dict[str, Any] | None:
    """A bench item's transcripts (every method), or one ABSA sentence of a batch or evaluation."""
    if record.kind == "bench":
        rows = [r for r in shape.bench_items(store, record.id) if r.item_id == item_id]
        return {"bench_item": rows[0]} if rows else None
    from ..absa import FinalResult

    found = [i for i in store.iter_items(record.id) if i.item == item_id]
    if not found:
        return None
    views = []
    for item in found:
        result = FinalResult.model_validate(item.data["result"])
        cfg = record.config
        if record.kind == "absa-eval":
            cfg = {"config": (record.config.get("configs") or {}).get(item.part)}
        views.append({"part": item.part, "gold": item.data.get("gold"), "absa": _absa_context(result, cfg)})
    return {"absa_items": views}
