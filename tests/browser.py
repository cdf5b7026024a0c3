"""Open every page of a built book in headless Chromium (Debian's `chromium`, driven by Playwright) and
list what a reader would meet: console errors, uncaught exceptions, requests that leave localhost or
fail, images that did not load, a page that scrolls sideways, explorers whose dropdown does not switch
the panel. Used by tests/test_book_browser.py; `python tests/browser.py <html dir>` prints the report.
"""
from __future__ import annotations

import functools
import http.server
import shutil
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlparse

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"]
LOCAL = {"127.0.0.1", "localhost"}


def chromium() -> str | None:
    """The system Chromium (Playwright's own browser download is not used)."""
    return next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser")) if p), None)


@contextmanager
def serve(folder: Path):
    """The built book over HTTP on 127.0.0.1 (an OS-chosen port), as a reader's web server would."""
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(folder)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


# Each explorer is a VBox holding a dropdown and the stack it is linked to; the stack shows one child.
EXPLORERS_JS = """
() => Array.from(document.querySelectorAll('.widget-dropdown select')).map((s, i) => {
  s.setAttribute('data-check', String(i));
  return {index: i, options: s.options.length};
})
"""
PANEL_JS = """
(i) => {
  const s = document.querySelector(`select[data-check="${i}"]`);
  let box = s.closest('.widget-dropdown').parentElement;
  while (box && !box.querySelector('.widget-stack, .jupyter-widgets.widget-container')) box = box.parentElement;
  if (!box) return null;
  // the visible panel: what the reader sees below the dropdown
  const shown = Array.from(box.querySelectorAll('.widget-html-content, .widget-html'))
      .filter(e => e.offsetParent !== null);
  return shown.map(e => e.innerText).join('\\n').slice(0, 2000);
}
"""


TABLES_JS = """
() => Array.from(document.querySelectorAll('table')).map((t, i) => ({
  index: i, visible: t.offsetParent !== null, over: t.scrollWidth - t.parentElement.clientWidth,
  cols: t.rows[0] ? t.rows[0].cells.length : 0, head: ((t.querySelector('th') || {}).innerText || '').slice(0, 40)
})).filter(t => t.visible && t.over > 2)
"""
MIN_FIGURE_SCALE = 0.62
FIGURES_JS = f"""
() => Array.from(document.querySelectorAll('div.cell_output img')).map((im, i) => ({{
  index: i, natural: im.naturalWidth, shown: im.clientWidth, scale: im.clientWidth / im.naturalWidth
}})).filter(im => im.natural > 0 && im.shown > 0 && im.scale < {MIN_FIGURE_SCALE})
"""
# Sentences a page once kept after what they described had changed (issue 37's review): none may return.
STALE = ("carries no verdict until every stream reaches its pre-registered size",
         "Not executed in this profile yet", "not executed yet")


