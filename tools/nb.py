"""Write a chapter notebook from a compact cell list (kept so chapter sources stay reviewable).

Usage from Python: write_notebook(path, [("md", text), ("code", src, {"tags": ["parameters"]}), ...])
"""
from __future__ import annotations

import nbformat


def write_notebook(path: str, cells: list[tuple]) -> None:
    nb = nbformat.v4.new_notebook()
    nb.metadata = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
                   "language_info": {"name": "python"}}
    for c in cells:
        kind, src = c[0], c[1].strip("\n")
        meta = c[2] if len(c) > 2 else {}
        cell = nbformat.v4.new_markdown_cell(src) if kind == "md" else nbformat.v4.new_code_cell(src)
        cell.metadata.update(meta)
        nb.cells.append(cell)
    nbformat.validator.normalize(nb)
    nbformat.write(nb, path)
