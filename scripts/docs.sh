#!/usr/bin/env bash
# Builds the documentation site into site/ (mkdocs.yml; strict: any warning is an error).
# `bash scripts/docs.sh --check` also checks the built site in headless Chromium (scripts/check_docs_site.py):
# the index renders, search finds a query, every internal link resolves.
set -euo pipefail
cd "$(dirname "$0")/.."
export NO_MKDOCS_2_WARNING=1
python -m mkdocs build --strict --clean
if [ "${1:-}" = "--check" ]; then
  python scripts/check_docs_site.py site
fi
