"""One CJK font for every figure: Simplified-Chinese glyphs on Linux, macOS and Windows.

Chapters call `use_cjk_font()` once. It picks the first installed family of `CJK_FAMILIES` (the
Simplified-Chinese faces: 岭 and 今 drawn in their mainland forms, not the Japanese ones), puts it
before DejaVu Sans in matplotlib's font list, and silences the missing-glyph warnings that would
otherwise fill a cell's stderr on a machine with none (the figures then show boxes).
"""
from __future__ import annotations

CJK_FAMILIES = ["Noto Sans CJK SC", "Source Han Sans SC", "PingFang SC", "Heiti SC", "Microsoft YaHei",
                "WenQuanYi Zen Hei", "SimHei"]
# Debian/Ubuntu package fonts-noto-cjk ships one collection for every CJK face
NOTO_CJK_STEM = "NotoSansCJK"


def use_cjk_font(families=None) -> str | None:
    """Put the first installed CJK family first in font.family; returns it, or None if none is."""
    import logging
    import warnings

    import matplotlib.font_manager as fm
    import matplotlib.pyplot as plt
    families = [families] if isinstance(families, str) else list(families or CJK_FAMILIES)
    warnings.filterwarnings("ignore", message="Glyph .* missing from")
    logging.getLogger("matplotlib.font_manager").setLevel(logging.ERROR)  # no findfont lines
    installed = {f.name for f in fm.fontManager.ttflist}
    if not installed & set(families):  # a font cache older than the font: register the files
        for path in fm.findSystemFonts():
            if NOTO_CJK_STEM in path.replace("-", ""):
                fm.fontManager.addfont(path)
        installed = {f.name for f in fm.fontManager.ttflist}
    family = next((f for f in families if f in installed), None)
    if family is not None:
        plt.rcParams["font.family"] = [family, "DejaVu Sans"]
    return family
