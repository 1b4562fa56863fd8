"""The OCR engine as an HTTP service for the GPU pool (FastAPI on uvicorn)."""