def check_page(page, url: str, timeout_ms: int = 20000) -> list[str]:
    problems: list[str] = []
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(f"uncaught: {e}"))
    page.on("requestfailed", lambda r: problems.append(f"request failed: {r.url} ({r.failure})")
            if urlparse(r.url).hostname in LOCAL else None)
    page.on("response", lambda r: problems.append(f"HTTP {r.status}: {r.url}") if r.status >= 400 else None)
    page.goto(url, wait_until="load", timeout=timeout_ms)
    try:
        page.wait_for_load_state("networkidle", timeout=timeout_ms)
    except Exception:   # noqa: BLE001 — a page that never goes idle is reported, not fatal here
        problems.append("the page did not go idle (requests kept running)")
    page.wait_for_timeout(300)      # widgets render after the manager's scripts ran
    broken = page.evaluate("() => Array.from(document.images).filter(i => !(i.complete && i.naturalWidth > 0))"
                           ".map(i => i.src)")
    problems += [f"image not loaded: {src}" for src in broken]
    wide = page.evaluate("() => document.documentElement.scrollWidth - document.documentElement.clientWidth")
    if wide > 2:
        problems.append(f"the page scrolls sideways by {wide}px (something is cut off or too wide)")
    # A table wider than its box scrolls sideways inside it: a verdict or a note out of view (issue 37).
    for t in page.evaluate(TABLES_JS):
        problems.append(f"table {t['index']} ({t['cols']} columns, first header {t['head']!r}) needs a "
                        f"sideways scroll of {t['over']}px")
    # A figure the page shrinks shrinks its text: at the inline backend's 100 dpi, seaborn's notebook
    # context (11-12 pt) stays at ~9.5 px or more only down to MIN_FIGURE_SCALE of the figure's own width.
    for im in page.evaluate(FIGURES_JS):
        problems.append(f"figure {im['index']} is shown at {im['scale']:.2f} of its width ({im['natural']}px "
                        f"into {im['shown']}px): its text is too small to read; make it narrower")
    # what a reader reads: the prose and the outputs, not the code that prints them
    text = page.evaluate("() => { const b = document.body.cloneNode(true);"
                         " b.querySelectorAll('div.cell_input, pre').forEach(e => e.remove()); return b.innerText; }")
    problems += [f"stale phrase on the page: {phrase!r}" for phrase in STALE if phrase in text]
    blank = page.evaluate("() => Array.from(document.querySelectorAll("
                          "'script[type=\"application/vnd.jupyter.widget-view+json\"]'))"
                          ".filter(s => !s.parentElement.querySelector('.lm-Widget')).length")
    if blank:
        problems.append(f"{blank} widget(s) not rendered")
    for ex in page.evaluate(EXPLORERS_JS):
        if ex["options"] < 2:
            continue
        sel = page.locator(f'select[data-check="{ex["index"]}"]')
        before = page.evaluate(PANEL_JS, ex["index"])
        current = sel.evaluate("s => s.selectedIndex")
        sel.select_option(index=(current + 1) % ex["options"])
        page.wait_for_timeout(200)
        after = page.evaluate(PANEL_JS, ex["index"])
        if before is None or before == after:
            problems.append(f"explorer {ex['index']}: choosing another option did not change the panel")
    return problems


def broken_anchors(html: Path, page: Path) -> list[str]:
    """Links of a page to '<file>#<id>' (or '#<id>') whose target file or id does not exist."""
    import re
    text, out = page.read_text(), []
    for target, anchor in set(re.findall(r'href="([^"#:]*)#([^"]+)"', text)):
        path = (page.parent / target).resolve() if target else page
        if not path.exists():
            out.append(f"broken link: {target}#{anchor} (no such page)")
        elif f'id="{anchor}"' not in path.read_text():
            out.append(f"broken link: {target}#{anchor} (no such anchor)")
    return out


def check_book(html: Path, pages: list[Path] | None = None) -> dict[str, list[str]]:
    """page (relative path) → problems, for every page of a built book (or `pages`)."""
    from playwright.sync_api import sync_playwright
    html = Path(html)
    pages = pages or sorted(p for p in html.rglob("*.html") if "_static" not in p.parts
                            and p.name not in ("search.html", "genindex.html"))
    report: dict[str, list[str]] = {}
    with serve(html) as base, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium(), args=CHROMIUM_FLAGS)
        try:
            context = browser.new_context(viewport={"width": 1280, "height": 900})
            leaving: list[str] = []

            def route(r):        # nothing may leave localhost: note it and refuse it
                host = urlparse(r.request.url).hostname
                if urlparse(r.request.url).scheme in ("http", "https") and host not in LOCAL:
                    leaving.append(r.request.url)
                    return r.abort()
                return r.continue_()
            context.route("**/*", route)
            for path in pages:
                rel = path.relative_to(html).as_posix()
                page = context.new_page()
                leaving.clear()
                try:
                    report[rel] = check_page(page, f"{base}/{rel}")
                finally:
                    page.close()
                report[rel] += [f"request leaving localhost: {u}" for u in leaving]
                report[rel] += broken_anchors(html, path)
        finally:
            browser.close()
    return report


if __name__ == "__main__":
    for page, problems in check_book(Path(sys.argv[1])).items():
        print(page, "OK" if not problems else "")
        for p in problems:
            print("   ", p)
