"""The Inside tab's Markdown: the notices, each model's pieces with their ids, and its beam search as one table (a row
a step, a column a live beam) beside the finished hypotheses before and after the length penalty. Every table comes
from `transformer_en_de.markdown.markdown_table`; a visitor's text is shown as text (`as_text`), never rendered."""

from transformer_en_de.markdown import markdown_table

from ..text_checks import as_text


def format_notices(view: dict | None) -> str:
    """The view's message (why there is none) and the request's notices, one paragraph each."""
    if not view:
        return ""
    lines = ([view["message"]] if view.get("message") else []) + view.get("notices", [])
    return "\n\n".join(f"⚠️ {as_text(line)}" for line in lines)


def format_pieces(view: dict) -> str:
    """The source and target pieces with their ids, as Markdown (pieces shown as text: a visitor's text is never
    rendered)."""
    if view.get("message"):
        return f"⚠️ {as_text(view['message'])}"

    def row(label: str, pieces: list[str], ids: list[int]) -> str:
        cells = " · ".join(f"{as_text(piece)} ({number})" for piece, number in zip(pieces, ids, strict=True))
        return f"**{label}** {cells}"

    return "\n\n".join(
        [
            f"**{as_text(view['model'])}**",
            row("English pieces (ids)", view["source_tokens"], view["source_ids"]),
            row("German pieces (ids)", view["target_tokens"], view["target_ids"]),
        ]
    )


def format_beam_search(view: dict) -> str:
    """The search as one table, a row a step and a column a live beam (best first: its text so far and its score),
    each finished hypothesis marked in the cell of the beam it ended; then the finished hypotheses in the search's
    order, before and after the length penalty."""
    if view.get("message"):
        return f"⚠️ {as_text(view['message'])}"
    beams = view["num_beams"]
    intro = (
        f"**{as_text(view['model'])}**: {beams} beam{'s' if beams > 1 else ''}, length penalty α = "
        f"{view['length_penalty']:g}. A row per step: the live beams, best first, each with its text so far and its "
        "score (the sum of the log-probabilities of its pieces); → `</s>` **#n**: the beam ends there, as finished "
        "hypothesis #n below (✔ the translation)."
    )
    finished = {item["rank"]: item for item in view["finished"]}
    rows = [search_row(step, [finished[rank] for rank in step["finished"]], beams) for step in view["beam_steps"]]
    search = markdown_table(["step", *(f"beam {number}" for number in range(1, beams + 1))], rows, "r" + "l" * beams)
    return "\n\n".join([intro, search, finished_table(view["finished"])])


def search_row(step: dict, ended: list[dict], beams: int) -> list[str]:
    """One step of the search: its number, then each live beam's cell, `beams` cells in all. A hypothesis that ended
    at this step is marked in the cell of the beam it extends (its pieces less its last); one that extends no live
    beam (none should) beside the step's number."""
    cells = []
    for beam in step["beams"]:
        cell = f"{as_text(beam['text']) or '(start)'} ({beam['score']:.2f})"
        extended = [item for item in ended if item["pieces"][:-1] == beam["pieces"]]
        cells.append(" ".join([cell, *(ended_mark(item) for item in extended)]))
        ended = [item for item in ended if item not in extended]
    number = " ".join([str(step["step"]), *(ended_mark(item) for item in ended)])
    return [number, *cells, *[""] * (beams - len(cells))]


def ended_mark(item: dict) -> str:
    """→ the hypothesis's last piece (`</s>`, or the one it held when the search was cut) and its rank, ✔ the chosen."""
    return f"→ {as_text(item['pieces'][-1])} **#{item['rank']}**{' ✔' if item['rank'] == 1 else ''}"


def finished_table(finished: list[dict]) -> str:
    """The finished hypotheses in the order the search ranks them (log-probability ÷ pieces^α), each with its rank by
    log-probability alone, and whether the length penalty changed the order."""
    rows = [
        [
            f"{item['rank']}{' ✔ chosen' if item['rank'] == 1 else ''}",
            as_text(item["text"]),
            item["step"],
            "" if item["log_probability"] is None else f"{item['log_probability']:.3f}",
            item["rank_without_penalty"],
            "" if item["length_normalised"] is None else f"{item['length_normalised']:.3g}",
        ]
        for item in finished
    ]
    header = ["#", "translation", "pieces", "log-probability", "its rank", "÷ pieces^α"]
    reordered = any(item["rank"] != item["rank_without_penalty"] for item in finished)
    return "\n\n".join(
        [
            "**Finished hypotheses**, in the order the search ranks them (log-probability ÷ pieces^α):",
            markdown_table(header, rows, "rlrrrr"),
            "The length penalty reordered the finished hypotheses."
            if reordered
            else "The length penalty kept the order of the log-probabilities.",
        ]
    )


__all__ = ["format_beam_search", "format_notices", "format_pieces"]
