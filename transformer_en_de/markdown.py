"""The one Markdown table writer: compare.py's report, the app's corpus table and leaderboard, benchmark figures."""


def markdown_table(header: list[str], rows: list[list[object]], align: str = "") -> str:
    """`rows` under `header` as a Markdown table, one line per row. `align` has a letter per column, "l" (text) or "r"
    (numbers); without it every column is left as Markdown sets it."""
    rule = [{"l": ":---", "r": "---:"}[letter] for letter in align] if align else ["---"] * len(header)
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(rule) + "|"]
    return "\n".join(lines + ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows])
