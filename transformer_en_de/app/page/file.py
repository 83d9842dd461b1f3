"""The File tab: a file in, its first lines beside their translations, and a TSV of them all with a summary."""

import gradio as gr

from ..files import FILE_TYPES


def file_tab(app, controls: list) -> None:
    """The tab, wired to `app.translate_file` (`app`: app.py's `TranslationApp`; `controls`: the decoding controls)."""
    limits = app.limits
    gr.Markdown(
        f"A UTF-8 text file ({', '.join(FILE_TYPES)}), one English sentence per line, up to "
        f"{limits.max_file_bytes // 1000:,} kB and {limits.max_file_lines:,} lines; big files are "
        "translated with fewer beams. Optionally a German reference file with the same number of "
        "lines for corpus BLEU and chrF. The first lines show below; the download has them all."
    )
    with gr.Row():
        source_file = gr.File(label="English file", file_types=FILE_TYPES, type="filepath", min_width=300)
        reference_file = gr.File(
            label="Reference file (optional)", file_types=FILE_TYPES, type="filepath", min_width=300
        )
    button = gr.Button("Translate file", variant="primary")
    summary = gr.Markdown(label="Summary", elem_id="file-summary", latex_delimiters=[])
    # No LaTeX: "$$...$$" in a visitor's line is shown as the characters it is, like every other mark
    preview = gr.Markdown(label="The first lines", elem_id="file-preview", latex_delimiters=[])
    output = gr.File(label="All translations (TSV)")
    app.serving.work(
        button.click,
        app.translate_file,
        [source_file, reference_file, *controls],
        [output, summary, preview],
        api_name="translate_file",
    )
