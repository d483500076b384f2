#!/usr/bin/env bash
# Remove exactly what install_desktop_entry.sh installed for the current user.
set -euo pipefail

data_home="${XDG_DATA_HOME:-$HOME/.local/share}"
icons="$data_home/icons/hicolor"
sizes=(16 32 48 64 128 256 512)

targets=("$data_home/applications/tandem.desktop" "$icons/scalable/apps/tandem.svg")
for size in "${sizes[@]}"; do
    targets+=("$icons/${size}x${size}/apps/tandem.png")
done

for path in "${targets[@]}"; do
    if [[ -e "$path" || -L "$path" ]]; then
        rm -f -- "$path"
        echo "removed $path"
    fi
done
[[ -d "$icons" ]] && touch "$icons" 2>/dev/null || true
