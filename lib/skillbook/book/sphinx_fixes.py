"""A Sphinx extension for the book's pages (listed in _config.yml, `sphinx: extra_extensions`).

jupyter-book 1.x sets up sphinx-thebe's page scripts twice, so every page declared `const THEBE_JS_URL`
twice and stopped with "Identifier 'THEBE_JS_URL' has already been declared" (thebe itself is off).
Each script is kept once per page, in its first place.
"""
from __future__ import annotations


def _dedupe_scripts(app, pagename, templatename, context, doctree) -> None:
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, kept = set(), []
    for js in scripts:
        attrs = getattr(js, "attributes", {}) or {}
        key = (str(getattr(js, "filename", js) or ""), tuple(sorted((k, str(v)) for k, v in attrs.items())))
        if key not in seen:
            seen.add(key)
            kept.append(js)
    scripts[:] = kept


def setup(app):
    # after the theme and extensions have added their scripts for the page
    app.connect("html-page-context", _dedupe_scripts, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
