"""A document's indexed chunks, and its page images with a hit's boxes drawn on them:
``GET /v1/documents/{doc_id}/chunks``, ``GET /v1/documents/{doc_id}/pages/{n}.png``.

Page images come from the version that was indexed (``pages.render_indexed``): a deleted or
replaced document's pages are not drawn. At most ``page_renders`` are drawn at once and
``page_queue`` wait; the next is answered 429 at once.
"""

from typing import Any
from urllib.parse import quote

import anyio
from fastapi import FastAPI, Path, Query, Request
from fastapi.responses import JSONResponse, Response

from kb.ledger_db import Ledger
from kb.search import errors as E
from kb.search.pages import indexed_entry, render_indexed
from kb.search.state import SearchState

_UUID = r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"


def page_urls(hit: dict[str, Any]) -> list[str]:
    """Where the image of each of a hit's pages is, at the exact version the chunk came from,
    with the hit's boxes drawn on it."""
    if not hit.get("doc_id") or not hit.get("pages"):
        return []
    query = {"version": hit.get("version_id"), "chunk": hit.get("id")}
    tail = "&".join(f"{k}={quote(str(v), safe='')}" for k, v in query.items() if v)
    return [f"/v1/documents/{hit['doc_id']}/pages/{n}.png" + (f"?{tail}" if tail else "") for n in hit["pages"]]


def _chunk_boxes(state: SearchState, doc_id: str, page: int, version: str | None,
                 chunk: str) -> tuple[str | None, list]:
    """The version a chunk was cut from and its boxes on ``page``; 404 unless the chunk is this
    document's, at this version."""
    with state.reader() as vs:
        payload = vs.payload(chunk)
    if not payload or payload.get("doc_id") != doc_id:
        raise E.NotFound(f"no chunk {chunk} in document {doc_id}", code="unknown_chunk")
    if version is not None and payload.get("version_id") not in (None, version):
        raise E.NotFound(f"chunk {chunk} is of another version of the document", code="unknown_chunk")
    boxes = [b["bbox"] for b in payload.get("boxes") or [] if b.get("page") == page and b.get("bbox")]
    return version or payload.get("version_id"), boxes


def add_document_routes(app: FastAPI, state: SearchState) -> None:
    settings = state.settings

    @app.get("/v1/documents/{doc_id}/chunks")
    async def document_chunks(doc_id: str = Path(max_length=128)):
        """The document's indexed chunks (id and payload, by chunk index): what is searchable of it."""
        def read() -> list[dict[str, Any]]:
            with state.reader() as vs:
                points = vs.points(doc_id)
            return sorted(({"id": pt.id, "payload": pt.payload} for pt in points),
                          key=lambda c: (c["payload"].get("sha256", ""), c["payload"].get("chunk_index", 0)))

        chunks = await anyio.to_thread.run_sync(read)
        if not chunks:
            raise E.NotFound(f"no document {doc_id} is indexed", code="unknown_document")
        return JSONResponse({"doc_id": doc_id, "chunks": chunks})

    @app.get("/v1/documents/{doc_id}/pages/{page:int}.png")
    async def page_image(doc_id: str, page: int, version: str | None = None,
                         chunk: str | None = Query(None, pattern=_UUID, description="a hit's id: its boxes are drawn")):
        def render() -> bytes:
            entry = indexed_entry(Ledger.for_settings(state.pipeline, state.objects), doc_id)  # deleted: not_indexed
            at, boxes = _chunk_boxes(state, doc_id, page, version, chunk) if chunk else (version, [])
            return render_indexed(state.objects, entry, page, at, settings.page_dpi, settings.max_page_pixels, boxes,
                                  max_bytes=int(settings.max_page_source_mb * 2**20))

        if state.drawing >= settings.page_renders + settings.page_queue:
            raise E.Overloaded("too many page images are being drawn; retry later", headers={"Retry-After": "1"})
        state.drawing += 1
        try:
            png = await anyio.to_thread.run_sync(render, limiter=state.renders)
        finally:
            state.drawing -= 1
        return Response(png, media_type="image/png", headers={"Cache-Control": "private, max-age=3600"})
