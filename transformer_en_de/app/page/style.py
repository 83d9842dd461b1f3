"""The page's CSS: at phone width the input boxes stack, the examples' text wraps instead of being cut, a dropdown's
text stays clear of its arrow, wide tables scroll inside their box or show one block per row."""

from ..corpus_report import HEADERS as CORPUS_HEADERS
from ..files import SUMMARY_HEADERS

PHONE_WIDTH = 640
CSS = """
#examples table { table-layout: fixed; width: 100%; }
#examples td, #examples th { max-width: none !important; white-space: normal; overflow-wrap: break-word; }
#examples td div { width: auto !important; }
.secondary-wrap input { text-overflow: ellipsis; padding-right: 1.5em; }
.prose table { display: block; overflow-x: auto; }
.prose th { white-space: nowrap; }
.prose td { word-break: normal; overflow-wrap: normal; }
"""


def stacked_table_css(elem_id: str, headers: list[str]) -> str:
    """CSS that shows the Markdown table inside `#elem_id` as one block per row below `PHONE_WIDTH` pixels, each cell
    preceded by its column's header ("BLEU: 39.70"): a phone sees every column, none cut or scrolled away."""
    scope = f"#{elem_id}"
    parts = ", ".join(f"{scope} {tag}" for tag in ("table", "thead", "tbody", "tr", "th", "td"))
    rules = [
        f"{parts} {{ display: block; width: auto; }}",
        f"{scope} thead {{ display: none; }}",
        f"{scope} tr {{ border-bottom: 1px solid var(--border-color-primary); padding: 0.4em 0; }}",
        f"{scope} td {{ border: none !important; padding: 0.1em 0.6em; }}",
        f"{scope} td:empty {{ display: none; }}",
    ]
    for number, header in enumerate(headers, start=1):
        label = header.replace("\\", "\\\\").replace('"', '\\"')
        rules.append(f'{scope} td:nth-child({number})::before {{ content: "{label}: "; font-weight: 600; }}')
    return f"@media (max-width: {PHONE_WIDTH}px) {{\n" + "\n".join(rules) + "\n}\n"


def page_css(systems: list) -> str:
    """The page's CSS, with the wide tables shown as one block per row on a phone."""
    tables = {
        "corpus-table": CORPUS_HEADERS,
        "file-summary": SUMMARY_HEADERS,
        "file-preview": ["Line", "English", *[system.name for system in systems]],
    }
    return CSS + "".join(stacked_table_css(elem_id, headers) for elem_id, headers in tables.items())
