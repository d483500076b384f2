#!/usr/bin/env bash
# Install Tandem's launcher entry and icons for the current user (no root).
#
#   installers/linux/install_desktop_entry.sh [PATH_TO_TANDEM_LAUNCHER]
#
# Without an argument the launcher is the repository's .venv/bin/tandem, or
# `tandem` on PATH. Undo with uninstall_desktop_entry.sh.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
resources="$repo/app/resources"
data_home="${XDG_DATA_HOME:-$HOME/.local/share}"
sizes=(16 32 48 64 128 256 512)

# Check every source first so a failure leaves nothing half-installed.
sources=("$here/tandem.desktop" "$resources/icon.svg")
for size in "${sizes[@]}"; do
    sources+=("$resources/icons/tandem-$size.png")
done
for source in "${sources[@]}"; do
    if [[ ! -f "$source" ]]; then
        echo "Missing $source (run installers/render_icons.py?)" >&2
        exit 1
    fi
done

launcher="${1:-}"
if [[ -z "$launcher" ]]; then
    if [[ -x "$repo/.venv/bin/tandem" ]]; then
        launcher="$repo/.venv/bin/tandem"
    elif command -v tandem >/dev/null 2>&1; then
        launcher="$(command -v tandem)"
    else
        echo "No tandem launcher found: pass its path, or create $repo/.venv first." >&2
        exit 1
    fi
fi
if [[ "$launcher" == *[[:cntrl:]]* ]]; then
    echo "A launcher path with control characters cannot go in a .desktop file." >&2
    exit 1
fi
if [[ ! -x "$launcher" ]]; then
    echo "Not an executable: $launcher" >&2
    exit 1
fi
launcher="$(cd "$(dirname "$launcher")" && pwd)/$(basename "$launcher")"

# Exec= takes a quoted argument in which \ " ` $ are backslash-escaped and % is
# doubled (field codes); the .desktop string syntax then doubles every
# backslash once more. Replacements are quoted so bash 5.2 leaves & alone.
bs='\'
quoted="${launcher//"$bs"/"$bs$bs"}"
quoted="${quoted//'"'/"$bs"'"'}"
quoted="${quoted//'`'/"$bs"'`'}"
quoted="${quoted//'$'/"$bs"'$'}"
quoted="${quoted//'%'/'%%'}"
exec_value="\"${quoted//"$bs"/"$bs$bs"}\""
tryexec_value="${launcher//"$bs"/"$bs$bs"}"

apps="$data_home/applications"
icons="$data_home/icons/hicolor"
mkdir -p "$apps"
entry="$apps/tandem.desktop"

# Literal replacement (no sed): the path may hold any character sed treats specially.
template="$(<"$here/tandem.desktop")"
template="${template//@EXEC@/"$exec_value"}"
template="${template//@TRYEXEC@/"$tryexec_value"}"
printf '%s\n' "$template" >"$entry.tmp"
mv -f "$entry.tmp" "$entry"
echo "installed $entry"

for size in "${sizes[@]}"; do
    dir="$icons/${size}x${size}/apps"
    mkdir -p "$dir"
    install -m 0644 "$resources/icons/tandem-$size.png" "$dir/tandem.png"
done
mkdir -p "$icons/scalable/apps"
install -m 0644 "$resources/icon.svg" "$icons/scalable/apps/tandem.svg"
echo "installed icons under $icons"

# Desktops notice a new icon when the theme directory's mtime changes.
touch "$icons" 2>/dev/null || true
