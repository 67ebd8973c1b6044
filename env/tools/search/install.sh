#!/usr/bin/env bash
# Install check for the search tool. The bundle may be mounted read-only, so this changes
# nothing: it only checks that bin/search can run. Silent on success; safe to run any number of times.
set -eu
# the bundle's directory, found without external commands (PATH may be minimal)
case "${BASH_SOURCE[0]}" in
    */*) here="${BASH_SOURCE[0]%/*}" ;;
    *) here=. ;;
esac
if ! command -v python3 >/dev/null 2>&1; then
    echo "search: python3 is not on PATH" >&2
    exit 1
fi
if [ ! -x "$here/bin/search" ]; then
    echo "search: $here/bin/search is missing or not executable" >&2
    exit 1
fi
