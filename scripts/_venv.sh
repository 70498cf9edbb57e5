# Sourced by the other scripts: make .venv (once) and install inkpen with the extras named in
# $INKPEN_EXTRAS; install again only when pyproject.toml changes.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
python="${PYTHON:-python3}"
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "inkpen needs Python >= 3.11; set PYTHON=/path/to/python3.11" >&2
  exit 1
fi
if [ ! -x "$venv/bin/python" ]; then
  echo "==> creating $venv" >&2
  "$python" -m venv "$venv"
fi
stamp="$venv/.inkpen-installed-${INKPEN_EXTRAS//,/-}"
want="$(sha256sum "$root/pyproject.toml" | cut -c1-16)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "==> installing inkpen[${INKPEN_EXTRAS}] into $venv (first run only)" >&2
  log="$venv/install.log"
  if ! { "$venv/bin/python" -m pip install --upgrade pip \
         && "$venv/bin/python" -m pip install -e "$root[${INKPEN_EXTRAS}]"; } >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    echo "installation failed; the full log is in $log" >&2
    exit 1
  fi
  echo "$want" > "$stamp"
fi
