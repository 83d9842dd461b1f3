"""The page's layout, a module per part, each tab with its wiring beside its buttons (app.py assembles them and holds
the callbacks they are wired to; every event that spends CPU is registered through `Serving.work`).

- `translate`: the introduction, the decoding controls both tabs share, and the Translate tab.
- `file`: the File tab.
- `inside`: the Inside the Transformer tab.
- `arena`: the Arena tab and its sign-in line.
- `style`: the page's CSS.
"""
