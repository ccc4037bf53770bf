"""Checks a built mkdocs site: every internal link resolves, and in headless Chromium the index renders and search works.

    python scripts/check_docs_site.py site

Links: every ``href`` / ``src`` of every HTML page that stays on the site must name
a file of the site (a directory means its ``index.html``) and, with a ``#fragment``,
an element with that id on the target page. Browser: Debian's ``chromium`` driven
through ``chromedriver`` by selenium (no browser download), the site served over
HTTP on localhost (search runs in a web worker, which ``file://`` forbids): the index
page has its title and heading, and typing a query into mkdocs-material's search
box shows results linking to the API reference. Exit status 1 on any failure.
"""

from __future__ import annotations

import functools
import http.server
import sys
import threading
import urllib.parse
from html.parser import HTMLParser
from pathlib import Path

QUERY = "ViewRequirement"


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name == "id" and value:
                self.ids.add(value)
            if name in ("href", "src") and value and tag != "link" or (tag == "link" and name == "href" and value):
                assert value is not None
                self.links.append(value)


def _parse(path: Path) -> _Links:
    p = _Links()
    p.feed(path.read_text(encoding="utf-8", errors="replace"))
    return p


def check_links(site: Path) -> list[str]:
    pages = {p: _parse(p) for p in site.rglob("*.html")}
    errors = []
    checked = 0
    for page, parsed in pages.items():
        for link in parsed.links:
            url = urllib.parse.urlsplit(link)
            if url.scheme or url.netloc or link.startswith(("mailto:", "javascript:", "data:")):
                continue  # off the site
            path = urllib.parse.unquote(url.path)
            if not path:
                target = page
            elif path.startswith("/"):  # root-relative (the 404 page's links)
                target = (site / path.lstrip("/")).resolve()
            else:
                target = (page.parent / path).resolve()
            if target.is_dir():
                target = target / "index.html"
            checked += 1
            if not target.exists():
                errors.append(f"{page.relative_to(site)}: broken link {link!r}")
                continue
            if url.fragment and target.suffix == ".html":
                ids = pages[target].ids if target in pages else _parse(target).ids
                if urllib.parse.unquote(url.fragment) not in ids:
                    errors.append(f"{page.relative_to(site)}: link {link!r}: no id {url.fragment!r} on the target")
    print(f"links: {checked} internal links on {len(pages)} pages checked, {len(errors)} broken")
    return errors


def check_browser(site: Path) -> list[str]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

    handler = functools.partial(Quiet, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,900"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    errors = []
    try:
        driver.get(base)
        wait = WebDriverWait(driver, 30)
        h1 = wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "article h1")))
        if "trajview" not in driver.title or h1.text.strip() != "trajview":
            errors.append(f"index: title {driver.title!r}, heading {h1.text!r}")
        print(f"browser: index rendered: title {driver.title!r}, heading {h1.text!r}")
        # mkdocs-material's search: open the box (its label), type, wait for results.
        box = driver.find_element(By.CSS_SELECTOR, "input[data-md-component='search-query']")
        if not box.is_displayed():  # narrow layouts hide the box behind its icon
            driver.find_element(By.CSS_SELECTOR, "label[for='__search']").click()
        wait.until(ec.element_to_be_clickable(box)).click()
        box.send_keys(QUERY)
        results = wait.until(
            lambda d: d.find_elements(By.CSS_SELECTOR, ".md-search-result__item a") or False
        )
        hrefs = [r.get_attribute("href") or "" for r in results]
        print(f"browser: search {QUERY!r}: {len(hrefs)} results, first {hrefs[:3]}")
        if not any("api/" in h for h in hrefs):
            errors.append(f"search {QUERY!r}: no result in the API reference: {hrefs}")
    except Exception as e:  # a timeout or a missing element: report it with the page's state
        errors.append(f"browser: {type(e).__name__}: {e}; page title {driver.title!r}")
    finally:
        driver.quit()
        server.shutdown()
    return errors


def main() -> int:
    site = Path(sys.argv[1] if len(sys.argv) > 1 else "site").resolve()
    if not (site / "index.html").exists():
        print(f"{site}: no index.html (build the site first: bash scripts/docs.sh)", file=sys.stderr)
        return 1
    errors = check_links(site) + check_browser(site)
    for e in errors:
        print("FAIL", e, file=sys.stderr)
    print("docs site: ok" if not errors else f"docs site: {len(errors)} failures")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
