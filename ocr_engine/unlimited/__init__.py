"""Baidu's Unlimited OCR on transformers' native implementation (R-SWA decoder)."""
