"""Structure limits of a PDF, checked before any page is read.

MuPDF opens hostile files without complaint and fails later, on the page that holds the
trap: a page tree that refers back to itself, arrays nested a hundred thousand deep (its
parser overflows and silently drops the page's resources), a page tree that claims a
million pages, a page of 20,000 points a side. Each is refused here with a typed error,
so the planner quarantines the file once instead of a worker failing on it again and
again. The limits are far above what real documents use (their page trees are a few
levels deep, their objects nest under ten) and cost milliseconds on a 1,000-page file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pymupdf

from ocr_engine.api.errors import ClaimsExceedFile, MalformedPdf, PageTooLarge


@dataclass(frozen=True)
class StructureLimits:
    page_tree_depth: int = 32
    object_nesting: int = 64  # arrays and dictionaries inside one another, in one object
    # PDF 1.7 (ISO 32000-1, annex C): a page is at most 14,400 default units a side
    page_side_pt: float = 14_400.0
    # A page needs its dictionary and a reference from its parent. Blank pages packed in
    # compressed object streams take 10.4 bytes each (measured, 5,000 pages): a file that
    # claims more pages than its size allows at 4 bytes a page is not telling the truth.
    min_bytes_per_page: int = 4


LIMITS = StructureLimits()
_REF = re.compile(rb"(\d+)\s+\d+\s+R")
_LENGTH = re.compile(r"/Length\s+(\d+)\b(?!\s+\d+\s+R)")


def check_structure(doc: pymupdf.Document, size: int, limits: StructureLimits = LIMITS) -> None:
    """Raise ``MalformedPdf``, ``ClaimsExceedFile`` or ``PageTooLarge``; None when the file is sound."""
    try:
        pages = doc.page_count
    except Exception as exc:  # MuPDF: "Invalid number of pages"
        raise ClaimsExceedFile(f"the PDF's page count cannot be believed: {exc}") from exc
    if pages * limits.min_bytes_per_page > size:
        raise ClaimsExceedFile(f"the PDF claims {pages:,} pages, but its {size:,} bytes can hold at most "
                               f"{size // limits.min_bytes_per_page:,}")
    for xref in range(1, doc.xref_length()):
        _check_object(doc, xref, size, limits)
    _check_page_tree(doc, limits)
    for number in range(pages):
        try:
            rect = doc.page_cropbox(number)  # without loading the page
        except Exception as exc:  # MuPDF: "malformed page tree", "cycle in page tree", "bad page number(s)"
            # a page the count promises and the tree does not lead to (a /Kids key mangled,
            # a null among the kids): 12 of 20,000 byte-mutated files failed here untyped
            raise MalformedPdf(f"page {number + 1} of {pages} cannot be found in the page tree: {exc}") from exc
        side = max(abs(rect.width), abs(rect.height))
        if side > limits.page_side_pt:
            raise PageTooLarge(f"page {number + 1} is {abs(rect.width):,.0f} x {abs(rect.height):,.0f} points; "
                               f"a PDF page is at most {limits.page_side_pt:,.0f} points a side")


def _check_object(doc: pymupdf.Document, xref: int, size: int, limits: StructureLimits) -> None:
    try:
        source = doc.xref_object(xref, compressed=True)
    except Exception as exc:  # "exception stack overflow!" on absurd nesting
        raise MalformedPdf(f"object {xref} cannot be parsed: {exc}") from exc
    depth = nesting_depth(source)
    if depth > limits.object_nesting:
        raise MalformedPdf(f"object {xref} nests arrays and dictionaries {depth} deep "
                           f"(the limit is {limits.object_nesting})")
    if doc.xref_is_stream(xref):
        # read from the source: MuPDF's own integer wraps around past 2**31
        claimed = _LENGTH.search(source)
        if claimed and int(claimed.group(1)) > size:
            raise ClaimsExceedFile(f"object {xref} claims a stream of {int(claimed.group(1)):,} bytes "
                                   f"in a file of {size:,}")


def nesting_depth(source: str) -> int:
    """How deep ``[`` and ``<<`` nest in a PDF object's source, strings skipped."""
    depth = deepest = 0
    i, n = 0, len(source)
    while i < n:
        c = source[i]
        if c == "(":  # a literal string: balanced parentheses, backslash escapes
            level, i = 1, i + 1
            while i < n and level:
                if source[i] == "\\":
                    i += 1
                elif source[i] == "(":
                    level += 1
                elif source[i] == ")":
                    level -= 1
                i += 1
            continue
        if c == "[" or source.startswith("<<", i):
            depth += 1
            deepest = max(deepest, depth)
            i += 2 if c == "<" else 1
            continue
        if c == "]" or source.startswith(">>", i):
            depth -= 1
            i += 2 if c == ">" else 1
            continue
        i += 1
    return deepest


def _check_page_tree(doc: pymupdf.Document, limits: StructureLimits) -> None:
    """Walk /Pages from the catalog without recursion: no node twice, no deeper than the limit."""
    kind, value = _key(doc, doc.pdf_catalog(), "Pages")
    if kind != "xref":
        raise MalformedPdf("the catalog has no /Pages tree")
    stack = [(int(value.split()[0]), 1)]
    seen: set[int] = set()
    while stack:
        node, depth = stack.pop()
        if node in seen:
            raise MalformedPdf(f"the page tree refers back to object {node} (a cycle)")
        seen.add(node)
        if depth > limits.page_tree_depth:
            raise MalformedPdf(f"the page tree is nested more than {limits.page_tree_depth} levels deep")
        kind, kids = _key(doc, node, "Kids")
        if kind == "array":
            stack.extend((int(ref), depth + 1) for ref in _REF.findall(kids.encode()))


def _key(doc: pymupdf.Document, xref: int, name: str) -> tuple[str, str]:
    """``doc.xref_get_key``, where a reference to an object the file does not hold is a
    malformed file: MuPDF raises a bare ValueError ("bad xref"), which failed the planner's
    task, was retried, and held back every other file of the run ("%PDF-1.7 1 0 obj <<>>",
    no catalog; a page tree's /Kids naming object 999 of 5)."""
    if not 0 < xref < doc.xref_length():
        what = "no catalog" if xref == doc.pdf_catalog() else f"a reference to object {xref}, which it does not hold"
        raise MalformedPdf(f"the PDF has {what}")
    return doc.xref_get_key(xref, name)
