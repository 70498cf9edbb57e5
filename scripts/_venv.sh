# Sourced by the other scripts: make .venv (once) and install inkpen with the extras named in
# $INKPEN_EXTRAS; re-install only when pyproject.toml or the extras change.
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
stamp="$venv/.inkpen-installed"
want="$(cat "$root/pyproject.toml" | sha256sum | cut -c1-16)-${INKPEN_EXTRAS}"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "==> installing inkpen[${INKPEN_EXTRAS}] into $venv" >&2
  "$venv/bin/python" -m pip install --quiet --upgrade pip >&2
  "$venv/bin/python" -m pip install --quiet -e "$root[${INKPEN_EXTRAS}]" >&2
  echo "$want" > "$stamp"
fi
