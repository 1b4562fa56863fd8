"""Documents this project writes itself: the demo samples and the benchmark corpus.

Every fact the demo asks about sits on one known page, so an answer's cited page
can be checked. Regenerate with ``python -m kb.samples include/samples``.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pymupdf

PAGE_W, PAGE_H = 595, 842  # A4 in points
MARGIN = 60

# (title, [(heading, [paragraphs])] one entry per page)
PUMP_MANUAL = (
    "Aquila P-200 Centrifugal Pump: Operator Manual",
    [
        ("1 Introduction and safety", [
            "This manual covers the Aquila P-200 centrifugal pump used for clean-water transfer in "
            "industrial plants. Read every section before installing or operating the pump.",
            "Only trained staff may open the pump housing. Always isolate electrical power and close "
            "both suction and discharge valves before any service work.",
        ]),
        ("2 Installation", [
            "Mount the pump on a level concrete foundation. Tighten the four anchor bolts to a torque "
            "of 45 newton metres in a cross pattern.",
            "Leave at least 60 centimetres of free space around the motor so that cooling air can "
            "circulate and the coupling guard can be removed.",
        ]),
        ("3 Operation", [
            "Prime the pump casing with water before the first start. Never run the pump dry.",
            "Open the suction valve fully, start the motor, then open the discharge valve slowly. The "
            "maximum permitted discharge pressure is 12 bar.",
        ]),
        ("4 Maintenance schedule", [
            "Replace the mechanical impeller seal every 2,000 operating hours, or sooner if water "
            "drips from the seal housing.",
            "Lubricate the motor bearings every 500 operating hours with lithium-based grease. Do not "
            "mix grease types.",
        ]),
        ("5 Troubleshooting and error codes", [
            "Error code E42 means low suction pressure: the pump is close to running dry. Check the "
            "suction strainer for blockage and make sure the inlet valve is open.",
            "Error code E17 means the motor is overheating. Let the motor cool for 30 minutes and "
            "check that the cooling fan turns freely.",
        ]),
        ("6 Specifications and warranty", [
            "Rated flow 40 cubic metres per hour; rated head 32 metres; motor power 7.5 kilowatts.",
            "The warranty period is 36 months from the date of installation, provided the maintenance "
            "schedule in section 4 was followed.",
        ]),
    ],
)

ARCHIVE_RULES = (
    "档案数字化管理规程",
    [
        ("第一章 总则", [
            "为规范本单位纸质档案的数字化工作，保证数字化成果的真实、完整与可用，制定本规程。",
            "本规程适用于文书档案、合同档案与科技档案的扫描、存储、质量检查和移交。",
        ]),
        ("第二章 扫描要求", [
            "档案扫描分辨率不低于三百点每英寸。彩色档案采用二十四位真彩色模式扫描。",
            "扫描前应拆除装订物，扫描后按原顺序重新装订，不得遗漏页面。",
        ]),
        ("第三章 存储与备份", [
            "数字化成果应当在异地机房每周备份一次，备份介质应当定期检测。",
            "数字化档案的保存期限为三十年，到期后由档案部门组织鉴定。",
        ]),
        ("第四章 质量检查", [
            "质量检查采用抽检方式，抽检比例不低于百分之五。",
            "发现图像模糊、缺页或者顺序错误的，应当重新扫描并记录原因。",
        ]),
        ("第五章 附则", [
            "本规程由档案管理部门负责解释，自发布之日起施行。",
        ]),
    ],
)

SERVICE_BULLETIN = (
    "Service Bulletin SB-7: Aquila P-200 Coupling",
    [
        ("Scope", [
            "This bulletin applies to Aquila P-200 pumps built before 2024. It was issued on paper and "
            "reaches the archive as a scan, without a text layer.",
        ]),
        ("Required action", [
            "Replace the flexible coupling insert every 3 years, or at once if the rubber shows cracks.",
            "Record the replacement date on the pump's service tag.",
        ]),
    ],
)

SAMPLES = {"aquila-p200-manual.pdf": PUMP_MANUAL, "archive-digitization-rules-zh.pdf": ARCHIVE_RULES}
SCANNED_SAMPLES = {"service-bulletin-sb7-scan.pdf": SERVICE_BULLETIN}

# The demo's questions, with the document and page that hold each answer.
DEMO_QUESTIONS = [
    ("How often must the impeller seal be replaced?", "aquila-p200-manual.pdf", 4),
    ("What does error code E42 mean?", "aquila-p200-manual.pdf", 5),
    ("档案扫描分辨率不低于多少？", "archive-digitization-rules-zh.pdf", 2),
    ("How often must the coupling insert be replaced?", "service-bulletin-sb7-scan.pdf", 2),
]


def _is_cjk(text: str) -> bool:
    return any("\u4e00" <= ch <= "\u9fff" for ch in text)


def write_pdf(path: Path, title: str, pages: list[tuple[str, list[str]]]) -> None:
    """One heading and its paragraphs per page, with a text layer (born-digital)."""
    cjk = _is_cjk(title)
    font = "china-s" if cjk else "helv"
    doc = pymupdf.open()
    for number, (heading, paragraphs) in enumerate(pages, start=1):
        page = doc.new_page(width=PAGE_W, height=PAGE_H)
        y = MARGIN
        if number == 1:
            page.insert_textbox(pymupdf.Rect(MARGIN, y, PAGE_W - MARGIN, y + 60), title, fontsize=20, fontname=font)
            y += 70
        page.insert_textbox(pymupdf.Rect(MARGIN, y, PAGE_W - MARGIN, y + 30), heading, fontsize=15, fontname=font)
        y += 40
        for para in paragraphs:
            rect = pymupdf.Rect(MARGIN, y, PAGE_W - MARGIN, PAGE_H - MARGIN)
            spare = page.insert_textbox(rect, para, fontsize=11, fontname=font, lineheight=1.4)
            if spare < 0:
                raise ValueError(f"paragraph does not fit on page {number} of {path.name}")
            y = PAGE_H - MARGIN - spare + 14
        page.insert_text((PAGE_W / 2 - 10, PAGE_H - 30), str(number), fontsize=9, fontname="helv")
    doc.set_metadata({"title": title, "creator": "kb.samples"})
    path.parent.mkdir(parents=True, exist_ok=True)
    doc.save(path, garbage=3, deflate=True)
    doc.close()


def scanned_copy(data: bytes, dpi: int = 150, title: str | None = None, *, skew_deg: float = 0.0,
                 speckle: float = 0.0, seed: int = 0) -> bytes:
    """``data`` as a scanner delivers it: each page a grey picture, no text layer.

    ``skew_deg``: each page is turned by up to that many degrees, either way (a sheet fed
    askew). ``speckle``: that share of pixels become dust, black or white (a dirty glass
    or old paper). Both are drawn from ``seed``, so a copy is the same every time. Pages
    with noise are stored as JPEG (as scanners do), clean ones losslessly.
    """
    import io
    import random

    import numpy as np
    from PIL import Image

    rng = random.Random(seed)
    src = pymupdf.open(stream=data, filetype="pdf")
    out = pymupdf.open()
    for page in src:
        pix = page.get_pixmap(dpi=dpi, colorspace=pymupdf.csGRAY)
        target = out.new_page(width=page.rect.width, height=page.rect.height)
        if not (skew_deg or speckle):
            target.insert_image(page.rect, pixmap=pix)
            continue
        image = Image.frombytes("L", (pix.width, pix.height), pix.samples)
        if skew_deg:
            image = image.rotate(rng.uniform(-skew_deg, skew_deg), resample=Image.BICUBIC, fillcolor=255)
        if speckle:
            pixels = np.array(image)
            noise = np.random.default_rng(rng.randrange(2**32)).random(pixels.shape)
            pixels[noise < speckle / 2] = 0
            pixels[noise > 1 - speckle / 2] = 255
            image = Image.fromarray(pixels)
        buffer = io.BytesIO()
        image.save(buffer, format="JPEG", quality=80)
        target.insert_image(page.rect, stream=buffer.getvalue())
    if title:
        out.set_metadata({"title": title, "creator": "kb.samples (scanned)"})
    src.close()
    return out.tobytes(garbage=3, deflate=True)


def write_scanned_pdf(path: Path, title: str, pages: list[tuple[str, list[str]]], dpi: int = 200) -> None:
    tmp = path.with_suffix(".born-digital.pdf")
    write_pdf(tmp, title, pages)
    path.write_bytes(scanned_copy(tmp.read_bytes(), dpi, title))
    tmp.unlink()


_WORDS = (
    "valve pressure sensor calibration inspection controller firmware filter coupling bearing "
    "operator schedule shipment invoice ledger archive record audit backup replica network "
    "voltage current thermal cooling assembly bracket housing impeller rotor seal gasket "
    "procedure report quarterly annual revenue customer supplier warehouse inventory batch"
).split()


def prose_pages(n: int, seed: int = 7, paragraphs: int = 4) -> list[tuple[str, list[str]]]:
    """``n`` pages of generated prose (a heading and ``paragraphs`` paragraphs each), the
    same for the same seed: load for benchmarks and size tests, no facts."""
    rng = random.Random(seed)
    pages = []
    for p in range(n):
        body = []
        for _ in range(paragraphs):
            words = [rng.choice(_WORDS) for _ in range(rng.randint(50, 70))]
            body.append(" ".join(words).capitalize() + ".")
        pages.append((f"Section {p + 1}: {rng.choice(_WORDS).title()} {rng.choice(_WORDS)}", body))
    return pages


def bench_corpus(out_dir: Path, documents: int = 10, pages_per_document: int = 20, seed: int = 7) -> list[Path]:
    """Born-digital PDFs of generated prose, for the ingest benchmark (no facts, just load)."""
    paths = []
    for d in range(documents):
        path = out_dir / f"bench-{d:03d}.pdf"
        write_pdf(path, f"Benchmark document {d}", prose_pages(pages_per_document, seed + d))
        paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> int:
    out = Path((argv or sys.argv[1:] or ["include/samples"])[0])
    for name, (title, pages) in SAMPLES.items():
        write_pdf(out / name, title, pages)
        print(out / name)
    for name, (title, pages) in SCANNED_SAMPLES.items():
        write_scanned_pdf(out / name, title, pages)
        print(out / name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
