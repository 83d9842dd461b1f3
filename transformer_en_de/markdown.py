"""The one Markdown table writer: compare.py's report, the app's corpus table and the benchmarks' figures."""


def markdown_table(header: list[str], rows: list[list[object]], text_columns: int | None = None) -> str:
    """`rows` under `header` as a Markdown table, one line per row. With `text_columns`, the first that many columns
    are left-aligned and the rest (numbers) right-aligned; without, every column is left as Markdown sets it."""
    if text_columns is None:
        rule = ["---"] * len(header)
    else:
        rule = [":---"] * text_columns + ["---:"] * (len(header) - text_columns)
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(rule) + "|"]
    return "\n".join(lines + ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows])
