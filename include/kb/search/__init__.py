"""The search service: FastAPI on uvicorn, ``kb-search serve``.

- ``stores``: the vector store a long-lived reader keeps (a private copy of the local
  store, refreshed when a writer changed it; or one client of a Qdrant server).
- ``app``: the HTTP API and the search page.
- ``pages``: page images rendered from the exact stored version.
- ``client``: what ``kb search`` and ``kb eval`` use to ask it.
"""
