#!/usr/bin/env bash
# Install check for the edit tools. The bundle may be mounted read-only, so this changes nothing:
# it only checks that bin/view, bin/replace and bin/edit can run. Silent on success; safe to run again.
set -eu
case "${BASH_SOURCE[0]}" in
    */*) here="${BASH_SOURCE[0]%/*}" ;;
    *) here=. ;;
esac
if ! command -v python3 >/dev/null 2>&1; then
    echo "edit: python3 is not on PATH" >&2
    exit 1
fi
for tool in view replace edit; do
    if [ ! -x "$here/bin/$tool" ]; then
        echo "edit: $here/bin/$tool is missing or not executable" >&2
        exit 1
    fi
done
