"""``POST /v1/search``: a query's hits, each with its page images' URLs and marked snippet.

(No ``from __future__ import annotations`` here: FastAPI reads the body's type from the
route's annotation, and the body's class is made per app, from its settings.)
"""

import time
from typing import Any

import anyio
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from kb.retrieval import mark_terms
from kb.search import errors as E
from kb.search.document_routes import page_urls
from kb.search.requests import search_request
from kb.search.state import SearchState, log_event


def add_search_route(app: FastAPI, state: SearchState) -> None:
    SearchIn = search_request(state.settings, state.pipeline)
    retriever = state.retriever

    @app.post("/v1/search")
    async def search(body: SearchIn, request: Request):
        if not state.ready:
            raise E.NotReady("loading the embedder and the store")
        where = body.filter.where() if body.filter is not None else None

        def answer() -> list[dict[str, Any]]:  # in a thread: nothing per hit runs on the event loop
            hits = retriever.search(body.query, body.top_k, body.mode, where)
            for hit in hits:
                hit["page_urls"] = page_urls(hit)
                hit["page_url"] = hit["page_urls"][0] if hit["page_urls"] else None
                hit["snippet_html"] = mark_terms(hit["snippet"], body.query, retriever.encoder.tokenizer)
            return hits

        started = time.perf_counter()
        hits = await anyio.to_thread.run_sync(answer)
        seconds = time.perf_counter() - started
        state.metrics.latency.labels(body.mode).observe(seconds)
        if state.settings.log_queries:
            log_event("query", request_id=request.state.request_id, query=body.query, mode=body.mode, hits=len(hits))
        # plain JSON: FastAPI's encoder would walk every hit again for nothing (~2 ms a query)
        return JSONResponse({"hits": hits, "took_ms": round(seconds * 1000, 2)})
