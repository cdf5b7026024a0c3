"""Every page of the built book in headless Chromium: what a reader's browser would complain about.

No console error or uncaught exception, no request leaving localhost, every image loaded, no page
scrolling sideways, every link to an anchor resolving, every explorer switching its panel when its
dropdown changes (tests/browser.py). Skips, saying what to install, without Chromium or Playwright;
.ci/run installs Chromium, so CI always runs it.
"""
import shutil

import pytest

from browser import check_book, chromium


@pytest.mark.integration
def test_every_page_of_the_book_loads_cleanly_in_chromium(request):
    if chromium() is None:
        pytest.skip("no Chromium: install Debian's `chromium` package (e.g. `sudo apt-get install -y chromium`); "
                    ".ci/run installs it")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        pytest.skip("Playwright is not installed: `.venv/bin/pip install -e '.[test]'`")
    if shutil.which("npm") is None:
        pytest.skip("building the book needs npm once (MathJax and the widget runtime)")
    from skillbook.book import toc_chapters
    html = request.getfixturevalue("workshop_html")    # built after the skip checks: no Chromium, no build
    report = check_book(html)
    chapters = {f"runs/workshop/{c}.html" for c in toc_chapters()}
    assert chapters <= set(report) and "index.html" in report and "bibliography.html" in report
    bad = {page: problems for page, problems in report.items() if problems}
    assert not bad, "\n".join(f"{page}:\n  " + "\n  ".join(p[:300] for p in problems[:8])
                              for page, problems in bad.items())
