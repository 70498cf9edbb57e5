# Sourced by the other scripts: make .venv (once) and install inkpen with the extras named in
# $INKPEN_EXTRAS; install again only when pyproject.toml or the set of Python files changes.
#
# The install is editable in setuptools' "strict" mode: a tree of links under build/ that mirrors
# the installed package (inkpen.actors -> actors/, ...), put on sys.path. Edits show at once; a new
# module needs a reinstall, which the stamp below triggers. Unlike the default mode's import hook,
# that tree is visible to pkgutil, so Spark finds the data source by name (pyspark_inkpen), and to
# type checkers.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
python="${PYTHON:-python3}"
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "inkpen needs Python >= 3.11; set PYTHON=/path/to/python3.11" >&2
  exit 1
fi
# Runs started together wait for each other here: one creates and installs, the others find it done.
mkdir -p "$venv"
exec 8>"$venv/.install.lock"
flock -w 1800 8 || { echo "timed out waiting for another run's install into $venv" >&2; exit 1; }
if [ ! -x "$venv/bin/python" ]; then
  echo "==> creating $venv" >&2
  "$python" -m venv "$venv"
fi
stamp="$venv/.inkpen-installed-${INKPEN_EXTRAS//,/-}"
want="$( { cat "$root/pyproject.toml"; cd "$root" && find . -name '*.py' -not -path './.venv/*' \
  -not -path './build/*' -not -path './.git/*' | sort; } | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "==> installing inkpen[${INKPEN_EXTRAS}] into $venv (first run only)" >&2
  log="$venv/install.log"
  if ! { "$venv/bin/python" -m pip install --upgrade pip \
         && "$venv/bin/python" -m pip install --config-settings editable_mode=strict \
              -e "$root[${INKPEN_EXTRAS}]"; } >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    echo "installation failed; the full log is in $log" >&2
    exit 1
  fi
  echo "$want" > "$stamp"
fi
flock -u 8
exec 8>&-
# The checkout's own inkpen/ directory is not the installed package (that maps inkpen.actors to
# actors/, and so on): never let the current directory shadow it, here or in the processes these
# scripts start (Spark's Python workers, CLI subprocesses).
export PYTHONSAFEPATH=1
