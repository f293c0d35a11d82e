"""One palette for every picture (Graphviz SVG, the HTML page and the inspector)."""
from __future__ import annotations

# Node fill / border by polarity of the memory (an outcome's polarity as stored on its edges).
POLARITY_FILL = {
    "negative": ("#fde2df", "#c0392b"),
    "positive": ("#e2f3e1", "#2e7d32"),
    "mixed": ("#fff1cc", "#b7791f"),
    "neutral": ("#eef1f4", "#5f6b76"),
    None: ("#ffffff", "#5f6b76"),
}

# Edge colour by relation; prevented edges are also dashed and end in a tee (inhibition).
RELATION_COLOR = {
    "caused": "#1f4e79",
    "enabled": "#2a8c82",
    "prevented": "#7b2d8e",
    "fact": "#7a5230",
    "meta": "#8a8f98",
    "temporal": "#b0b6bd",
    "co_occurrence": "#d9822b",
    "no_effect": "#c8ccd0",
}
DEFAULT_EDGE_COLOR = "#555555"
HIGHLIGHT = "#e8590c"  # the chain behind a DANGER / WARNING label
INVALID = "#b8b8b8"
LABEL_COLOR = {"DANGER": "#c0392b", "WARNING": "#b7791f", "SAFE": "#2e7d32", "UNKNOWN": "#5f6b76"}


def node_colors(polarity: str | None) -> tuple[str, str]:
    return POLARITY_FILL.get(polarity, POLARITY_FILL[None])


def edge_color(relation: str) -> str:
    return RELATION_COLOR.get(relation, DEFAULT_EDGE_COLOR)


def edge_width(confidence: float) -> float:
    """Stroke width from confidence: 1 px at 0, 5 px at 1."""
    c = min(max(float(confidence), 0.0), 1.0)
    return round(1.0 + 4.0 * c, 2)


def wrap(text: str, width: int = 26, max_lines: int = 3) -> list[str]:
    """Word-wrap for node boxes; long texts end in an ellipsis (the full text is in the tooltip)."""
    words = " ".join(str(text).split()).split(" ")
    lines: list[str] = []
    cur = ""
    for w in words:
        while len(w) > width:  # one very long word (or CJK text without spaces)
            if cur:
                lines.append(cur)
                cur = ""
            lines.append(w[:width])
            w = w[width:]
        if not cur:
            cur = w
        elif len(cur) + 1 + len(w) <= width:
            cur = f"{cur} {w}"
        else:
            lines.append(cur)
            cur = w
    if cur or not lines:
        lines.append(cur)
    if len(lines) > max_lines:
        lines = lines[:max_lines]
        lines[-1] = lines[-1][: width - 1].rstrip() + "…"
    return lines
